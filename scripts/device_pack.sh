#!/usr/bin/env bash
# Builds the GPU test binary and the CLI for sm_90a on this (GPU-less) machine and copies them,
# with the shared libraries the GPU machine lacks, into one folder that travels with a device
# run (default .device-bin, git-ignored through .git/info/exclude).
#   scripts/device_pack.sh [build-dir] [out-dir]   (out-dir may be absolute)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build-cuda}
DEST=${2:-.device-bin}
cmake -S . -B "$BUILD" -G Ninja -DMOE_EP_CUDA=ON >/dev/null
ninja -C "$BUILD" -j"${MOE_EP_BUILD_JOBS:-2}" moe_ep_cuda_tests moe_ep_cli
# A relative DEST is ignored in this checkout; an absolute one (a helper's worktree packing into
# the main checkout, the one a device run sends) must already be ignored there.
if [[ "$DEST" != /* ]]; then
  EXCLUDE=$(git rev-parse --git-path info/exclude)
  grep -qxF "/$DEST/" "$EXCLUDE" 2>/dev/null || echo "/$DEST/" >> "$EXCLUDE"
fi
rm -rf "$DEST" && mkdir -p "$DEST"
cp "$BUILD/tests/moe_ep_cuda_tests" "$BUILD/moe_ep" "$DEST/"
# Non-system shared libraries (fmt from the distribution here) travel beside the binaries.
for lib in $(ldd "$DEST/moe_ep" "$DEST/moe_ep_cuda_tests" | awk '/=> \//{print $3}' | sort -u); do
  case "$(basename "$lib")" in
    libc.so*|libm.so*|libgcc_s.so*|libstdc++.so*|libpthread.so*|libdl.so*|librt.so*) ;;
    *) cp -L "$lib" "$DEST/" ;;
  esac
done
git rev-parse HEAD > "$DEST/COMMIT"
git status --porcelain -- src tests bench scripts | grep -q . && echo "(uncommitted changes)" >> "$DEST/COMMIT"
ls -la "$DEST"
