// The routing inputs of `moe_ep run --router / --eplb-redundant` on GPUs (one GPU and simulated
// ranks), per batch of a SyntheticRouting (cli/synthetic_routing.h): with a routing stage (the
// router and / or the EPLB remap, moe_ep/routing_stage.h) its inputs uploaded, its outputs in
// device memory and one stage call per batch; without one the reference ids and weights uploaded as
// they are. Then the check of the stage's ids, weights and load counters against the reference.
#pragma once

#ifdef MOE_EP_WITH_CUDA

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cli/device_driver.h"
#include "cli/synthetic_routing.h"
#include "moe_ep/routing_stage.h"

namespace moe_ep::cli {

class DeviceRouting {
 public:
  // `redundant` > 0 adds the EPLB remap (device tables of ref.placement).
  DeviceRouting(Driver& driver, const SyntheticRouting& ref, int64_t redundant, int device_index);

  bool has_stage() const { return static_cast<bool>(stage_); }
  // The stage of batch (layer, rank) on `stream`; nothing without a stage.
  void route(int layer, int rank, void* stream) const;
  // The layer's topk_ids (i32 [T, K], physical) and topk_weights (f32 [T, K]) of the batch.
  void* ids(int layer, int rank) const { return at(layer, rank).ids; }
  void* weights(int layer, int rank) const { return at(layer, rank).weights; }

  void poison();                  // the stage's outputs: ids 0x7F7F7F7F, weights NaN
  void set_recording(bool on);    // the EPLB load counters (no-op without EPLB)
  std::vector<int64_t> counters() const;  // empty without EPLB
  uint32_t read_error_flags();    // the stage's sticky bits (0 without a stage)

  // "" when every batch's ids and weights equal the reference bit for bit, else the first
  // difference (synchronizes).
  std::string compare() const;

 private:
  struct Batch {
    void *ids = nullptr, *weights = nullptr;
    void *logits = nullptr, *tokens = nullptr, *table = nullptr, *logical = nullptr;
    int64_t tokens_count = 0;
  };
  const Batch& at(int layer, int rank) const { return batches_[layer * ref_.ranks + rank]; }

  Driver& driver_;
  const SyntheticRouting& ref_;
  void* bias_ = nullptr;
  std::vector<Batch> batches_;
  std::unique_ptr<RoutingStage> stage_;
};

}  // namespace moe_ep::cli

#endif  // MOE_EP_WITH_CUDA
