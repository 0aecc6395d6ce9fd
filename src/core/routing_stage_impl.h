// The seam between the public RoutingStage and the backends (src/cpu, src/cuda):
// src/core/routing_stage.cpp validates the options and every call's arguments, then calls an
// Impl that the device's registered backend made (BackendEntry::create_routing_stage).
#pragma once

#include <cstdint>
#include <vector>

#include "moe_ep/routing_stage.h"

namespace moe_ep {

class RoutingStage::Impl {
 public:
  virtual ~Impl() = default;
  // Arguments validated by the caller: the router's or the remap's tensors only, on the device.
  virtual void route(const RoutingArgs& args) = 0;
  // Validated by the caller against the options (same L and E, within the capacity).
  virtual void set_placement(const EplbPlacement& placement) = 0;
  virtual void set_recording(bool on) = 0;
  virtual std::vector<int64_t> counter_values() const = 0;
  virtual void reset_counters() = 0;
  virtual uint32_t read_error_flags(bool clear) = 0;

  RoutingStageOptions options;  // validated; max_replicas is the capacity
};

}  // namespace moe_ep
