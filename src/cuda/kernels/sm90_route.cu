#include "cuda/kernels/sm90_route.h"

#include <cuda_bf16.h>

#include "core/router_math.h"
#include "moe_ep/layer.h"

namespace moe_ep::cuda {
namespace {

constexpr int kWarps = 8;
constexpr int kUnroll = 8;
constexpr int kNoCandidate = 0x7fffffff;
static_assert(kRouteMaxLogical <= 32 * 32, "one taken bit per element of a lane");

__device__ __forceinline__ float load_logit(const RouteParams& p, int64_t i) {
  if (p.logits_bf16) {
    const uint16_t b = static_cast<const uint16_t*>(p.logits)[i];
    return __uint_as_float(static_cast<uint32_t>(b) << 16);
  }
  return static_cast<const float*>(p.logits)[i];
}

__device__ __forceinline__ int64_t load_id(const void* base, int is64, int64_t i) {
  return is64 ? static_cast<const int64_t*>(base)[i] : static_cast<const int32_t*>(base)[i];
}

// The warp's input errors into the layer's flags, by one lane.
__device__ __forceinline__ void report_errors(uint32_t errors, int lane, uint32_t* flags) {
  errors = __reduce_or_sync(0xffffffffu, errors);
  if (errors && lane == 0) atomicOr(flags, errors);
}

// (value, id) of the better candidate: larger value, ties to the lower id.
__device__ __forceinline__ bool better(float v, int id, float best_v, int best_id) {
  return v > best_v || (v == best_v && id < best_id);
}

// Monotone map of a non-NaN float onto uint32 (-0 and +0 map alike); 0 is below every value and
// marks a lane without a candidate.
__device__ __forceinline__ uint32_t order_key(float v, int id) {
  if (id == kNoCandidate) return 0u;
  const uint32_t b = __float_as_uint(v == 0.0f ? 0.0f : v);
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

// kSplit warps per token (1, or kWarps for a whole block per token at small T). Shared memory
// per token: s[L], then sel[L] = s + bias. Element e is evaluated by lane e % 32 of warp
// (e / 32) % kSplit of the token's group; lane l of the group's first warp owns the elements
// l + 32 j (j < ceil(L / 32)) for the top-k (taken bit j marks element j chosen), from the
// values it evaluated itself (kSplit = 1) or read back from sel (kSplit > 1). Every element's
// arithmetic is router_math's and the selection order is total (value, then lower id), so the
// result does not depend on kSplit.
template <int kSplit>
__global__ void __launch_bounds__(kWarps * 32) sm90_route_kernel(const __grid_constant__ RouteParams p) {
  static_assert(kWarps % kSplit == 0, "whole token groups per block");
  extern __shared__ float smem[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int group = warp / kSplit, part = warp % kSplit;
  const int t = blockIdx.x * (kWarps / kSplit) + group;
  if (t >= p.num_tokens) return;  // whole groups: with kSplit = kWarps the whole block
  const int L = p.num_logical, K = p.top_k;
  uint32_t errors = 0;
  int64_t my_id = -1;     // lane k < K of the first warp: the logical id of slot k
  float my_weight = 0.0f;

  if (p.logits) {
    float* s = smem + static_cast<size_t>(group) * 2 * L;
    float* sel = s + L;
    // The lane's best and second-best not-yet-chosen elements.
    float best_v = -INFINITY, second_v = -INFINITY;
    int best_id = kNoCandidate, second_id = kNoCandidate;
    auto offer = [&](float v, int e) {
      if (better(v, e, best_v, best_id)) {
        second_v = best_v;
        second_id = best_id;
        best_v = v;
        best_id = e;
      } else if (better(v, e, second_v, second_id)) {
        second_v = v;
        second_id = e;
      }
    };
    // kEval independent evaluations per lane in flight (the chains are long: two divisions and
    // a square root each).
    constexpr int kEval = kSplit == 1 ? kUnroll : 1;
    for (int e0 = 32 * part; e0 < L; e0 += 32 * kSplit * kEval) {
      float v[kEval];
#pragma unroll
      for (int u = 0; u < kEval; ++u) {
        const int e = e0 + 32 * kSplit * u + lane;
        v[u] = e < L ? load_logit(p, static_cast<int64_t>(t) * L + e) : 0.0f;
      }
#pragma unroll
      for (int u = 0; u < kEval; ++u) {
        const int e = e0 + 32 * kSplit * u + lane;
        if (!isfinite(v[u])) errors |= kErrorRouterInput;
        const float se = router_math::sqrt_softplus(v[u]);
        const float b = p.bias && e < L ? p.bias[e] : 0.0f;
        const float sb = p.bias ? __fadd_rn(se, b) : se;
        if (e < L) {
          s[e] = se;
          sel[e] = sb;
          if constexpr (kSplit == 1) offer(sb, e);
        }
      }
    }
    if constexpr (kSplit > 1) {
      __syncthreads();  // every element of the token evaluated
      if (part != 0) {
        report_errors(errors, lane, p.error_flags);
        return;
      }
      for (int e = lane; e < L; e += 32) offer(sel[e], e);
    }
    __syncwarp();
    if (p.token_ids) {
      const int64_t tok = load_id(p.token_ids, p.token_ids_int64, t);
      if (tok < 0 || tok >= p.vocab) {
        errors |= kErrorRouterInput;
      } else if (lane < K) {
        const int64_t id = p.hash_table[tok * K + lane];
        if (id < 0 || id >= L)
          errors |= kErrorRouterInput;
        else
          my_id = id;
      }
    } else {
      // Round k: the warp's best (value, id) is the largest key, then the lowest id among the
      // lanes holding it (an id belongs to one lane); its owner takes it, promotes its second
      // best, and rescans its elements only when it has none.
      uint32_t taken = 0;
      for (int k = 0; k < K; ++k) {
        const uint32_t key = order_key(best_v, best_id);
        const uint32_t top = __reduce_max_sync(0xffffffffu, key);
        const uint32_t cand = key == top ? static_cast<uint32_t>(best_id) : 0xffffffffu;
        const uint32_t win = __reduce_min_sync(0xffffffffu, cand);
        if (lane == k && win < static_cast<uint32_t>(L)) my_id = win;
        if (cand == win && win < static_cast<uint32_t>(L)) {
          taken |= 1u << (win / 32);
          const bool rescan = second_id == kNoCandidate;
          best_v = second_v;
          best_id = second_id;
          second_v = -INFINITY;
          second_id = kNoCandidate;
          if (rescan)
            for (int j = 0, e = lane; e < L; ++j, e += 32)
              if (!((taken >> j) & 1u)) offer(sel[e], e);
        }
      }
    }
  // sum in slot order, as the CPU router does; skipped (invalid) slots add nothing.
    const float my_s = my_id >= 0 ? s[my_id] : 0.0f;  // my_id < L here
    float sum = 0.0f;
    for (int k = 0; k < K; ++k) {
      const float v = __shfl_sync(0xffffffffu, my_s, k);
      const int64_t id = __shfl_sync(0xffffffffu, my_id, k);
      if (id >= 0) sum = __fadd_rn(sum, v);
    }
    my_weight = my_id >= 0 ? router_math::routed_weight(my_s, sum, p.routed_scaling_factor) : 0.0f;
  } else if (lane < K) {
    my_id = load_id(p.logical_ids, p.logical_ids_int64, static_cast<int64_t>(t) * K + lane);
  }

  if (lane < K) {
    const int64_t slot = static_cast<int64_t>(t) * K + lane;
    int64_t out = my_id >= 0 && my_id < L ? my_id : -1;
    if (p.logical_to_physical && out >= 0) {
      const int32_t n = p.replica_count[out];
      out = p.logical_to_physical[out * p.max_replicas + slot % n];
      if (*p.recording_flag) atomicAdd(&p.counters[out], 1);
    }
    if (p.topk_ids_int64)
      static_cast<int64_t*>(p.topk_ids)[slot] = out;
    else
      static_cast<int32_t*>(p.topk_ids)[slot] = static_cast<int32_t>(out);
    if (p.logits) p.topk_weights[slot] = my_weight;
  }
  report_errors(errors, lane, p.error_flags);
}

}  // namespace

cudaError_t launch_sm90_route(const RouteParams& p, cudaStream_t stream) {
  if (p.num_tokens == 0) return cudaSuccess;
  if (p.logits && p.num_tokens <= kRouteBlockPerTokenMaxTokens) {  // latency-bound: spread each token
    sm90_route_kernel<kWarps><<<p.num_tokens, kWarps * 32, sizeof(float) * 2 * p.num_logical, stream>>>(p);
    return cudaGetLastError();
  }
  const int blocks = (p.num_tokens + kWarps - 1) / kWarps;
  const size_t smem = p.logits ? sizeof(float) * 2 * p.num_logical * kWarps : 0;
  sm90_route_kernel<1><<<blocks, kWarps * 32, smem, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace moe_ep::cuda
