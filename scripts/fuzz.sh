#!/usr/bin/env bash
# libFuzzer runs of the fuzz targets in tests/fuzz (TESTING.md), built with clang, ASan + UBSan,
# in build-fuzz. Each target runs for MOE_EP_FUZZ_SECONDS (default 30) from its seed corpus
# tests/fuzz/corpus/NAME; new corpus entries go to build-fuzz/corpus/NAME, crashes to
# build-fuzz/crashes/NAME/ (copy one into tests/fuzz/regressions/NAME/ to keep it as a test).
# Usage: scripts/fuzz.sh [NAME]...  (default: every target). Exit status 1 when a target crashed.
source "$(dirname "$0")/common.sh"
MOE_EP_APT_PACKAGES+=(clang)
moe_ep_install_apt

FUZZ_SECONDS="${MOE_EP_FUZZ_SECONDS:-30}"
TARGETS=("$@")
[ ${#TARGETS[@]} -eq 0 ] && TARGETS=(weight_pack forward_args checkpoint_reader)
dir="$MOE_EP_ROOT/build-fuzz"

moe_ep_log "configuring build-fuzz (clang++, libFuzzer, ASan + UBSan)"
cmake -S "$MOE_EP_ROOT" -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_COMPILER=clang++ \
      -DMOE_EP_CUDA=OFF -DMOE_EP_FUZZ=ON -DMOE_EP_SANITIZE=address,undefined >/dev/null
grep -q '^MOE_EP_HAS_LIBFUZZER:INTERNAL=1' "$dir/CMakeCache.txt" ||
  { echo "clang++ has no libFuzzer (-fsanitize=fuzzer)" >&2; exit 1; }
moe_ep_log "building ${TARGETS[*]} with $MOE_EP_JOBS jobs"
cmake --build "$dir" -j "$MOE_EP_JOBS" --target "${TARGETS[@]/#/fuzz_}"

status=0
for t in "${TARGETS[@]}"; do
  mkdir -p "$dir/corpus/$t" "$dir/crashes/$t"
  moe_ep_log "fuzz_$t for $FUZZ_SECONDS s"
  # -rss_limit_mb: a fuzzed shape may ask for a large (valid) allocation; 2 GiB is a finding.
  # Checkpoint inputs are whole files and directories (seeds of 8-10 KB).
  max_len=4096; [ "$t" = checkpoint_reader ] && max_len=65536
  if ! ASAN_OPTIONS=abort_on_error=1:detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
       "$dir/tests/fuzz/fuzz_$t" -max_total_time="$FUZZ_SECONDS" -rss_limit_mb=2048 -timeout=20 \
       -max_len=$max_len -print_final_stats=1 -artifact_prefix="$dir/crashes/$t/" \
       "$dir/corpus/$t" "$MOE_EP_ROOT/tests/fuzz/corpus/$t" 2>"$dir/fuzz_$t.log"; then
    status=1
    moe_ep_log "fuzz_$t FOUND A CRASH: $(ls "$dir/crashes/$t" | head -3); log: $dir/fuzz_$t.log"
    tail -40 "$dir/fuzz_$t.log" >&2
  fi
  grep -E '^stat::number_of_executed_units|^stat::peak_rss_mb' "$dir/fuzz_$t.log" | sed "s/^/  fuzz_$t /" >&2
done
exit $status
