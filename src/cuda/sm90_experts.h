// The SM90 expert engine: a layer's local experts on one GPU, from descriptor to launches.
//
//   desc + overrides -> load config (folding, tile) -> weights to the kernel layout and the
//   device -> facts (what fits, what folded) -> selected config (kernels per T bucket)
//   -> plan (workspace) -> pipeline (prebuilt launches)
//
// Used by the world-size-1 CUDA layer over the caller's tokens and by an expert-parallel rank
// over its received rows (desc with E = E_loc, top_k = 1, quantize_input = false, no shared
// expert). Creation synchronizes the device; run() only launches on the caller's stream
// (CUDA-graph capturable, no allocation, no host synchronization).
//
// A shared expert (desc.shared_intermediate_size > 0) runs on a second stream forked at the start
// of run() (cuda/side_stream.h), over x into the plan's shared_h / shared_o, while the routed
// steps run; the combine waits for it and adds shared_o to y in its one pass over y.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include <cuda_runtime.h>

#include "cuda/device_buffer.h"
#include "cuda/plan.h"
#include "cuda/policy/sm90_config.h"
#include "cuda/sm90_pipeline.h"
#include "cuda/sm90_shared_expert.h"
#include "cuda/side_stream.h"
#include "moe_ep/desc.h"
#include "moe_ep/kernel_config.h"
#include "moe_ep/weights.h"

namespace moe_ep::cuda {

class Sm90ExpertEngine {
 public:
  // `weights`: desc.fleet.num_experts experts, layout already validated (host or this device).
  // `scratch` (optional) gives the workspace for the plan's bytes (layer_scratch.h); without it
  // the engine allocates its own.
  using ScratchSource = std::function<std::shared_ptr<DeviceBuffer>(size_t bytes)>;
  Sm90ExpertEngine(const MoeDesc& desc, const KernelOverrides& overrides, const WeightPack& weights,
                   int device_index, const ScratchSource& scratch = {});
  Sm90ExpertEngine(const Sm90ExpertEngine&) = delete;
  Sm90ExpertEngine& operator=(const Sm90ExpertEngine&) = delete;

  void run(const Sm90Binding& binding, cudaStream_t stream) const;

  const Sm90Config& config() const { return config_; }
  const Plan& plan() const { return plan_; }
  size_t workspace_bytes() const { return workspace_->bytes(); }
  // The selected config and the launch plan, for Layer::info().
  SelectedConfig selected() const;
  const std::string& notes() const { return notes_; }
  int device_index() const { return device_index_; }

  // The sticky bits the routing kernel raises (kErrorExpertIdOutOfRange). Synchronizes.
  uint32_t read_error_flags(bool clear);

 private:
  int device_index_ = 0;
  Sm90Config config_;
  Plan plan_;
  std::string notes_;
  DeviceBuffer w13_tiles_, w13_scales_, w13_global_, w13_col_scale_;
  DeviceBuffer w2_tiles_, w2_scales_, w2_global_, w2_col_scale_;
  std::shared_ptr<DeviceBuffer> workspace_;  // maybe shared with other layers
  bool shared_scratch_ = false;
  DeviceBuffer error_flags_;
  std::unique_ptr<Sm90Pipeline> pipeline_;
  std::unique_ptr<Sm90SharedExpert> shared_;  // null without a shared expert
  std::unique_ptr<SideStream> side_;          // the shared expert's stream
};

}  // namespace moe_ep::cuda
