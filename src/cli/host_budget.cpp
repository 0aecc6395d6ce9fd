#include "cli/host_budget.h"

#include <fmt/format.h>

#include "core/host_memory.h"

namespace moe_ep::cli {

void check_host_budget(const ProblemSetup& s, int64_t T, const HostBudgetExtent& x) {
  using detail::saturating_bytes;
  auto add = [](int64_t a, int64_t b) { return a > INT64_MAX - b ? INT64_MAX : a + b; };
  const int64_t H = s.desc.fleet.hidden_size, K = s.desc.top_k;
  const int64_t R = x.ranks > 0 ? x.ranks : s.world_size;
  const int64_t N = x.layers, L = s.desc.fleet.num_experts;
  const int64_t E = add(L, x.redundant_experts);
  // Per token, rank and layer: x and y bf16 [T, H], two host copies of y (the checked one and
  // the rerun's), topk_ids i32 and topk_weights f32 [T, K].
  const int64_t per_token = 4 * 2 * H + 8 * K;
  const int64_t tokens = saturating_bytes({R, T, N, per_token});
  // Weights: the generated ones and the reference layer's copy (L logical experts), and the
  // copy of every layer on its rank (E physical experts over all ranks, per layer).
  const int64_t expert = expert_weight_bytes(s.weight_format, H, s.desc.intermediate_size);
  const int64_t weights = add(saturating_bytes({2, L, expert}), saturating_bytes({N, E, expert}));
  const int64_t total = add(tokens, weights);
  detail::require_host_bytes(
      total,
      fmt::format("the host problem ({} bytes of activations, outputs and routing: {} bytes per "
                  "token per rank and layer; {} bytes of {} weights: 2 copies of the {} experts "
                  "and one per layer of the {} physical experts)",
                  tokens, per_token, weights, weight_format_name(s.weight_format), L, E),
      fmt::format("--tokens {} x --ranks {} x --layers {}, --eplb-redundant {}, and --preset {} "
                  "(E = {}, H = {}, I = {})", T, R, N, x.redundant_experts, s.preset->name, L, H,
                  s.desc.intermediate_size));
}

}  // namespace moe_ep::cli
