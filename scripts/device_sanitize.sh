#!/usr/bin/env bash
# compute-sanitizer (memcheck, racecheck, synccheck, initcheck) over the small cases of every GPU
# kernel family: decode, mma.sync, wgmma (Sm90Sanitizer), nvfp4 and the auto path
# (SmallCaseForSanitizers), Q8 (Sm90Kernels.Q8*), EP dispatch / combine / reduce on simulated
# ranks (EpSimOneGpu.CallerQuantizedActivations), weight preparation (Sm90WeightPrep*), the routing
# stage (router ties, hash layers, remap, bad input), and layer chains sharing the scratch, two
# streams from two threads included (Sm90LayerChain). Run on the device from the repository root
# with the binaries carried (scripts/device_pack.sh; MOE_EP_DEVICE_BIN, default .device-bin); logs
# go to $OUT.
#   MOE_EP_SANITIZER_TOOLS="memcheck racecheck synccheck initcheck" (default: all four)
set -u
BIN=${MOE_EP_DEVICE_BIN:-.device-bin}
export LD_LIBRARY_PATH=$PWD/$BIN:$(python3 -c 'import nvidia.nccl as m; print(list(m.__path__)[0])')/lib:${LD_LIBRARY_PATH:-}
T=$BIN/moe_ep_cuda_tests
FILTER='Sm90Sanitizer.*:*SmallCaseForSanitizers*:Sm90Kernels.Q8*:Recipes/EpSimOneGpu.CallerQuantizedActivations/*'
FILTER+=':Packs/Sm90WeightPrep.*:Sm90WeightPrepErrors.*:Sm90Routing.RouterBitwiseOnCraftedTies'
FILTER+=':Sm90Routing.HashLayers*:Sm90Routing.RemapOnly*:Sm90Routing.DeviceBadInput*:Sm90LayerChain.*'
echo "commit $(cat $BIN/COMMIT | tr '\n' ' ')"
for tool in ${MOE_EP_SANITIZER_TOOLS:-memcheck racecheck synccheck initcheck}; do
  start=$(date +%s)
  timeout ${MOE_EP_SANITIZER_TIMEOUT:-130} compute-sanitizer --tool $tool --error-exitcode 86 $T \
    --gtest_filter="$FILTER" > $OUT/sanitizer_$tool.log 2>&1
  echo "$tool rc=$? $(( $(date +%s) - start )) s: tests ok=$(grep -c '^\[       OK' $OUT/sanitizer_$tool.log)" \
       "failed=$(grep -c '^\[  FAILED  \].*(' $OUT/sanitizer_$tool.log) $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' $OUT/sanitizer_$tool.log | tail -1)"
done
