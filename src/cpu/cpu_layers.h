// The CPU backend's parts (registered by cpu_backend.cpp): the layers of world size 1 and across
// simulated in-process ranks (CommSource::kSimulated), the standalone shared expert, the host's
// description.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/layer_impl.h"
#include "core/shared_expert_impl.h"
#include "moe_ep/backend.h"

namespace moe_ep::cpu {

std::unique_ptr<Layer::Impl> make_cpu_layer(const LayerRequest& request);
std::unique_ptr<Layer::Impl> make_cpu_ep_layer(const LayerRequest& request);
std::unique_ptr<SharedExpert::Impl> make_cpu_shared_expert(const SharedExpertRequest& request);
// The host: model name (/proc/cpuinfo where available), RAM, hardware threads.
std::vector<DeviceProperties> list_cpu_devices(std::string* status);

}  // namespace moe_ep::cpu
