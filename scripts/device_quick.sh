#!/usr/bin/env bash
# A short device call: the split decode and shared-expert forms' correctness, then their timings and the rs fp8 work split at T = 2048.
export LD_LIBRARY_PATH=$PWD/.device-bin:$LD_LIBRARY_PATH
T=.device-bin/moe_ep_cuda_tests C=.device-bin/moe_ep
nvidia-smi --query-gpu=name,clocks.sm --format=csv,noheader
timeout 80 $T --gtest_filter='Sm90WgmmaKernels.SplitDecode*:Sm90DecodeSplit*:Sm90SharedExpert.Tiled*' > /tmp/quick_tests.log 2>&1
grep -E '^\[ +(OK|FAILED) |Failure|Expected|Which|h err' /tmp/quick_tests.log | head -40
echo "layer split cases: $(grep -c 'rel_err=' /tmp/quick_tests.log), worst $(grep -o 'rel_err=[0-9.e+-]*' /tmp/quick_tests.log | sort -t= -k2 -g | tail -1)"
for pin in "" "--decode-split-k 2"; do timeout 30 $C bench --device cuda --preset deepseek-v4-flash --tokens 1,2,4,8 --iters 50 --warmup 5 $pin 2>&1 | grep -E '^ +[0-9]+ ' | sed "s/^/[${pin:-default}] /"; done
MOE_EP_WGMMA_TIMING=1 MOE_EP_WGMMA_TIMING_TOKENS=1,2,4,8 timeout 40 $T --gtest_filter='Sm90WgmmaTiming.DecodePrefetchDepthAtSmallT' 2>&1 | grep -E '^\[ decode|Failure' | grep -v nvfp4 | head -16
MOE_EP_WGMMA_TIMING=1 timeout 45 $T --gtest_filter='Sm90SharedExpertTiming.*' 2>&1 | grep -E '^\[ shared|Failure' | head -16
MOE_EP_WGMMA_TIMING=1 MOE_EP_WGMMA_TIMING_TOKENS=2048 timeout 60 $T --gtest_filter='Sm90WgmmaTiming.RsFp8WorkSplit' 2>&1 | grep -E '^\[ rs-split|Failure' | head -30
