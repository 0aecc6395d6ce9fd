// The CUDA backend's layers (registered by sm90_backend.cpp). The world-size-1 layer is here;
// layers over other transports register a factory under the transport's name (the NCCL layer:
// cuda/nccl/nccl_register.cpp), so the backend picks by the runtime's transport and names no
// optional part of the build.
#pragma once

#include <memory>
#include <string_view>

#include "core/layer_impl.h"

namespace moe_ep::cuda {

std::unique_ptr<Layer::Impl> make_cuda_layer(const LayerRequest& request);
namespace ep {
// Simulated ranks on one GPU (CommSource::kSimulated on a CUDA device): cuda/ep/sim_layer.cpp.
std::unique_ptr<Layer::Impl> make_sim_gpu_layer(const LayerRequest& request);
}  // namespace ep

using LayerFactory = std::unique_ptr<Layer::Impl> (*)(const LayerRequest& request);
void register_layer_factory(std::string_view transport, LayerFactory factory);
// The factory registered for `transport`, or nullptr.
LayerFactory find_layer_factory(std::string_view transport);

}  // namespace moe_ep::cuda
