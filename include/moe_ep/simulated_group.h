// Expert parallelism simulated on one device and driven by one thread: R ranks, each with its own
// workspace (the device layout of moe_ep/workspace.h) and its own local experts, all on one
// device. One forward runs every rank's quantize, dispatch, local experts, combine and reduce in
// turn, with the kernels of the multi-GPU path, so a rank's y is what R processes would give
// (bitwise the world-size-1 layer on the global batch). Made for benchmarks and tests of the EP
// steps: a forward can be timed step by step, and a rank can be made absent.
//
// A backend provides it through the registry; where none does (the CPU, a build without CUDA),
// create throws kUnsupported with the reason. Ranks driven by threads of their own, each through
// Layer, are the other simulation: Runtime::acquire(Bootstrap{.comm = CommSource::kSimulated}),
// on the CPU as on a GPU.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "moe_ep/desc.h"
#include "moe_ep/kernel_config.h"
#include "moe_ep/layer.h"
#include "moe_ep/tensor.h"
#include "moe_ep/weights.h"
#include "moe_ep/workspace.h"

namespace moe_ep {

struct SimulatedGroupOptions {
  int world_size = 2;               // R (the SM90 backend launches up to 8 ranks)
  Device device = Device::cuda(0);
  MoeDesc desc;                     // E global, T = max_tokens_per_rank per rank, H
  KernelOverrides overrides;
  int64_t timeout_ms = 10000;       // bound of every device-side barrier wait
};

// Device time of each step of one forward (events around each step), microseconds.
struct EpStepTimes {
  double quantize_us = 0, dispatch_us = 0, local_experts_us = 0, combine_us = 0, reduce_us = 0;
};

class SimulatedEpGroup {
 public:
  class Impl;

  // weights[r]: rank r's E/R experts (the WeightPack layout with E_loc experts, host or device
  // memory). Validates like Layer::create: kInvalidArgument naming the field, kUnsupported with
  // the reason where the device's backend has no simulated group.
  static std::unique_ptr<SimulatedEpGroup> create(const SimulatedGroupOptions& options,
                                                  std::span<const WeightPack> weights);
  ~SimulatedEpGroup();
  SimulatedEpGroup(const SimulatedEpGroup&) = delete;
  SimulatedEpGroup& operator=(const SimulatedEpGroup&) = delete;

  int world_size() const;
  const DeviceWorkspaceLayout& layout() const;  // one rank's workspace
  std::string notes() const;                    // what runs: workspace, local experts' config

  // One forward of every rank on `stream` (cudaStream_t on a GPU): args[r] are rank r's tensors
  // on the group's device, validated like Layer::forward (T may differ per rank, 0 included;
  // args[r].stream is not used). No host synchronization: a CUDA graph can capture it.
  void forward(std::span<const ForwardArgs> args, void* stream = nullptr);
  // As forward, with events around each step; synchronizes and returns the step times.
  EpStepTimes forward_timed(std::span<const ForwardArgs> args, void* stream = nullptr);

  // Tests: the ranks of `mask` (bit r) leave every EP step at once, as peers that never arrive;
  // the others' bounded waits then end in kTimeout at read_error_flags.
  void set_absent_ranks(uint32_t mask);

  // Synchronizes. Throws kTimeout naming the rank and the phase when a barrier wait gave up
  // (the group is broken from then on); else returns the OR of the ranks' sticky ErrorFlag bits
  // and clears them when `clear`.
  uint32_t read_error_flags(bool clear = true);

 private:
  explicit SimulatedEpGroup(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace moe_ep
