#include "cli/host_budget.h"

#include <fmt/format.h>

#include "core/host_memory.h"

namespace moe_ep::cli {

void check_host_budget(const ProblemSetup& s, int64_t T) {
  using detail::saturating_bytes;
  const int64_t H = s.desc.fleet.hidden_size, K = s.desc.top_k, R = s.world_size;
  // Per token and rank: x and y bf16 [T, H], two host copies of y (the checked one and the
  // rerun's), topk_ids i32 and topk_weights f32 [T, K].
  const int64_t per_token = 4 * 2 * H + 8 * K;
  const int64_t tokens = saturating_bytes({R, T, per_token});
  // Weights: the generated ones, the layer's copy, the reference layer's copy.
  const int64_t weights = saturating_bytes(
      {3, s.desc.fleet.num_experts, expert_weight_bytes(s.weight_format, H, s.desc.intermediate_size)});
  const int64_t total = tokens > INT64_MAX - weights ? INT64_MAX : tokens + weights;
  detail::require_host_bytes(
      total,
      fmt::format("the host problem ({} bytes of activations, outputs and routing: {} bytes per "
                  "token per rank; {} bytes of {} weights, 3 copies)",
                  tokens, per_token, weights, weight_format_name(s.weight_format)),
      fmt::format("--tokens {} x --ranks {}, and --preset {} (E = {}, H = {}, I = {})", T, R,
                  s.preset->name, s.desc.fleet.num_experts, H, s.desc.intermediate_size));
}

}  // namespace moe_ep::cli
