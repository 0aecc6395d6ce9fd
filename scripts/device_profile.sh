#!/usr/bin/env bash
# Profiling on the GPU machine: bench sweep of the flash mxfp4 layer, per-kernel times (ncu,
# clocks left alone) and the SpeedOfLight / warp-state sections of the grouped GEMMs.
#   MOE_EP_DEVICE_BIN (default .device-bin), MOE_EP_PROFILE_TOKENS (default 1,128,2048,8192),
#   MOE_EP_PROFILE_DETAIL_TOKENS (default "1 2048"): T values profiled in detail.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/device-out}
BIN=${MOE_EP_DEVICE_BIN:-.device-bin}
TOKENS=${MOE_EP_PROFILE_TOKENS:-1,128,2048,8192}
DETAIL=${MOE_EP_PROFILE_DETAIL_TOKENS:-1 2048}
PRESET=${MOE_EP_PROFILE_PRESET:-deepseek-v4-flash}
mkdir -p "$OUT"
export LD_LIBRARY_PATH="$PWD/$BIN:${LD_LIBRARY_PATH:-}"
CLI=$BIN/moe_ep
echo "commit: $(cat "$BIN/COMMIT" | tr '\n' ' ')"
timeout 200 "$CLI" bench --device cuda --preset "$PRESET" --tokens "$TOKENS" --csv "$OUT/bench.csv" \
  > "$OUT/bench.log" 2>&1; echo "bench rc=$?"
for T in $DETAIL; do
  timeout 120 ncu --clock-control none --kernel-name regex:'sm90_' --launch-skip 5 --launch-count 5 \
    --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats \
    --section MemoryWorkloadAnalysis \
    "$CLI" run --device cuda --preset "$PRESET" -T "$T" --no-check --eager --iters 2 --warmup 0 \
    > "$OUT/ncu_detail_T$T.txt" 2>&1; echo "ncu detail T=$T rc=$?"
  grep -E "sm90_|Duration|Memory Throughput|DRAM Throughput|Compute \(SM\) Throughput|Registers Per|Achieved Occupancy|Warp Cycles Per Issued|Block Limit Reg|Grid Size" \
    "$OUT/ncu_detail_T$T.txt" | sed 's/  */ /g' | head -80
done
grep -vE "^#|^$" "$OUT/bench.log" | tail -12
