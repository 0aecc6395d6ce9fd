#!/usr/bin/env bash
# ncu detail (speed of light, warp states, scheduler, occupancy, memory) of one GEMM kernel of
# the flash mxfp4 layer, on the device with .device-bin carried:
#   scripts/device_ncu_detail.sh T KERNEL_REGEX COUNT [TOKENS_LABEL]
#   MOE_EP_RUN_ARGS: more options of the profiled `moe_ep run` (e.g. --shared-expert)
set -u
export LD_LIBRARY_PATH=$PWD/.device-bin:${LD_LIBRARY_PATH:-}
T=$1 RE=$2 N=$3
timeout 150 ncu --clock-control none --kernel-name regex:"$RE" --launch-count "$N" \
  --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section Occupancy \
  --section MemoryWorkloadAnalysis --section LaunchStats --section InstructionStats \
  .device-bin/moe_ep run --device cuda --preset deepseek-v4-flash -T "$T" --no-check --eager --iters 1 --warmup 0 ${MOE_EP_RUN_ARGS:-} \
  > "$OUT/ncu_detail_T$T.txt" 2>&1
echo "ncu T=$T rc=$?"
grep -E "sm90_|Executed Instructions|Executed Ipc A|Duration|DRAM Throughput|Memory Throughput|L2 Hit|Compute \(SM\) Throughput|Registers Per|Achieved Occupancy|Theoretical Occupancy|Warp Cycles Per Issued|Issued Warp Per Scheduler|No Eligible|Active Warps Per Scheduler|Eligible Warps|Stall|stall|Block Limit|Grid Size|Dynamic Shared" \
  "$OUT/ncu_detail_T$T.txt" | sed 's/  */ /g' | head -70
