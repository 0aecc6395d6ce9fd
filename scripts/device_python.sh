#!/usr/bin/env bash
# The Python package's tests on the GPU machine, against an extension built elsewhere for the
# machine's Python (3.12 there): e.g. here
#   cmake -S . -B build-py312 -G Ninja -DMOE_EP_CUDA=ON -DMOE_EP_PYTHON=ON -DMOE_EP_BUILD_TESTS=OFF \
#         -DMOE_EP_BUILD_CLI=OFF -DPython_EXECUTABLE=<python3.12> && ninja -C build-py312 moe_ep_core
# and carried (`carry: ["build-py312/python", ".device-bin"]`; .device-bin holds libfmt.so.9,
# scripts/device_pack.sh). torch's libnccl.so.2 is put first, as the runtime wants one NCCL.
#   scripts/device_python.sh [package-dir] [pytest args...]   (default build-py312/python, tests/python)
set -uo pipefail
cd "$(dirname "$0")/.."
PKG=${1:-build-py312/python}
shift || true
OUT=${OUT:-$PWD/device-out}
mkdir -p "$OUT"
NCCL_LIB=$(python3 -c 'import nvidia.nccl as m, os; print(os.path.join(list(m.__path__)[0], "lib"))' 2>/dev/null)
export LD_LIBRARY_PATH="${NCCL_LIB:+$NCCL_LIB:}$PWD/.device-bin:${LD_LIBRARY_PATH:-}"
export NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0}
export PYTHONPATH="$PWD/$PKG:${PYTHONPATH:-}" PYTHONUNBUFFERED=1
python3 -c 'import torch, moe_ep; print("moe_ep", moe_ep.__version__, moe_ep.info()["cuda"], "torch", torch.__version__, torch.cuda.get_device_name(0))'
python3 -m pytest -q -rs -p no:cacheprovider --junitxml="$OUT/pytest.xml" "${@:-tests/python}" 2>&1 | tee "$OUT/pytest.log"
