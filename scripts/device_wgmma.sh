#!/usr/bin/env bash
# GPU runner of the warpgroup GEMM forms (FP8 wgmma; rs-fp8 and the bf16 pairs GEMM 1 with the weights in registers):
# SASS summary of their kernels (QGMMA / HGMMA present, no local memory), their tests, compute-sanitizer on the small case, kernel times at the full
# deepseek-v4-flash size, and the layer bench. Prints a short summary last.
#
#   scripts/device_pack.sh build-wgmma .device-bin-wgmma   (here, then on the device:)
#   MOE_EP_DEVICE_BIN=.device-bin-wgmma scripts/device_wgmma.sh
#   MOE_EP_WGMMA_STEPS="sass tests timing decode shared bench small wide table cross nvfp4 sanitizer flash ncu
#                       ncu-source ncu-layer ncu-kernels"
#                              (default: all but decode, shared, small, wide, table, cross, nvfp4, ncu,
#                               ncu-source, ncu-layer and ncu-kernels)
#   decode: the decode forms at small T (mxfp4, nvfp4), K in one part against K split in two
#   small: the layer at T <= 128 (flash, tiny; pro T = 1, 8), default against --decode-split-k 1 (no split
#     at T = 1) and --fuse-quantize-route (nvfp4 flash: default and fused)
#   shared: the shared expert's dot-product kernels at T = 1, 4, row-major and tiled weights, cp.async and bulk copies
#   table: issue 12's table (flash and pro, auto; nvfp4 flash) and the PyTorch peers (flash) in the same call, plotted
#   nvfp4: the nvfp4 layer bench, auto against the f16 wgmma kernels (--kernel wgmma)
#   wide: the layer at T = MOE_EP_WIDE_TOKENS (512, 2048, 8192; flash, pro), auto against FP8 wgmma and the plain
#     wgmma-rs 64x256, or the runs of MOE_EP_WIDE_RUNS ("kernel:options" words, options joined by commas;
#     "base/kernel:..." runs .../moe_ep_base)
#   cross: the decode GEMMs against wgmma-rs 64x256 at T = MOE_EP_CROSS_TOKENS (384 .. 1024), flash and pro
#   ncu-layer: stall samples and issue rates of the layer's own GEMM launches (moe_ep bench, eager, one
#     forward at T = MOE_EP_NCU_TOKENS, options MOE_EP_NCU_LAYER_ARGS, kernels MOE_EP_NCU_KERNEL)
#   ncu-source: per-instruction stall samples (scripts/ncu_stall_ledger.py) of the kernels matching
#     MOE_EP_NCU_KERNEL (default RsFp8TileConfig: the wgmma-rs kernels), MOE_EP_NCU_SKIP launches skipped, 2 profiled
#   MOE_EP_WGMMA_TIMING_VARIANTS  '|'-separated substrings of the kernel-time tests' variant names to run
#                                 (steps timing, ncu-source; default: every variant)
#   MOE_EP_WGMMA_BUDGET=280    seconds for all steps
#
# Outputs ($OUT, default ./device-out): wgmma_summary.txt, wgmma_logs.tar.gz, bench.csv.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/device-out}
BIN=${MOE_EP_DEVICE_BIN:-.device-bin-wgmma}
STEPS=${MOE_EP_WGMMA_STEPS:-sass tests timing bench sanitizer flash}
BUDGET=${MOE_EP_WGMMA_BUDGET:-280}
WORK=$(mktemp -d /tmp/moe_ep_wgmma.XXXX)
mkdir -p "$OUT"
export LD_LIBRARY_PATH="$PWD/$BIN:${LD_LIBRARY_PATH:-}"
TESTS=$BIN/moe_ep_cuda_tests CLI=$BIN/moe_ep
SUMMARY=$WORK/wgmma_summary.txt
# shellcheck source=scripts/device_steps.sh
source scripts/device_steps.sh
gtest_counts() {
  echo "passed=$(grep -c "^\[       OK \]" "$1") failed=$(grep -c "^\[  FAILED  \].*(" "$1") skipped=$(grep -c "^\[  SKIPPED \].*(" "$1")"
}

note "gpu: $(nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader 2>&1)"
note "binaries: $BIN ($(tr '\n' ' ' < "$BIN/COMMIT" 2>/dev/null))  date: $(date -u +%Y-%m-%dT%H:%MZ)"
FAILED=0

# 1. SASS of the wgmma kernels: QGMMA count, local memory (LDL/STL), instructions per function.
if has sass; then
  for o in "$BIN"/sm90_*_gemm.cu.o; do
    [[ -f "$o" ]] || continue
    cuobjdump -sass "$o" > "$WORK/$(basename "$o" .cu.o).sass" 2>&1
    python3 - "$WORK/$(basename "$o" .cu.o).sass" >> "$SUMMARY" <<'PY'
import re, sys, collections
fn, stats = None, collections.OrderedDict()
for line in open(sys.argv[1]):
    m = re.search(r"Function : (\S+)", line)
    if m:
        fn = m.group(1); stats[fn] = collections.Counter(); continue
    m = re.search(r"/\*[0-9a-f]{4,}\*/\s+(@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]+)", line)
    if fn and m:
        op = m.group(2).split(".")[0]
        stats[fn]["all"] += 1; stats[fn][op] += 1
for fn, c in stats.items():
    tile = re.search(r"ILi(\d+)ELi(\d+)ELi(\d+)ELb([01])", fn)
    family = ("wgmma-rs " if "RsFp8TileConfig" in fn else "nvfp4-wgmma " if "Nvfp4F16RsWeights" in fn
              else "rs-bf16 " if "Mxfp4Bf16RsWeights" in fn else "decode " if "decode" in fn
              else "wgmma " if "wgmma" in fn else "mma.sync ")
    if "Rs16WideTileConfig" in fn: family += "x256 "
    if "q8_to_rs" in fn: family = "q8->bf16 "
    name = family + ("gemm1" if "gemm1" in fn or "Gemm1" in fn else "gemm2") + \
        (f" {tile.group(1)}x{tile.group(2)} s{tile.group(3)} {'quad' if tile.group(4) == '1' else 'lane'}" if tile else "")
    print(f"  sass {name}: {c['all']} instr, QGMMA {c['QGMMA']}, HGMMA {c['HGMMA']}, HMMA {c['HMMA']}, "
          f"LDL {c['LDL']}, STL {c['STL']}, FFMA {c['FFMA']}, PRMT {c['PRMT']}, LDS {c['LDS']}, STS {c['STS']}, "
          f"LDGSTS {c['LDGSTS']}, SYNCS {sum(v for k, v in c.items() if k.startswith('SYNCS'))}, WARPGROUP {c['WARPGROUP']}")
PY
  done
fi

# 2. Tests: host checks, the device codec / conversion probes, the routing (alone and fused with
# Q8), kernel-level comparisons with mma.sync, the layers forced onto each warpgroup family. In
# three processes, each with its own limit: a hang (rc 124) in one is reported with its last test
# and the others still run (a killed process leaves the GPU to the next one).
if has tests; then
  group=0
  for filter in 'Sm90Kernels.Permute*:Sm90SharedExpert.Tiled*:Sm90Fp4Codec*:Sm90RsCodec*:Sm90Config*' \
                'Sm90WgmmaKernels.*:Sm90Nvfp4Kernels.*' 'Sm90WgmmaLayer.*:*Sm90Decode.FusedQuantizeRoute*:Sm90DecodeSplit*'; do
    group=$((group + 1))
    run_limited 150 "$TESTS" --gtest_filter="$filter" > "$WORK/tests$group.log" 2>&1
    rc=$?
    note "tests $group ($filter): rc=$rc $(gtest_counts "$WORK/tests$group.log")  ($(elapsed) s)"
    (( rc != 0 )) && FAILED=1
    if (( rc == 124 )); then  # a hang: the test it was in
      grep -E "^\[ RUN|^\[ wgmma" "$WORK/tests$group.log" | tail -3 | sed 's/^/  last: /' >> "$SUMMARY"
    fi
    grep -E "^\[ wgmma|^\[ sm90|^\[ decode|Failure|Expected|Which is|actual|FAILED" "$WORK/tests$group.log" | head -60 |
      sed 's/^/  /' >> "$SUMMARY"
  done
fi

# 3. Kernel times at the full flash size (random bytes, checked against mma.sync).
if has timing; then
  MOE_EP_WGMMA_TIMING=1 run_limited 60 "$TESTS" --gtest_filter='Sm90WgmmaTiming.FlashSize*' > "$WORK/timing.log" 2>&1
  note "timing: rc=$? $(gtest_counts "$WORK/timing.log")  ($(elapsed) s)"
  grep -E "^\[ wgmma|Failure|Expected|Which is" "$WORK/timing.log" | head -30 | sed 's/^/  /' >> "$SUMMARY"
fi

# 3c. The decode forms at small T: K in one part against K split in two.
if has decode; then
  MOE_EP_WGMMA_TIMING=1 run_limited 60 "$TESTS" --gtest_filter='Sm90WgmmaTiming.DecodeFormsAtSmallT' \
    > "$WORK/decode.log" 2>&1
  note "decode: rc=$? $(gtest_counts "$WORK/decode.log")  ($(elapsed) s)"
  grep -E "^\[ decode|Failure|Expected|Which is" "$WORK/decode.log" | head -20 | sed 's/^/  /' >> "$SUMMARY"
fi

# 3d. The shared expert's decode kernels: row-major against tiled weights.
if has shared; then
  MOE_EP_WGMMA_TIMING=1 run_limited 60 "$TESTS" --gtest_filter='Sm90SharedExpertTiming.*' > "$WORK/shared.log" 2>&1
  note "shared: rc=$? $(gtest_counts "$WORK/shared.log")  ($(elapsed) s)"
  grep -E "^\[ shared|Failure|Expected|Which is" "$WORK/shared.log" | head -40 | sed 's/^/  /' >> "$SUMMARY"
fi

# 4. The layer bench (CUDA graph replays), wgmma forced and auto.
if has bench && (( FAILED == 0 )); then
  run_limited 70 "$CLI" bench --device cuda --preset deepseek-v4-flash --kernel "${MOE_EP_BENCH_GEMM:-auto}" \
    --tokens "${MOE_EP_BENCH_TOKENS:-1,128,2048,8192}" --iters 20 --warmup 3 --compute-tflops 1457 \
    --bandwidth-gbps 4240 --csv "$OUT/bench.csv" > "$WORK/bench.log" 2>&1
  note "bench (--kernel ${MOE_EP_BENCH_GEMM:-auto}): rc=$?  ($(elapsed) s)"
  grep -vE "^#|^$" "$WORK/bench.log" | tail -8 | sed 's/^/  /' >> "$SUMMARY"
fi

# 4a. Small T in the layer: the default plan against no K split at T = 1 (--decode-split-k 1) and the
# fused quantize + routing launch (--fuse-quantize-route).
if has small; then  # timings only: the tests above check these plans' bits
  fused="--fuse-quantize-route"
  nv="--backend nvfp4"
  for run in "flash:" "flash:--decode-split-k 1" "flash:$fused" \
             "flash:$nv" "flash:$nv $fused" "pro:" "pro:$fused" "tiny:" "tiny:$fused"; do
    preset=${run%%:*} pin=${run#*:}
    [[ $preset != tiny ]] && preset=deepseek-v4-$preset
    tokens=${MOE_EP_SMALL_TOKENS:-1,8,32,128}
    [[ $preset == deepseek-v4-pro ]] && tokens=1,8
    # shellcheck disable=SC2086  # $pin is a list of options
    run_limited 60 "$CLI" bench --device cuda --preset $preset --tokens "$tokens" --iters 50 --warmup 5 \
      --compute-tflops 1457 --bandwidth-gbps 4240 $pin > "$WORK/small.log" 2>&1
    note "bench small $preset [${pin:-default}]: rc=$?  ($(elapsed) s)"
    grep -E "^ +[0-9]+ " "$WORK/small.log" | sed 's/^/  /' >> "$SUMMARY"
  done
fi

# bench_kernels STEP TOKENS RUN...: `moe_ep bench` on flash and pro at TOKENS, once per RUN
# ("kernel:options"; "base/kernel:options" runs $BIN/moe_ep_base, an earlier build carried for a
# same-call comparison), each run's table into the summary.
bench_kernels() {
  local step=$1 tokens=$2 preset run kernel pin cli
  shift 2
  for preset in flash pro; do
    for run in "$@"; do
      kernel=${run%%:*} pin=${run#*:} cli=$CLI
      pin=${pin//,/ }
      if [[ $kernel == base/* ]]; then kernel=${kernel#base/} cli=$BIN/moe_ep_base; fi
      # shellcheck disable=SC2086  # $pin is a list of options
      run_limited 90 "$cli" bench --device cuda --preset deepseek-v4-$preset --kernel "$kernel" $pin \
        --tokens "$tokens" --iters 20 --warmup 3 > "$WORK/$step.log" 2>&1
      rc=$?
      note "bench $step $preset [$(basename "$cli") $kernel ${pin:-}]: rc=$rc  ($(elapsed) s)"
      grep -E "^ +[0-9]+ " "$WORK/$step.log" | sed 's/^/  /' >> "$SUMMARY"
    done
  done
}

# 4a'. Prefill in the layer: auto (wgmma-rs 64x256, narrow tail tiles up to 64 rows per expert)
# against FP8 wgmma and the plain 64x256 form, flash and pro.
if has wide; then  # timings only: Kernels/Sm90WgmmaFlashLayer checks the plans' results
  # shellcheck disable=SC2086  # MOE_EP_WIDE_RUNS is a list of runs
  bench_kernels wide "${MOE_EP_WIDE_TOKENS:-512,2048,8192}" ${MOE_EP_WIDE_RUNS:-auto: wgmma: wgmma-rs:--tile,64x256}
fi

# 4a''. Issue 12's table: auto on flash and pro at its T, nvfp4 flash, the PyTorch peers (flash)
# in the same call, one plot of flash and the peers.
if has table; then  # timings only: the tests above check auto's plans
  PYTHONUNBUFFERED=1 run_limited 200 python3 bench/torch_peer.py --preset deepseek-v4-flash \
    --tokens "${MOE_EP_TABLE_PEER:-1,8,128,512,2048,8192}" --iters 20 --warmup 3 --csv "$OUT/table_torch.csv" \
    > "$WORK/table_torch.log" 2>&1
  note "table torch peers (flash): rc=$?  ($(elapsed) s)"
  grep -vE "^$" "$WORK/table_torch.log" | tail -10 | sed 's/^/  /' >> "$SUMMARY"
  plot=(); [[ -s $OUT/table_torch.csv ]] && plot=(--plot "$OUT/table_flash.svg" --plot-with "$OUT/table_torch.csv")
  run_limited 150 "$CLI" bench --device cuda --preset deepseek-v4-flash --tokens "${MOE_EP_TABLE_FLASH:-1,8,128,512,2048,6144,8192}" \
    --iters 20 --warmup 3 --csv "$OUT/table_flash.csv" "${plot[@]}" > "$WORK/table_flash.log" 2>&1
  note "table flash: rc=$?  ($(elapsed) s)"
  grep -E "^ +[0-9]+ " "$WORK/table_flash.log" | sed 's/^/  /' >> "$SUMMARY"
  run_limited 120 "$CLI" bench --device cuda --preset deepseek-v4-pro --tokens "${MOE_EP_TABLE_PRO:-1,128,8192}" \
    --iters 20 --warmup 3 --csv "$OUT/table_pro.csv" > "$WORK/table_pro.log" 2>&1
  note "table pro: rc=$?  ($(elapsed) s)"
  grep -E "^ +[0-9]+ " "$WORK/table_pro.log" | sed 's/^/  /' >> "$SUMMARY"
  run_limited 90 "$CLI" bench --device cuda --preset deepseek-v4-flash --backend nvfp4 \
    --tokens "${MOE_EP_TABLE_NVFP4:-1,128,2048,8192}" --iters 20 --warmup 3 --csv "$OUT/table_nvfp4.csv" \
    > "$WORK/table_nvfp4.log" 2>&1
  note "table nvfp4 flash: rc=$?  ($(elapsed) s)"
  grep -E "^ +[0-9]+ " "$WORK/table_nvfp4.log" | sed 's/^/  /' >> "$SUMMARY"
fi

# 4b. nvfp4: auto (decode, then nvfp4-wgmma from 22 rows per expert) against nvfp4-wgmma at every T,
# the same graph-replay bench.
if has nvfp4; then  # timings only: read them with the tests above
  run_limited 90 "$CLI" bench --device cuda --preset deepseek-v4-flash --backend nvfp4 --variants auto,wgmma \
    --tokens "${MOE_EP_NVFP4_TOKENS:-512,2048,8192}" --iters 20 --warmup 3 --compute-tflops 1457 \
    --bandwidth-gbps 4240 --csv "$OUT/bench_nvfp4.csv" > "$WORK/bench_nvfp4.log" 2>&1
  note "bench nvfp4 (auto, wgmma): rc=$?  ($(elapsed) s)"
  grep -vE "^#|^$" "$WORK/bench_nvfp4.log" | tail -10 | sed 's/^/  /' >> "$SUMMARY"
fi

# 5. compute-sanitizer racecheck (and memcheck) on the small case.
if has sanitizer && (( FAILED == 0 )); then
  for tool in ${MOE_EP_SANITIZER_TOOLS:-racecheck memcheck}; do
    run_limited 100 compute-sanitizer --tool "$tool" --error-exitcode 86 "$TESTS" \
      --gtest_filter='Sm90WgmmaKernels.SmallCaseForSanitizers' > "$WORK/sanitizer_$tool.log" 2>&1
    note "sanitizer $tool: rc=$? ($(grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$WORK/sanitizer_$tool.log" | tail -1))  ($(elapsed) s)"
  done
fi

# 6. The deepseek-v4-flash layer (E = 256) forced onto wgmma against the CPU layer, 20 reruns.
if has flash; then
  run_limited 300 "$TESTS" --gtest_filter="${MOE_EP_FLASH_FILTER:-Kernels/Sm90WgmmaFlashLayer.*}" > "$WORK/flash.log" 2>&1
  rc=$?
  note "flash layer: rc=$rc $(gtest_counts "$WORK/flash.log")  ($(elapsed) s)"
  (( rc != 0 )) && FAILED=1
  grep -E "^\[ wgmma|Failure|Expected|Which is|FAILED" "$WORK/flash.log" | head -30 | sed 's/^/  /' >> "$SUMMARY"
fi

# 7. ncu of the wgmma kernels at T = 8192 (speed of light, warp states).
if has ncu; then
  MOE_EP_WGMMA_TIMING=1 MOE_EP_WGMMA_TIMING_TOKENS=${MOE_EP_NCU_TOKENS:-8192} MOE_EP_WGMMA_TIMING_ITERS=1 \
    run_limited 150 ncu --clock-control none --kernel-name regex:'sm90_(mma|mxfp4_wgmma|rs)_kernel' --launch-count 6 \
    --section SpeedOfLight --section WarpStateStats --section LaunchStats --section Occupancy \
    "$TESTS" --gtest_filter='Sm90WgmmaTiming.*' > "$WORK/ncu.log" 2>&1
  note "ncu: rc=$?  ($(elapsed) s)"
  grep -E "sm90_mxfp4|Duration|Compute \(SM\) Throughput|Memory Throughput|DRAM Throughput|Issue Slots|Stall|Registers Per" \
    "$WORK/ncu.log" | sed 's/  */ /g' | head -70 | sed 's/^/  /' >> "$SUMMARY"
fi

# 7b. Where auto's decode bucket should end: the decode GEMMs against wgmma-rs 64x256 at T around
# the decode bound (flash, pro).
if has cross; then
  bench_kernels cross "${MOE_EP_CROSS_TOKENS:-384,512,640,768,1024}" "decode:" "wgmma-rs:--tile,64x256"
fi

# 7c. The same stall samples as ncu-source, of the layer's own launches: `moe_ep bench` eager, one
# forward at T = MOE_EP_NCU_TOKENS with MOE_EP_NCU_LAYER_ARGS (default: auto), the kernels matching
# MOE_EP_NCU_KERNEL.
if has ncu-layer; then
  # shellcheck disable=SC2086  # the args are a list of options
  run_limited 150 ncu --clock-control none --kernel-name-base demangled --kernel-name regex:"${MOE_EP_NCU_KERNEL:-RsFp8TileConfig}" \
    --launch-skip "${MOE_EP_NCU_SKIP:-0}" --launch-count 2 --section SourceCounters --section WarpStateStats \
    --section SpeedOfLight --section ComputeWorkloadAnalysis -f -o "$WORK/layer" \
    "$CLI" bench --device cuda --preset deepseek-v4-flash --tokens "${MOE_EP_NCU_TOKENS:-2048}" --eager --iters 1 \
    --warmup 0 ${MOE_EP_NCU_LAYER_ARGS:-} > "$WORK/ncu_layer.log" 2>&1
  note "ncu-layer: rc=$?  ($(elapsed) s)"
  ncu -i "$WORK/layer.ncu-rep" --page source --csv --print-source sass > "$WORK/layer.csv" 2>> "$WORK/ncu_layer.log"
  python3 scripts/ncu_stall_ledger.py "$WORK/layer.csv" --top 40 >> "$SUMMARY" 2>&1
  ncu -i "$WORK/layer.ncu-rep" --page details --section WarpStateStats --section SpeedOfLight \
    --section ComputeWorkloadAnalysis 2>/dev/null |
    grep -E "Stall|Warp Cycles|Duration|Issue Slots|Issued Ipc|SM Busy|Executed Ipc|Compute \(SM\)|Memory Throughput|Eligible|Active Warps" |
    sed 's/  */ /g' | head -60 | sed 's/^/  /' >> "$SUMMARY"
fi

# 7d. Every kernel of one eager forward at T = MOE_EP_NCU_TOKENS (flash), its duration under ncu
# (kernels serialized, clocks as found), for this build and the base build: where a kernel-level
# gain goes in the layer.
if has ncu-kernels; then
  for cli in "$CLI" "$BIN/moe_ep_base"; do
    [[ -x $cli ]] || continue
    # shellcheck disable=SC2086  # the args are a list of options
    run_limited 120 ncu --clock-control none --kernel-name-base demangled --metrics gpu__time_duration.sum --csv \
      "$cli" bench --device cuda --preset deepseek-v4-${MOE_EP_NCU_PRESET:-flash} --tokens "${MOE_EP_NCU_TOKENS:-8192}" \
      --eager --iters 1 --warmup 0 --compute-tflops 1457 --bandwidth-gbps 4240 ${MOE_EP_NCU_LAYER_ARGS:-} \
      > "$WORK/ncu_kernels_$(basename "$cli").csv" 2>&1
    rc=$?
    note "ncu-kernels $(basename "$cli"): rc=$rc  ($(elapsed) s)"
    python3 - "$WORK/ncu_kernels_$(basename "$cli").csv" >> "$SUMMARY" <<'PY'
import csv, re, sys
rows = [r for r in csv.reader(l for l in open(sys.argv[1]) if l.startswith('"'))]
if not rows:
    sys.exit("  (no ncu rows)")
head, body = rows[0], rows[1:]
ki, vi, ui = head.index("Kernel Name"), head.index("Metric Value"), head.index("Metric Unit")
total, prep = 0.0, 0
for r in body:
    if "sm90_" not in r[ki]:  # the weight preparation of Layer::create, not the forward
        prep += 1
        continue
    scale = {"nsecond": 1e-3, "ns": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3, "ms": 1e3, "second": 1e6,
             "s": 1e6}
    if r[ui] not in scale:
        print(f"  (unknown duration unit '{r[ui]}')")
        sys.exit(0)
    us = float(r[vi].replace(",", "")) * scale[r[ui]]
    total += us
    name = re.sub(r"moe_ep::(cuda::)?|void |\(.*", "", r[ki])[:140]
    print(f"  {us:9.1f} us  {name}")
print(f"  {total:9.1f} us  sum of {len(body) - prep} launches ({prep} weight-preparation launches left out)")
PY
  done
fi

# 8. Per-instruction stall samples (source page) of two launches of the kernels matching
# MOE_EP_NCU_KERNEL at T = MOE_EP_NCU_TOKENS, from the kernel-time test (one run per variant).
if has ncu-source; then
  MOE_EP_WGMMA_TIMING=1 MOE_EP_WGMMA_TIMING_TOKENS=${MOE_EP_NCU_TOKENS:-2048} MOE_EP_WGMMA_TIMING_ITERS=1 \
    run_limited 150 ncu --clock-control none --kernel-name-base demangled --kernel-name regex:"${MOE_EP_NCU_KERNEL:-RsFp8TileConfig}" \
    --launch-skip "${MOE_EP_NCU_SKIP:-0}" --launch-count 2 --section SourceCounters --section WarpStateStats \
    --section MemoryWorkloadAnalysis --section SpeedOfLight \
    -f -o "$WORK/source" "$TESTS" --gtest_filter='Sm90WgmmaTiming.FlashSize*' > "$WORK/ncu_source.log" 2>&1
  note "ncu-source: rc=$?  ($(elapsed) s)"
  ncu -i "$WORK/source.ncu-rep" --page source --csv --print-source sass > "$WORK/source.csv" 2>> "$WORK/ncu_source.log"
  python3 scripts/ncu_stall_ledger.py "$WORK/source.csv" --top 30 >> "$SUMMARY" 2>&1
  ncu -i "$WORK/source.ncu-rep" --page details --section WarpStateStats 2>/dev/null | grep -E "Stall|Warp Cycles" |
    sed 's/  */ /g' | head -40 | sed 's/^/  /' >> "$SUMMARY"
  # Where the bytes come from: L1 / L2 hit rates and throughputs (the A rows are re-read by every n tile).
  ncu -i "$WORK/source.ncu-rep" --page details --section MemoryWorkloadAnalysis --section SpeedOfLight 2>/dev/null |
    grep -E "Duration|Memory Throughput|DRAM Throughput|L1/TEX Hit|L2 Hit|Mem Busy|Max Bandwidth|L2 Cache Throughput|L1/TEX Cache Throughput" |
    sed 's/  */ /g' | head -24 | sed 's/^/  /' >> "$SUMMARY"
fi

note "total $(elapsed) s"
cp "$SUMMARY" "$OUT/wgmma_summary.txt"
tar -czf "$OUT/wgmma_logs.tar.gz" -C "$WORK" . 2>/dev/null
echo
echo "==== wgmma device summary ===="
cat "$SUMMARY"
