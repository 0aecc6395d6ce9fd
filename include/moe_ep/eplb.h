// Expert-parallel load balancing (docs/spec.md §8): L logical experts served by E = L + redundant
// physical experts; a logical expert may have several physical replicas.
//
// Remap rule. Slot (t, k) of a [T, K] topk_ids tensor with logical id l goes to
//     phys = logical_to_physical[l, (t*K + k) % replica_count[l]]
// where t is the row index inside the tensor passed to remap(): on an EP rank, the rank-local
// token index (0..T-1 of that rank's batch), not a global token index. Ids < 0 or >= L become -1
// (skipped slots). The same logical id thus spreads over its replicas slot by slot, and a rank
// remapping the same rows always makes the same choice.
//
// Load counters. When recording is on, each slot that maps to a physical expert adds one to
// that expert's int32 counter. The flag and the counters are plain words in memory so that a
// device kernel (or a captured graph) reads the flag and bumps the counters; here they live in
// host memory and are updated atomically, so several ranks may share one Eplb.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "moe_ep/tensor.h"

namespace moe_ep {

struct EplbPlacement {
  int64_t num_logical = 0;                   // L
  int64_t num_physical = 0;                  // E = L + redundant
  int64_t max_replicas = 0;                  // columns of logical_to_physical
  std::vector<int32_t> logical_to_physical;  // [L, max_replicas], -1 padded
  std::vector<int32_t> replica_count;        // [L], 1..max_replicas

  // Physical expert p serves logical expert physical_to_logical()[p].
  std::vector<int32_t> physical_to_logical() const;
};

// Physical p < L serves logical p; physical L + j serves logical replicated[j]. Replicas of one
// logical expert are listed in increasing physical id.
EplbPlacement make_eplb_placement(int64_t num_logical, std::span<const int64_t> replicated);

// `num_redundant` logical ids to replicate, chosen greedily: each pick takes the logical expert
// with the largest load per replica (load[l] / replicas so far), ties to the lower id.
std::vector<int64_t> plan_redundant_experts(std::span<const int64_t> load, int64_t num_redundant);

// Throws kInvalidArgument naming the entry when the placement is inconsistent: sizes, ids outside
// [0, E), a replica_count outside [1, max_replicas], -1 padding missing, or a physical expert
// used twice or never.
void check_eplb_placement(const EplbPlacement& placement);

class Eplb {
 public:
  explicit Eplb(EplbPlacement placement);  // checks the placement

  const EplbPlacement& placement() const { return placement_; }
  int64_t num_logical() const { return placement_.num_logical; }
  int64_t num_physical() const { return placement_.num_physical; }

  // logical_ids i32|i64 [T, K] -> physical_ids i32|i64 [T, K] (either dtype; they may alias when
  // both are the same tensor). Host memory only.
  void remap(const TensorView& logical_ids, const TensorView& physical_ids);

  void set_recording(bool on);
  bool recording() const;
  // The flag word (0 = off, 1 = on) and the counters [E], for kernels and graphs.
  int32_t* recording_flag() { return flag_.get(); }
  int32_t* counters() { return counters_.get(); }
  std::vector<int64_t> counter_values() const;
  void reset_counters();

 private:
  EplbPlacement placement_;
  std::unique_ptr<int32_t[]> flag_;
  std::unique_ptr<int32_t[]> counters_;
};

}  // namespace moe_ep
