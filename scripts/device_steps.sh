# shellcheck shell=bash
# Shared by the GPU runners that do a list of steps in one device call (device_wgmma.sh,
# device_decode_ab.sh). Source it after setting BUDGET (seconds for every step), STEPS (the
# steps to do, space-separated) and SUMMARY (the summary file); do not run it.
#   elapsed             seconds since it was sourced
#   run_limited S cmd   cmd under a timeout of S seconds or the budget left, whichever is less
#                       (10 s kept back); returns 124 without running it when that is <= 5 s
#   has STEP            whether STEP is in STEPS
#   note TEXT           TEXT to stdout and the summary
START=$(date +%s)
elapsed() { echo $(( $(date +%s) - START )); }
run_limited() {
  local left=$(( BUDGET - $(elapsed) - 10 )) s=$1; shift
  (( left < s )) && s=$left
  if (( s <= 5 )); then echo "skipped: budget spent" >&2; return 124; fi
  timeout "$s" "$@"
}
has() { [[ " $STEPS " == *" $1 "* ]]; }
note() { echo "$*" | tee -a "$SUMMARY"; }
