// Layer::create is collective on simulated ranks: a rank whose own checks fail (its weights'
// layout or values) must still take part in the create step, so that the other ranks fail at
// once with its message instead of waiting out timeout_ms (docs/spec.md §11).
#pragma once

#include <string>

#include "moe_ep/runtime.h"

namespace moe_ep::detail {

// Simulated runtimes of world size > 1: consumes this rank's next layer index and enters the
// "create layer N" barrier of src/cpu/ep_layer.cpp with `message` as this rank's failure; every
// rank then fails. Other runtimes: nothing. Never throws.
void fail_collective_create(Runtime& runtime, const std::string& message) noexcept;

}  // namespace moe_ep::detail
