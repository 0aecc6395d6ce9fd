// DeepSeek V4 router (docs/spec.md §9): the piece before the layer that turns gate logits into
// topk_ids and topk_weights.
//
// Recipe, per token t, all in fp32 (bf16 logits are widened exactly):
//   softplus(v) = max(v, 0) + log1p(exp(-|v|))        (src/core/router_math.h: IEEE basic
//                 operations only, a few ulp, so the CPU and the GPU give the same bits;
//                 v < -86 gives softplus 0)
//   s[e]        = sqrt(softplus(logits[t, e]))
//   ids         = the K experts with the largest s[e] + bias[e], in decreasing order of that
//                 value, ties to the lower id (bias only selects; absent bias = 0)
//   hash layers (layer_idx < num_hash_layers): ids = hash_table[token_ids[t], 0..K-1] instead,
//                 in table order
//   sum         = s[ids[0]] + s[ids[1]] + ... + s[ids[K-1]]   (in slot order), floored at 1e-20
//   weights[k]  = (s[ids[k]] / sum) * routed_scaling_factor
// Non-finite logits or bias, token ids outside [0, vocab) and table entries outside [0, E) are
// rejected, naming the index.
#pragma once

#include <cstdint>

#include "moe_ep/tensor.h"

namespace moe_ep {

struct RouterConfig {
  int64_t num_experts = 0;             // E scored (logical experts)
  int64_t top_k = 0;                   // K, 1..E
  float routed_scaling_factor = 1.0f;  // finite, > 0
  int64_t num_hash_layers = 0;         // the first num_hash_layers layers route by hash table
};

// Host tensors, row-major contiguous.
struct RouterArgs {
  int64_t layer_idx = 0;
  TensorView logits;        // f32 | bf16 [T, E]
  TensorView bias;          // f32 [E]; optional
  TensorView token_ids;     // i32 | i64 [T]; hash layers only
  TensorView hash_table;    // i32 | i64 [vocab, K]; hash layers only
  TensorView topk_ids;      // out: i32 | i64 [T, K]
  TensorView topk_weights;  // out: f32 [T, K]
};

bool is_hash_layer(const RouterConfig& config, int64_t layer_idx);

// Throws kInvalidArgument naming the field or tensor and the expected value.
void check_router_config(const RouterConfig& config);
void route_deepseek_v4(const RouterConfig& config, const RouterArgs& args);

}  // namespace moe_ep
