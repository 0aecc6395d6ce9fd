// The seam between the public Layer and the backends (src/cpu, src/cuda).
// Layer::create/forward validate all inputs in src/core/layer.cpp, then call an Impl that a
// registered backend made (core/registry.h).
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

  // Filled by the backend: info.config (the selected config and plan) and info.notes; the rest
  // by Layer::create.
  LayerInfo info;
  std::shared_ptr<Runtime> runtime;
};

struct LayerRequest {
  std::shared_ptr<Runtime> runtime;
  MoeDesc desc;                 // validated
  KernelOverrides overrides;
  WeightPack weights;           // layout validated; values too when in host memory
  int compute_capability = 0;   // of the runtime's device (0 on the CPU)
};

}  // namespace moe_ep
