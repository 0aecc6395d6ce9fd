// The CPU backend's routing stage (moe_ep/routing_stage.h).
#pragma once

#include <memory>

#include "moe_ep/routing_stage.h"

namespace moe_ep::cpu {

std::unique_ptr<RoutingStage::Impl> create_cpu_routing_stage(const RoutingStageOptions& options);

}  // namespace moe_ep::cpu
