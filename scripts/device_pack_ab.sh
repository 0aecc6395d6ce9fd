#!/usr/bin/env bash
# Builds several commits for one A/B device call (scripts/device_decode_ab.sh) on this GPU-less
# machine: each TAG=REV is checked out in one worktree (so each build after the first is
# incremental), built for sm_90a and packed as .device-bin-TAG in this checkout; the last one keeps
# its GPU test binary, the others the CLI only. Then every folder goes into one archive under the
# carry limit, and the device command to run is printed.
#   scripts/device_pack_ab.sh base=HEAD~1 new=HEAD [more=REV ...]
#   MOE_EP_AB_WORKTREE (default /tmp/moe_ep_ab_worktree), MOE_EP_BUILD_JOBS (default 2)
set -euo pipefail
cd "$(dirname "$0")/.."
(( $# >= 2 )) || { echo "usage: $0 TAG=REV TAG=REV [TAG=REV ...]" >&2; exit 2; }
ROOT=$PWD
WT=${MOE_EP_AB_WORKTREE:-/tmp/moe_ep_ab_worktree}
EXCLUDE=$(git rev-parse --git-path info/exclude)
grep -qxF "/.device-ab/" "$EXCLUDE" 2>/dev/null || echo "/.device-ab/" >> "$EXCLUDE"
git worktree prune
[[ -d "$WT" ]] || git worktree add --detach "$WT" HEAD >/dev/null 2>&1
BINS=()
for i in $(seq 1 $#); do
  spec=${!i}
  tag=${spec%%=*} rev=${spec#*=}
  [[ -n "$tag" && -n "$rev" && "$tag" != "$spec" ]] || { echo "not TAG=REV: $spec" >&2; exit 2; }
  dest=.device-bin-$tag
  grep -qxF "/$dest/" "$EXCLUDE" 2>/dev/null || echo "/$dest/" >> "$EXCLUDE"
  git -C "$WT" checkout -q --detach "$rev"
  echo "==> $tag = $(git -C "$WT" log --oneline -1)" >&2
  "$WT/scripts/device_pack.sh" build-cuda "$ROOT/$dest" > "/tmp/moe_ep_pack_$tag.log" 2>&1 ||
    { tail -20 "/tmp/moe_ep_pack_$tag.log" >&2; exit 1; }
  (( i < $# )) && rm -f "$dest/moe_ep_cuda_tests"
  BINS+=("$dest")
done
mkdir -p .device-ab
tar -czf .device-ab/ab-bins.tar.gz "${BINS[@]}"
ls -la .device-ab/ab-bins.tar.gz >&2
cat <<EOF
device command (carry [".device-ab"]):
MOE_EP_AB_ARCHIVE=.device-ab/ab-bins.tar.gz MOE_EP_AB_BINS="${BINS[*]}" MOE_EP_DEVICE_BIN=${BINS[-1]} bash scripts/device_decode_ab.sh
EOF
