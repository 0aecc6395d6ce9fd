#include "cuda/kernels/sm90_route.h"

#include <cuda_bf16.h>

#include "core/router_math.h"
#include "moe_ep/layer.h"

namespace moe_ep::cuda {
namespace {

constexpr int kWarps = 8;

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

// (value, id) of the better candidate: larger value, ties to the lower id.
__device__ __forceinline__ bool better(float v, int id, float best_v, int best_id) {
  return v > best_v || (v == best_v && id < best_id);
}

// Shared memory per warp: s[L], then sel[L] (s + bias, -inf once chosen).
__global__ void __launch_bounds__(kWarps * 32) sm90_route_kernel(const __grid_constant__ RouteParams p) {
  extern __shared__ float smem[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int t = blockIdx.x * kWarps + warp;
  if (t >= p.num_tokens) return;
  const int L = p.num_logical, K = p.top_k;
  uint32_t errors = 0;
  int64_t my_id = -1;     // lane k < K: the logical id of slot k
  float my_weight = 0.0f;

  if (p.logits) {
    float* s = smem + static_cast<size_t>(warp) * 2 * L;
    float* sel = s + L;
    for (int e = lane; e < L; e += 32) {
      const float v = load_logit(p, static_cast<int64_t>(t) * L + e);
      if (!isfinite(v)) errors |= kErrorRouterInput;
      const float se = router_math::sqrt_softplus(v);
      s[e] = se;
      sel[e] = p.bias ? __fadd_rn(se, p.bias[e]) : se;
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
      for (int k = 0; k < K; ++k) {
        float best_v = -INFINITY;
        int best_id = 0x7fffffff;
        for (int e = lane; e < L; e += 32)
          if (better(sel[e], e, best_v, best_id)) {
            best_v = sel[e];
            best_id = e;
          }
#pragma unroll
        for (int off = 16; off > 0; off /= 2) {
          const float ov = __shfl_xor_sync(0xffffffffu, best_v, off);
          const int oid = __shfl_xor_sync(0xffffffffu, best_id, off);
          if (better(ov, oid, best_v, best_id)) {
            best_v = ov;
            best_id = oid;
          }
        }
        if (lane == k) my_id = best_id;
        __syncwarp();
        if (lane == 0) sel[best_id] = -INFINITY;
        __syncwarp();
      }
    }
    // sum in slot order, as the CPU router does; skipped (invalid) slots add nothing.
    const float my_s = my_id >= 0 ? s[my_id] : 0.0f;
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
  errors = __reduce_or_sync(0xffffffffu, errors);
  if (errors && lane == 0) atomicOr(p.error_flags, errors);
}

}  // namespace

cudaError_t launch_sm90_route(const RouteParams& p, cudaStream_t stream) {
  if (p.num_tokens == 0) return cudaSuccess;
  const int blocks = (p.num_tokens + kWarps - 1) / kWarps;
  const size_t smem = p.logits ? sizeof(float) * 2 * p.num_logical * kWarps : 0;
  sm90_route_kernel<<<blocks, kWarps * 32, smem, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace moe_ep::cuda
