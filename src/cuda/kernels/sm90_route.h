// The routing stage before dispatch, one kernel: DeepSeek V4 router (or hash-layer ids) ->
// EPLB remap -> per-physical-expert load counters. One warp per token; a block of 8 warps per
// token for the router up to kRouteBlockPerTokenMaxTokens tokens (the score evaluations of a
// token spread over 256 threads: at small T the kernel is one token's latency).
//
// Modes (exactly one input):
//   logits [T, L] f32 | bf16       router: s = sqrt(softplus(logit)) (core/router_math.h),
//                                  ids = top-K of s + bias (ties to the lower id), or with
//                                  token_ids + hash_table the table's ids; weights = s at the
//                                  ids / sum (floored at 1e-20) * routed_scaling_factor
//   logical_ids [T, K] i32 | i64   remap only: weights are not written
// Then, with logical_to_physical: slot (t, k) of logical id l goes to
//   l2p[l * max_replicas + (t*K + k) % replica_count[l]]     (docs/spec.md §8; ids < 0 or >= L -> -1)
// and, when *recording_flag != 0 (read on the device, so a captured graph follows the flag),
// counters[phys] += 1 per routed slot. Without logical_to_physical the ids stay logical.
//
// Device-side input errors never sync the host: a token id outside [0, vocab) or a table entry
// outside [0, L) makes the slot -1 and raises kErrorRouterInput in *error_flags (sticky), as do
// non-finite logits (whose s is then 0).
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

namespace moe_ep::cuda {

struct RouteParams {
  int32_t num_tokens = 0, num_logical = 0, top_k = 0;
  // router input
  const void* logits = nullptr;
  int32_t logits_bf16 = 0;
  const float* bias = nullptr;  // [L] or null
  float routed_scaling_factor = 1.0f;
  const void* token_ids = nullptr;  // [T]; hash layers only
  int32_t token_ids_int64 = 0;
  const int32_t* hash_table = nullptr;  // [vocab, K]
  int32_t vocab = 0;
  // remap-only input
  const void* logical_ids = nullptr;
  int32_t logical_ids_int64 = 0;
  // EPLB (null logical_to_physical: no remap)
  const int32_t* logical_to_physical = nullptr;  // [L, max_replicas], -1 padded
  const int32_t* replica_count = nullptr;        // [L]
  int32_t max_replicas = 0;
  const int32_t* recording_flag = nullptr;
  int32_t* counters = nullptr;  // [E physical]
  // outputs
  void* topk_ids = nullptr;  // [T, K]
  int32_t topk_ids_int64 = 0;
  float* topk_weights = nullptr;  // [T, K]; router modes only
  uint32_t* error_flags = nullptr;
};

constexpr int kRouteMaxLogical = 768;  // shared memory: two fp32 rows of L per warp, 8 warps: <= 48 KiB
constexpr int kRouteMaxTopK = 32;       // one lane per slot
constexpr int kRouteBlockPerTokenMaxTokens = 64;

cudaError_t launch_sm90_route(const RouteParams& params, cudaStream_t stream);

}  // namespace moe_ep::cuda
