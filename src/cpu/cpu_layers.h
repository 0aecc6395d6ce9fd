// The CPU backend's layers (registered by cpu_backend.cpp): world size 1, and the layer across
// simulated in-process ranks (CommSource::kSimulated).
#pragma once

#include <memory>

#include "core/layer_impl.h"

namespace moe_ep::cpu {

std::unique_ptr<Layer::Impl> make_cpu_layer(const LayerRequest& request);
std::unique_ptr<Layer::Impl> make_cpu_ep_layer(const LayerRequest& request);

}  // namespace moe_ep::cpu
