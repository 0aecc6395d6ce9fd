// Expert parallelism simulated on one GPU: R logical ranks (R <= 8), each with its own device
// workspace (the device layout of moe_ep/workspace.h) and its own local expert layer, all on
// one device. A forward launches every rank's dispatch in one kernel (blockIdx.y = rank) and
// likewise the combine and the reduce, so all ranks are resident at once and meet in device-side
// barriers bounded by timeout_ms: the same kernels as the NCCL path with another peer policy
// (cuda/ep/sim_peers.cuh). No host synchronization inside forward (CUDA-graph capturable).
//
// This header includes no CUDA header (the CLI uses it).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "moe_ep/kernel_config.h"
#include "moe_ep/layer.h"
#include "moe_ep/workspace.h"

namespace moe_ep::cuda::ep {

struct SimGroupOptions {
  int world_size = 2;               // R, 1..8
  Device device = Device::cuda(0);
  MoeDesc desc;                     // E global, T = max_tokens_per_rank per rank, H
  KernelOverrides overrides;
  int64_t timeout_ms = 10000;       // bound of every device-side barrier wait
};

// Kernel times of one forward (CUDA events around each launch), microseconds.
struct SimStepTimes {
  double quantize_us = 0, dispatch_us = 0, local_experts_us = 0, combine_us = 0, reduce_us = 0;
};

class SimEpGroup {
 public:
  // weights[r]: rank r's E/R experts (WeightPack layout with E_loc experts, host or device).
  // Validates like Layer::create (kInvalidArgument / kUnsupported naming the field).
  SimEpGroup(const SimGroupOptions& options, std::span<const WeightPack> weights);
  ~SimEpGroup();
  SimEpGroup(const SimEpGroup&) = delete;
  SimEpGroup& operator=(const SimEpGroup&) = delete;

  int world_size() const;
  const DeviceWorkspaceLayout& layout() const;  // one rank's workspace
  std::string notes() const;

  // One forward of every rank on `stream` (cudaStream_t): args[r] are rank r's tensors on the
  // group's device, validated like Layer::forward (T may differ per rank, 0 included).
  void forward(std::span<const ForwardArgs> args, void* stream = nullptr);
  // As forward, with CUDA events around each step; synchronizes and returns the step times.
  SimStepTimes forward_timed(std::span<const ForwardArgs> args, void* stream = nullptr);

  // Tests: ranks whose CTAs return at once in every EP kernel (a peer that never arrives).
  void set_absent_ranks(uint32_t mask);

  // Synchronizes. Throws kTimeout naming the rank and the phase when a barrier wait gave up
  // (the group is broken from then on); else returns the OR of the ranks' sticky flags
  // (kErrorExpertIdOutOfRange) and clears them when `clear`.
  uint32_t read_error_flags(bool clear = true);

  struct State;  // opaque (sim_group.cpp)

 private:
  std::unique_ptr<State> s_;
};

}  // namespace moe_ep::cuda::ep
