# Shared by scripts/quickstart.sh and scripts/test.sh: install what the build needs, then
# configure and build. Source it; do not run it.
#
#   MOE_EP_BUILD_DIR  build folder (default: build)
#   MOE_EP_JOBS       parallel build jobs (default: the number of CPUs)
#   MOE_EP_CUDA       AUTO (default: the CUDA backend builds when nvcc is found), ON, OFF

set -euo pipefail

MOE_EP_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
MOE_EP_BUILD_DIR="${MOE_EP_BUILD_DIR:-build}"
case "$MOE_EP_BUILD_DIR" in /*) ;; *) MOE_EP_BUILD_DIR="$MOE_EP_ROOT/$MOE_EP_BUILD_DIR" ;; esac
MOE_EP_JOBS="${MOE_EP_JOBS:-$(nproc)}"
MOE_EP_CUDA="${MOE_EP_CUDA:-AUTO}"

MOE_EP_APT_PACKAGES=(cmake ninja-build g++ pkg-config libgtest-dev libgmock-dev libbenchmark-dev
                     libfmt-dev nlohmann-json3-dev libcli11-dev python3 python3-pip python3-venv)

moe_ep_log() { printf '==> %s\n' "$*" >&2; }

# Debian packages: installed only when some are missing (needs root or sudo then).
moe_ep_install_apt() {
  local missing=()
  for p in "${MOE_EP_APT_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  moe_ep_log "installing Debian packages: ${missing[*]}"
  local sudo=()
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null || { echo "need root or sudo to install: ${missing[*]}" >&2; exit 1; }
    sudo=(sudo)
  fi
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -q
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
}

# Python packages of the format tests (numpy, ml_dtypes), into the python3 that CMake finds.
moe_ep_install_pip() {
  local req="$MOE_EP_ROOT/tests/python/requirements.txt"
  if python3 - "$req" <<'PY' 2>/dev/null; then return 0; fi
import importlib, pathlib, re, sys
req = pathlib.Path(sys.argv[1])
names = [re.split(r"[<>=!~\[ ;]", l.strip())[0] for l in req.read_text().splitlines()
         if l.strip() and not l.startswith("#")] if req.exists() else ["numpy", "ml_dtypes"]
for n in names:
    importlib.import_module(n.replace("-", "_"))
PY
  moe_ep_log "installing Python packages"
  local args=(-q)
  if [ -f "$req" ]; then args+=(-r "$req"); else args+=(numpy ml_dtypes); fi
  # Debian marks its python3 as externally managed (PEP 668); these packages only add modules.
  python3 -m pip install "${args[@]}" 2>/dev/null ||
    python3 -m pip install --break-system-packages "${args[@]}"
}

moe_ep_build() {
  moe_ep_log "configuring $MOE_EP_BUILD_DIR (CUDA: $MOE_EP_CUDA)"
  cmake -S "$MOE_EP_ROOT" -B "$MOE_EP_BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release \
        -DMOE_EP_CUDA="$MOE_EP_CUDA"
  moe_ep_log "building with $MOE_EP_JOBS jobs"
  cmake --build "$MOE_EP_BUILD_DIR" -j "$MOE_EP_JOBS"
}

moe_ep_setup() {
  moe_ep_install_apt
  moe_ep_install_pip
  moe_ep_build
}
