#!/usr/bin/env bash
# Installs what the build needs, builds, and runs `moe_ep run` on its embedded default: the tiny
# preset on the GPU when one is usable, else on the CPU, with the check against the CPU
# reference on. Extra arguments go to `moe_ep run`, e.g. --preset deepseek-v4-flash --tokens 128.
source "$(dirname "$0")/common.sh"
moe_ep_setup
moe_ep_log "moe_ep run $*"
exec "$MOE_EP_BUILD_DIR/moe_ep" run "$@"
