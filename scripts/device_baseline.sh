#!/usr/bin/env bash
# Builds a baseline commit's CLI on the GPU machine, so a change can be disassembled and timed
# beside it in the same call: the GPU machine lacks the Debian build dependencies and the network,
# so both come from .devdeps/ (git-ignored), prepared on this machine with
#   mkdir -p .devdeps && (cd .devdeps && apt-get download libfmt9 libfmt-dev nlohmann-json3-dev libcli11-dev)
#   git archive --format=tar.gz -o .devdeps/baseline.tar.gz <commit>
# and carried (`carry: [".devdeps"]`). Prints the path of the baseline's moe_ep binary last; its
# run-time libraries are under /tmp/moe_ep_baseline/deps (set LD_LIBRARY_PATH to the printed one).
#   scripts/device_baseline.sh [jobs]
set -euo pipefail
cd "$(dirname "$0")/.."
JOBS=${1:-$(nproc)}
ROOT=/tmp/moe_ep_baseline
# Built already on this machine (an earlier call of the same lease) from the same archive: reuse.
if [[ -x "$ROOT/build/moe_ep" ]] && cmp -s .devdeps/baseline.tar.gz "$ROOT/baseline.tar.gz"; then
  echo "LD_LIBRARY_PATH=$ROOT/deps/usr/lib/x86_64-linux-gnu"
  echo "$ROOT/build/moe_ep"
  exit 0
fi
rm -rf "$ROOT" && mkdir -p "$ROOT/deps" "$ROOT/src"
cp .devdeps/baseline.tar.gz "$ROOT/"
for deb in .devdeps/*.deb; do
  if command -v dpkg >/dev/null; then dpkg -x "$deb" "$ROOT/deps"; else ar p "$deb" data.tar.xz | tar -xJ -C "$ROOT/deps"; fi
done
tar -xzf .devdeps/baseline.tar.gz -C "$ROOT/src"
cmake -S "$ROOT/src" -B "$ROOT/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMOE_EP_CUDA=ON \
      -DMOE_EP_BUILD_TESTS=OFF -DMOE_EP_PYTHON=OFF -DCMAKE_PREFIX_PATH="$ROOT/deps/usr" >"$ROOT/configure.log" 2>&1 ||
  { tail -20 "$ROOT/configure.log"; exit 1; }
ninja -C "$ROOT/build" -j"$JOBS" moe_ep_cli >"$ROOT/build.log" 2>&1 || { tail -30 "$ROOT/build.log"; exit 1; }
echo "LD_LIBRARY_PATH=$ROOT/deps/usr/lib/x86_64-linux-gnu"
echo "$ROOT/build/moe_ep"
