// The seam between the public SimulatedEpGroup and the backends: SimulatedEpGroup::create runs
// validate_simulated_group, then the backend of the device's kind (core/registry.h) makes the
// Impl, which checks what is its own (how many ranks it launches, the per-call tensors).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "moe_ep/simulated_group.h"

namespace moe_ep {

class SimulatedEpGroup::Impl {
 public:
  virtual ~Impl() = default;
  virtual int world_size() const = 0;
  virtual const DeviceWorkspaceLayout& layout() const = 0;
  virtual std::string notes() const = 0;
  virtual void forward(std::span<const ForwardArgs> args, void* stream) = 0;
  virtual EpStepTimes forward_timed(std::span<const ForwardArgs> args, void* stream) = 0;
  virtual void set_absent_ranks(uint32_t mask) = 0;
  virtual uint32_t read_error_flags(bool clear) = 0;
};

// The checks every backend's group shares (kInvalidArgument naming the field): world_size >= 1,
// one weight pack per rank, timeout_ms >= 1, the descriptor valid for world_size ranks.
void validate_simulated_group(const SimulatedGroupOptions& options, size_t num_weight_packs);

}  // namespace moe_ep
