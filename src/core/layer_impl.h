// The seam between the public Layer and the backends (src/cpu, src/cuda).
// Layer::create/forward validate all inputs in src/core/layer.cpp, then call an Impl.
#pragma once

#include <memory>
#include <span>

#include "moe_ep/layer.h"

namespace moe_ep {

class Layer::Impl {
 public:
  virtual ~Impl() = default;
  // Arguments are validated by the caller.
  virtual void forward(const ForwardArgs& args) = 0;
  virtual void forward_rows(const ForwardArgs& args, std::span<const int64_t> rows);
  virtual uint32_t read_error_flags(bool clear) = 0;

  LayerInfo info;
  FleetParams fleet;
  KernelConfig config;
  std::shared_ptr<Runtime> runtime;
};

struct LayerRequest {
  std::shared_ptr<Runtime> runtime;
  FleetParams fleet;
  KernelConfig config;
  const FamilyProperties* family = nullptr;
  const Implementation* implementation = nullptr;
  WeightPack weights;  // validated
};

// Backend factories. make_cuda_layer exists only when the CUDA backend is compiled
// (MOE_EP_WITH_CUDA).
std::unique_ptr<Layer::Impl> make_cpu_layer(const LayerRequest& request);
std::unique_ptr<Layer::Impl> make_cuda_layer(const LayerRequest& request);

}  // namespace moe_ep
