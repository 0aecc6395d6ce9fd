#!/usr/bin/env bash
# The torch and transformers integrations as a user installs them, on the CPU: the wheel that
# scripts/wheel_check.sh built, installed into a fresh venv with its [transformers] and [test]
# extras (torch and transformers from PyPI), then pytest over the tests that need them
# (tests/python/test_torch.py, tests/python/test_transformers_integration.py) against it.
#   bash scripts/wheel_check.sh && bash scripts/transformers_check.sh
# Environment: MOE_EP_WHEEL_DIR (default build-wheel-check: the wheel is taken from its dist/),
# MOE_EP_TRANSFORMERS_DIR (default build-transformers-check: the venv), MOE_EP_CLI (default the
# main build's moe_ep when there is one: `moe_ep inspect` reads a save_pretrained checkpoint).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
wheel_dir="${MOE_EP_WHEEL_DIR:-$root/build-wheel-check}"
out="${MOE_EP_TRANSFORMERS_DIR:-$root/build-transformers-check}"
wheels=("$wheel_dir"/dist/moe_ep-*.whl)
if [ ! -f "${wheels[0]}" ]; then
  echo "transformers_check: no moe_ep wheel in $wheel_dir/dist; run scripts/wheel_check.sh first" >&2
  exit 2
fi
rm -rf "$out" && mkdir -p "$out"
python3 -m venv "$out/venv"
py="$out/venv/bin/python"
"$py" -m pip install -q --upgrade pip
start=$(date +%s)
"$py" -m pip install -q "${wheels[0]}[transformers,test]"
echo "==> installed in $(( $(date +%s) - start )) s: $("$py" -c 'import torch, transformers; print("torch", torch.__version__, "transformers", transformers.__version__)')"
cli="${MOE_EP_CLI:-$root/${MOE_EP_BUILD_DIR:-build-ci}/moe_ep}"
[ -x "$cli" ] && export MOE_EP_CLI="$cli"
cd "$out"  # not the source tree: the installed package is imported
start=$(date +%s)
"$py" -m pytest -q -rs -p no:cacheprovider "$root/tests/python/test_torch.py" \
  "$root/tests/python/test_transformers_integration.py"
echo "==> tests in $(( $(date +%s) - start )) s"
