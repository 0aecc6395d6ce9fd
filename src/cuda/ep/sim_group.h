// Expert parallelism simulated on one GPU: the SM90 backend's SimulatedEpGroup
// (moe_ep/simulated_group.h). R logical ranks (R <= 8), each with its own device workspace (the
// device layout of moe_ep/workspace.h) and its own local expert layer, all on one device. A
// forward launches every rank's dispatch in one kernel (blockIdx.y = rank) and likewise the
// combine and the reduce, so all ranks are resident at once and meet in device-side barriers
// bounded by timeout_ms: the same kernels as the NCCL path with another peer policy
// (cuda/ep/sim_peers.cuh). No host synchronization inside forward (CUDA-graph capturable).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/simulated_group_impl.h"

namespace moe_ep::cuda::ep {

using SimGroupOptions = SimulatedGroupOptions;
using SimStepTimes = EpStepTimes;

class SimEpGroup final : public SimulatedEpGroup::Impl {
 public:
  // weights[r]: rank r's E/R experts (WeightPack layout with E_loc experts, host or device).
  // Validates like Layer::create (kInvalidArgument / kUnsupported naming the field).
  SimEpGroup(const SimGroupOptions& options, std::span<const WeightPack> weights);
  ~SimEpGroup() override;
  SimEpGroup(const SimEpGroup&) = delete;
  SimEpGroup& operator=(const SimEpGroup&) = delete;

  int world_size() const override;
  const DeviceWorkspaceLayout& layout() const override;  // one rank's workspace
  std::string notes() const override;

  // One forward of every rank on `stream` (cudaStream_t): args[r] are rank r's tensors on the
  // group's device, validated like Layer::forward (T may differ per rank, 0 included).
  void forward(std::span<const ForwardArgs> args, void* stream = nullptr) override;
  // As forward, with CUDA events around each step; synchronizes and returns the step times.
  SimStepTimes forward_timed(std::span<const ForwardArgs> args, void* stream = nullptr) override;

  // Tests: ranks whose CTAs return at once in every EP kernel (a peer that never arrives).
  void set_absent_ranks(uint32_t mask) override;

  // Synchronizes. Throws kTimeout naming the rank and the phase when a barrier wait gave up
  // (the group is broken from then on); else returns the OR of the ranks' sticky flags
  // (kErrorExpertIdOutOfRange) and clears them when `clear`.
  uint32_t read_error_flags(bool clear = true) override;

  struct State;  // opaque (sim_group.cpp)

 private:
  std::unique_ptr<State> s_;
};

// The backend's factory (sm90_backend.cpp registers it).
std::unique_ptr<SimulatedEpGroup::Impl> make_sim_group(const SimulatedGroupOptions& options,
                                                       std::span<const WeightPack> weights);

}  // namespace moe_ep::cuda::ep
