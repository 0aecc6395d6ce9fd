#!/usr/bin/env bash
# Installs what the build needs, builds, and runs the whole test suite with ctest. Tests that
# need a GPU skip with a visible reason on machines without one. Extra arguments go to ctest.
source "$(dirname "$0")/common.sh"
moe_ep_setup
moe_ep_log "ctest ($MOE_EP_JOBS jobs)"
cd "$MOE_EP_BUILD_DIR"
exec ctest --output-on-failure -j "$MOE_EP_JOBS" "$@"
