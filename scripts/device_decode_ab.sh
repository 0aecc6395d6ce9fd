#!/usr/bin/env bash
# GPU runner of a decode-bucket change, A/B against a base build in the same call: y digests of
# every build (bitwise equal where the change keeps the products and their order), the layer bench
# of the builds interleaved (flash T = 1 .. 512, pro T = 1, 8; graph replays), the decode GEMMs'
# GPU tests and compute-sanitizer racecheck / synccheck on the small case with the new build, and
# ncu of one forward's kernels at flash T = 1 for every build (duration, DRAM throughput, issue and
# warp stall reasons). Prints a short summary last.
#
#   (here)  scripts/device_pack_ab.sh base=REV new=REV [more=REV ...]: the builds in one archive,
#           and the device command with MOE_EP_AB_ARCHIVE (unpacked there first), MOE_EP_AB_BINS
#           (the builds' folders) and MOE_EP_DEVICE_BIN (the one with the test binary)
#   (device) that command, carry [".device-ab"]
#   MOE_EP_AB_STEPS="digest bench tests sanitize ncu" (default: all, in that order)
#   MOE_EP_AB_TOKENS (default 1,2,8,32,128,512), MOE_EP_AB_BUDGET=540 seconds for all steps
#
# Outputs ($OUT, default ./device-out): decode_ab_summary.txt, decode_ab_logs.tar.gz, bench_*.csv.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
OUT=${OUT:-$PWD/device-out}
[[ -n "${MOE_EP_AB_ARCHIVE:-}" ]] && tar -xzf "$MOE_EP_AB_ARCHIVE"
NEW=${MOE_EP_DEVICE_BIN:-.device-bin}
BASE=${MOE_EP_BASE_BIN:-.device-bin-base}
BINS=${MOE_EP_AB_BINS:-$BASE $NEW}  # every build benched and digested; the tests run on NEW
STEPS=${MOE_EP_AB_STEPS:-digest bench tests sanitize ncu}
TOKENS=${MOE_EP_AB_TOKENS:-1,2,8,32,128,512}
BUDGET=${MOE_EP_AB_BUDGET:-540}
WORK=$(mktemp -d /tmp/moe_ep_ab.XXXX)
mkdir -p "$OUT"
export LD_LIBRARY_PATH="$PWD/$NEW:${LD_LIBRARY_PATH:-}"
SUMMARY=$WORK/decode_ab_summary.txt
# shellcheck source=scripts/device_steps.sh
source scripts/device_steps.sh
note "gpu: $(nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader 2>&1)"
for b in $BINS; do note "build $b: $(tr '\n' ' ' < "$b/COMMIT")"; done
note "date: $(date -u +%Y-%m-%dT%H:%MZ)"

if has digest; then
  # One line per run: build, args, y digest, rel_err against the CPU layer, check.
  F="--preset deepseek-v4-flash"
  for args in "$F -T 1" "$F -T 8 --kernel decode-wgmma --no-fold" "--preset tiny -T 7 --kernel decode-wgmma" \
              ${MOE_EP_AB_DIGEST_MORE:-}; do
    for b in $BINS; do
      # shellcheck disable=SC2086  # args is a list of options
      run_limited 90 "$b/moe_ep" run --device cuda $args --iters 2 --warmup 0 --json \
        > "$WORK/digest.json" 2>> "$WORK/digest.log"
      python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); print(sys.argv[2], sys.argv[3], j.get("y_digest","-"), "rel_err=%.3e" % j["rel_err"], "check", j["check_passed"])' \
        "$WORK/digest.json" "$(basename "$b")" "$args" 2>&1 | tee -a "$SUMMARY"
    done
  done
  note "digest: ($(elapsed) s)"
fi

if has bench; then
  for round in 1 2; do
    for b in $BINS; do
      tag=$(basename "$b" | tr -d .)
      run_limited 120 "$b/moe_ep" bench --device cuda --preset deepseek-v4-flash --tokens "$TOKENS" \
        --csv "$OUT/bench_flash_${tag}_$round.csv" > "$WORK/bench_flash_${tag}_$round.log" 2>&1
      note "bench flash $tag round $round: rc=$? ($(elapsed) s)"
    done
  done
  for b in $BINS; do
    tag=$(basename "$b" | tr -d .)
    run_limited 120 "$b/moe_ep" bench --device cuda --preset deepseek-v4-pro --tokens 1,8 \
      --csv "$OUT/bench_pro_${tag}.csv" > "$WORK/bench_pro_${tag}.log" 2>&1
    note "bench pro $tag: rc=$? ($(elapsed) s)"
  done
  for f in "$OUT"/bench_*.csv; do
    note "== $(basename "$f")"
    python3 - "$f" <<'EOF' | tee -a "$SUMMARY"
import csv, sys
for r in csv.DictReader(open(sys.argv[1])):
    print("  T=%s %s us of_floor=%s" % (r.get("tokens"), r.get("time_us"), r.get("fraction_of_floor", r.get("of_floor", ""))))
EOF
  done
fi

if has tests; then
  run_limited 200 "$NEW/moe_ep_cuda_tests" \
    --gtest_filter='Sm90Decode*:Sm90WgmmaKernels.*:Sm90WgmmaLayer.*:Sm90OneToken*' > "$WORK/tests.log" 2>&1
  note "tests: rc=$? passed=$(grep -c '^\[       OK \]' "$WORK/tests.log") failed=$(grep -c '^\[  FAILED  \].*(' "$WORK/tests.log") ($(elapsed) s)"
  grep '^\[  FAILED  \].*(' "$WORK/tests.log" | head -20 | tee -a "$SUMMARY"
fi

if has sanitize; then
  for tool in racecheck synccheck; do
    run_limited 150 compute-sanitizer --tool "$tool" --error-exitcode 9 "$NEW/moe_ep_cuda_tests" \
      --gtest_filter='Sm90WgmmaKernels.SmallCaseForSanitizers' > "$WORK/sanitize_$tool.log" 2>&1
    note "sanitize $tool: rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$WORK/sanitize_$tool.log" | tr '\n' ' ') ($(elapsed) s)"
  done
fi

if has ncu; then
  for b in $BINS; do
    tag=$(basename "$b" | tr -d .)
    run_limited 100 ncu --clock-control none --kernel-name-base demangled --kernel-name regex:'sm90_(quantize_route|mxfp4_decode|combine)' \
      --launch-count 4 --section SpeedOfLight --section WarpStateStats --section LaunchStats --section Occupancy \
      "$b/moe_ep" run --device cuda --preset deepseek-v4-flash -T 1 --eager --iters 1 --warmup 0 --no-check \
      > "$WORK/ncu_$tag.txt" 2>&1
    note "ncu $tag: rc=$? ($(elapsed) s)"
    grep -E "sm90_|^ +Duration|DRAM Throughput|Issue Slots Busy|Issued Ipc Active|Warp Cycles Per Issued|Stall|Achieved Occupancy|Registers Per" \
      "$WORK/ncu_$tag.txt" | sed -E 's/  +/ /g' | cut -c1-160 | head -90 | tee -a "$SUMMARY"
  done
fi

note "done ($(elapsed) s)"
cp "$SUMMARY" "$OUT/"
tar -C "$WORK" -czf "$OUT/decode_ab_logs.tar.gz" . 2>/dev/null
tail -5 "$OUT/decode_ab_summary.txt"
