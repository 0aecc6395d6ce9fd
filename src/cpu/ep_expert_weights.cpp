#include "cpu/ep_expert_weights.h"

#include <cstring>

#include "core/check.h"

namespace moe_ep::cpu {

void replace_host_expert(Recipe recipe, HostExpertWeights& weights,
                         int64_t local_expert, const WeightPack& one_expert,
                         const ParallelFor& parallel_for) {
  MOE_EP_ASSERT(local_expert >= 0 && local_expert < weights.shape.num_experts);
  const ExpertShape one_shape{1, weights.shape.hidden, weights.shape.intermediate};
  const HostExpertWeights one = prepare_host_weights(recipe, one_expert, one_shape, parallel_for);
  MOE_EP_ASSERT(one.format == weights.format);
  const int64_t e = local_expert;
  std::memcpy(weights.w13.get() + e * weights.w13_packed_per_expert(), one.w13.get(),
              weights.w13_packed_per_expert());
  std::memcpy(weights.w13_scale.get() + e * weights.w13_scales_per_expert(), one.w13_scale.get(),
              weights.w13_scales_per_expert());
  std::memcpy(weights.w2.get() + e * weights.w2_packed_per_expert(), one.w2.get(),
              weights.w2_packed_per_expert());
  std::memcpy(weights.w2_scale.get() + e * weights.w2_scales_per_expert(), one.w2_scale.get(),
              weights.w2_scales_per_expert());
  if (weights.format == WeightFormat::kNVFP4) {
    weights.w13_global[e] = one.w13_global[0];
    weights.w2_global[e] = one.w2_global[0];
  }
}

}  // namespace moe_ep::cpu
