#!/usr/bin/env bash
# Sanitizer builds of the CPU library and tests (TESTING.md), each in its own build folder:
#   asan  ASan + UBSan (-fno-sanitize-recover=all): the whole CPU suite (ctest).
#   tsan  ThreadSanitizer: the thread-pool, simulated-rank, rendezvous, runtime and concurrency
#         tests (ctest -R, see TSAN_TESTS below).
# Usage: scripts/sanitize.sh [asan|tsan]...  (default: both). MOE_EP_JOBS as for scripts/test.sh.
source "$(dirname "$0")/common.sh"
moe_ep_install_apt
moe_ep_install_pip

TSAN_TESTS='^(ThreadPool|SimTransport|Rendezvous|Runtime|Concurrency|EpFailures|EpFaults|EpLayer|EpRouting|EpDeterminism|EpWorkspace|EpEplb|Recipes/CpuSharedExpert)\.'

sanitize_build() {  # folder, sanitizers[, build target]
  local dir="$MOE_EP_ROOT/$1" target=()
  [ $# -ge 3 ] && target=(--target "$3")
  moe_ep_log "configuring $1 (-fsanitize=$2, CPU only)"
  # -O1: sanitizer reports keep their frames, and the build is faster than -O2.
  cmake -S "$MOE_EP_ROOT" -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG="-O1 -g" \
        -DMOE_EP_CUDA=OFF -DMOE_EP_SANITIZE="$2" >/dev/null
  moe_ep_log "building $1 with $MOE_EP_JOBS jobs"
  cmake --build "$dir" -j "$MOE_EP_JOBS" "${target[@]}"
}

run_asan() {
  sanitize_build build-asan address,undefined
  moe_ep_log "ctest under ASan + UBSan (whole CPU suite)"
  ( cd "$MOE_EP_ROOT/build-asan" &&
    ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:strict_string_checks=1 \
    UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    ctest --output-on-failure -j "$MOE_EP_JOBS" --timeout 900 )
}

run_tsan() {
  sanitize_build build-tsan thread moe_ep_tests  # the TSan tests are all in moe_ep_tests
  moe_ep_log "ctest under TSan: $TSAN_TESTS"
  # setarch -R: TSan of GCC 12 cannot map its shadow with the high mmap randomization of
  # recent kernels ("unexpected memory mapping"); without ASLR it can.
  local run=()
  if setarch "$(uname -m)" -R true 2>/dev/null; then run=(setarch "$(uname -m)" -R); fi
  ( cd "$MOE_EP_ROOT/build-tsan" &&
    TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 \
    "${run[@]}" ctest --output-on-failure -j "$MOE_EP_JOBS" --timeout 900 -R "$TSAN_TESTS" )
}

kinds=("$@")
[ ${#kinds[@]} -eq 0 ] && kinds=(asan tsan)
for k in "${kinds[@]}"; do
  case "$k" in
    asan) run_asan ;;
    tsan) run_tsan ;;
    *) echo "unknown sanitizer build '$k'; expected asan or tsan" >&2; exit 2 ;;
  esac
done
