#!/usr/bin/env bash
# One device call for the rs-fp8-k128 forms: their tests, the layer bench of auto against both
# k128 tiles (and, where carried, $BIN/moe_ep_base: another build's CLI), compute-sanitizer
# racecheck on the small case, the flash layer tests. Each step appends to $OUT/k128_summary.txt
# as it ends, so a call cut off keeps what ran.
#   scripts/device_pack.sh build-cuda   (here, then on the device:)
#   bash scripts/device_k128.sh
#   MOE_EP_K128_STEPS="tests bench sanitizer flash"   MOE_EP_K128_BUDGET=420 (seconds for all steps)
#   MOE_EP_K128_RUNS  the bench runs, "kernel:options" words (options joined by commas;
#                     "base/kernel:..." runs moe_ep_base)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/device-out}
BIN=${MOE_EP_DEVICE_BIN:-.device-bin}
STEPS=${MOE_EP_K128_STEPS:-tests bench sanitizer flash}
BUDGET=${MOE_EP_K128_BUDGET:-420}
RUNS=${MOE_EP_K128_RUNS:-auto: wgmma-rs-k128: wgmma-rs-k128:--tile,128x128}
mkdir -p "$OUT"
export LD_LIBRARY_PATH="$PWD/$BIN:${LD_LIBRARY_PATH:-}"
TESTS=$BIN/moe_ep_cuda_tests
START=$(date +%s)
SUMMARY=$OUT/k128_summary.txt
note() { echo "$*" | tee -a "$SUMMARY"; }
left() { echo $(( BUDGET - ($(date +%s) - START) - 5 )); }
limited() {  # limited SECONDS cmd...: the smaller of SECONDS and the budget left
  local s=$1 l; shift; l=$(left)
  (( l < s )) && s=$l
  if (( s <= 5 )); then echo "skipped: budget spent" >&2; return 124; fi
  timeout "$s" "$@"
}
has() { [[ " $STEPS " == *" $1 "* ]]; }
counts() {
  echo "passed=$(grep -c "^\[       OK \]" "$1") failed=$(grep -c "^\[  FAILED  \].*(" "$1") skipped=$(grep -c "^\[  SKIPPED \].*(" "$1")"
}
note "gpu: $(nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader 2>&1)"
note "binaries: $BIN ($(tr '\n' ' ' < "$BIN/COMMIT"))  date: $(date -u +%Y-%m-%dT%H:%MZ)"

if has tests; then
  limited 200 "$TESTS" --gtest_filter='Sm90RsCodecDevice.*:Sm90WgmmaKernels.*:Sm90WgmmaLayer.*:Sm90Sanitizer.SmallCaseOfEveryGemmFamily' \
    > "$OUT/tests.log" 2>&1
  note "tests: rc=$? $(counts "$OUT/tests.log")  ($(( $(date +%s) - START )) s)"
  grep -E "^\[ wgmma|Failure|Expected|Which is|FAILED" "$OUT/tests.log" | head -60 | sed 's/^/  /' >> "$SUMMARY"
fi

if has bench; then
  for preset in flash pro; do
    tokens=2048,8192; [[ $preset == pro ]] && tokens=8192
    for run in $RUNS; do
      kernel=${run%%:*} pin=${run#*:} cli=$BIN/moe_ep
      pin=${pin//,/ }
      if [[ $kernel == base/* ]]; then kernel=${kernel#base/} cli=$BIN/moe_ep_base; fi
      [[ -x $cli ]] || continue
      # shellcheck disable=SC2086  # $pin is a list of options
      limited 90 "$cli" bench --device cuda --preset deepseek-v4-$preset --kernel "$kernel" $pin --tokens $tokens \
        --iters 20 --warmup 3 --csv "$OUT/bench_${preset}_$(basename "$cli")_${kernel}${pin// /}.csv" > "$OUT/bench.log" 2>&1
      note "bench $preset [$(basename "$cli") $kernel ${pin:-}]: rc=$?  ($(( $(date +%s) - START )) s)"
      grep -E "^ +[0-9]+ |plan|T=" "$OUT/bench.log" | head -12 | sed 's/^/  /' >> "$SUMMARY"
    done
  done
fi

if has sanitizer; then
  limited 90 compute-sanitizer --tool racecheck --error-exitcode 86 "$TESTS" \
    --gtest_filter='Sm90WgmmaKernels.SmallCaseForSanitizers' > "$OUT/racecheck.log" 2>&1
  note "racecheck: rc=$? ($(grep -E "RACECHECK SUMMARY|ERROR SUMMARY" "$OUT/racecheck.log" | tail -1))  ($(( $(date +%s) - START )) s)"
fi

if has flash; then
  limited 200 "$TESTS" --gtest_filter='Kernels/Sm90WgmmaFlashLayer.*k128*' > "$OUT/flash.log" 2>&1
  note "flash layer: rc=$? $(counts "$OUT/flash.log")  ($(( $(date +%s) - START )) s)"
  grep -E "^\[ wgmma|Failure|Expected|Which is|FAILED" "$OUT/flash.log" | head -20 | sed 's/^/  /' >> "$SUMMARY"
fi
note "total $(( $(date +%s) - START )) s"
