// The seam between the public SharedExpert and the backends: SharedExpert::create validates the
// sizes and the weights, then the backend of the device's kind (core/registry.h) makes the Impl;
// forward / add_to validate the tensors before calling it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "moe_ep/shared_expert.h"

namespace moe_ep {

class SharedExpert::Impl {
 public:
  virtual ~Impl() = default;
  // x, y bf16 [T, H] on the expert's device, T within max_tokens: validated by the caller.
  // accumulate: y = bf16(y + o), else y = o.
  virtual void run(const TensorView& x, const TensorView& y, bool accumulate, void* stream) const = 0;
  virtual std::string kernels(int64_t num_tokens) const = 0;
};

// Validated: sizes, clamp, weight layouts (host memory or on `device`), host values finite.
struct SharedExpertRequest {
  int64_t hidden_size = 0, intermediate_size = 0;
  std::optional<float> activation_clamp;
  TensorView w13, w2;
  Device device;
  int64_t max_tokens = 0;
};

}  // namespace moe_ep
