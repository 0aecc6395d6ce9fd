// The seam between the public Layer and the backends (src/cpu, src/cuda).
// Layer::create/forward validate all inputs in src/core/layer.cpp, then call an Impl.
#pragma once

#include <memory>
#include <span>
#include <string>

#include "moe_ep/layer.h"

namespace moe_ep {

class Layer::Impl {
 public:
  virtual ~Impl() = default;
  // Arguments are validated by the caller.
  virtual void forward(const ForwardArgs& args) = 0;
  virtual void forward_rows(const ForwardArgs& args, std::span<const int64_t> rows);
  virtual uint32_t read_error_flags(bool clear) = 0;
  // Multi-rank layers: Layer::forward rejected this rank's arguments with `message`; take part
  // in the forward's collective steps so that the other ranks fail at once instead of waiting.
  // Must not throw. Single-rank layers: nothing to do.
  virtual void fail_forward(const std::string& message) { (void)message; }
  // local_expert in [0, E_loc); one_expert checked (layout for E_loc = 1, values).
  virtual void replace_expert_weights(int64_t local_expert, const WeightPack& one_expert);

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

// Backend factories. The CUDA backend (src/cuda) defines make_cuda_layer and
// device_compute_capability and provides the header src/cuda/cuda_layer.h; layer.cpp calls them
// when MOE_EP_WITH_CUDA is defined and that header exists, and otherwise reports compute
// capability 0 and refuses CUDA layers.
std::unique_ptr<Layer::Impl> make_cpu_layer(const LayerRequest& request);
// The CPU layer across simulated ranks (src/cpu/ep_layer.cpp), for CommSource::kSimulated.
std::unique_ptr<Layer::Impl> make_cpu_ep_layer(const LayerRequest& request);
std::unique_ptr<Layer::Impl> make_cuda_layer(const LayerRequest& request);
// The CUDA layer across NCCL ranks (src/cuda/nccl), for runtimes of an NCCL communicator
// source; defined only in builds with NCCL (MOE_EP_WITH_NCCL).
std::unique_ptr<Layer::Impl> make_cuda_ep_layer(const LayerRequest& request);

// major*10+minor of a CUDA device (90 for H100/H200); 0 for the CPU or when it cannot be read.
int device_compute_capability(Device device);

}  // namespace moe_ep
