#include "core/collective_create.h"

#include <fmt/format.h>

#include "core/runtime_state.h"

namespace moe_ep::detail {

void fail_collective_create(Runtime& runtime, const std::string& message) noexcept {
  if (runtime.bootstrap().comm != CommSource::kSimulated || runtime.world_size() == 1) return;
  try {
    RuntimeState& state = runtime.state();
    // The phase name of CpuEpLayer's constructor (src/cpu/ep_layer.cpp).
    state.transport().barrier(fmt::format("create layer {}", state.next_layer_index()), message);
  } catch (...) {
    // Expected: the barrier fails on every rank; the caller rethrows this rank's own error.
  }
}

}  // namespace moe_ep::detail
