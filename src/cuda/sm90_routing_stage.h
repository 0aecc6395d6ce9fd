// The CUDA backend's routing stage (moe_ep/routing_stage.h), registered by sm90_backend.cpp.
#pragma once

#include <memory>

#include "moe_ep/routing_stage.h"

namespace moe_ep::cuda {

std::unique_ptr<RoutingStage::Impl> create_routing_stage(const RoutingStageOptions& options);

}  // namespace moe_ep::cuda
