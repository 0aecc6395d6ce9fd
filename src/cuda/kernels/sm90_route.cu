#include "cuda/kernels/sm90_route.h"

#include <cuda_bf16.h>

#include "core/router_math.h"
#include "cuda/kernels/sm90_route_bounds.cuh"
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

// The lane's best and second-best candidates (value, id) not yet chosen.
struct LaneBest {
  float best_v = -INFINITY, second_v = -INFINITY;
  int best_id = kNoCandidate, second_id = kNoCandidate;
  __device__ __forceinline__ void offer(float v, int e) {
    if (better(v, e, best_v, best_id)) {
      second_v = best_v;
      second_id = best_id;
      best_v = v;
      best_id = e;
    } else if (better(v, e, second_v, second_id)) {
      second_v = v;
      second_id = e;
    }
  }
};

// The top K of the row's eligible elements by (sel, lower id); lane l owns the elements l + 32 j
// (eligible: bit j of `eligible`), has offered them to `lb`, and gets the logical id of slot
// k = l (l < K; -1 when fewer than K are eligible). Round k: the warp's best is the largest key,
// then the lowest id among the lanes holding it (an id belongs to one lane); its owner takes it,
// promotes its second best, and rescans its eligible elements only when it has none.
__device__ __forceinline__ int64_t warp_top_k(LaneBest& lb, const float* sel, uint32_t eligible, int L, int K,
                                              int lane) {
  int64_t my_id = -1;
  for (int k = 0; k < K; ++k) {
    const uint32_t key = order_key(lb.best_v, lb.best_id);
    const uint32_t top = __reduce_max_sync(0xffffffffu, key);
    const uint32_t cand = key == top ? static_cast<uint32_t>(lb.best_id) : 0xffffffffu;
    const uint32_t win = __reduce_min_sync(0xffffffffu, cand);
    if (lane == k && win < static_cast<uint32_t>(L)) my_id = win;
    if (cand == win && win < static_cast<uint32_t>(L)) {
      eligible &= ~(1u << (win / 32));
      const bool rescan = lb.second_id == kNoCandidate;
      lb.best_v = lb.second_v;
      lb.best_id = lb.second_id;
      lb.second_v = -INFINITY;
      lb.second_id = kNoCandidate;
      if (rescan)
        for (uint32_t rest = eligible; rest; rest &= rest - 1) {
          const int e = lane + 32 * (__ffs(rest) - 1);
          lb.offer(sel[e], e);
        }
    }
  }
  return my_id;
}

// Slot k = lane < K of token t: the logical id (-1: none), remapped through the placement when
// there is one (and counted when recording), written with its weight.
__device__ __forceinline__ void write_slot(const RouteParams& p, int t, int lane, int64_t my_id, float my_weight) {
  if (lane >= p.top_k) return;
  const int64_t slot = static_cast<int64_t>(t) * p.top_k + lane;
  int64_t out = my_id >= 0 && my_id < p.num_logical ? my_id : -1;
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

// The weight of slot k = lane: s / (sum of the K slots' s in slot order, as the CPU router adds
// them; invalid slots add nothing) * routed_scaling_factor.
__device__ __forceinline__ float slot_weight(const RouteParams& p, int my_id, float my_s) {
  float sum = 0.0f;
  for (int k = 0; k < p.top_k; ++k) {
    const float v = __shfl_sync(0xffffffffu, my_s, k);
    const int id = __shfl_sync(0xffffffffu, my_id, k);
    if (id >= 0) sum = __fadd_rn(sum, v);
  }
  return my_id >= 0 ? router_math::routed_weight(my_s, sum, p.routed_scaling_factor) : 0.0f;
}

// Slot k = lane < K of a hash layer: the table's id for the token (-1 and an error when the
// token or the entry is out of range).
__device__ __forceinline__ int64_t hash_slot(const RouteParams& p, int t, int lane, uint32_t& errors) {
  const int64_t tok = load_id(p.token_ids, p.token_ids_int64, t);
  if (tok < 0 || tok >= p.vocab) {
    errors |= kErrorRouterInput;
    return -1;
  }
  if (lane >= p.top_k) return -1;
  const int64_t id = p.hash_table[tok * p.top_k + lane];
  if (id < 0 || id >= p.num_logical) {
    errors |= kErrorRouterInput;
    return -1;
  }
  return id;
}

__device__ __forceinline__ float exact_sel(const RouteParams& p, float s, int e) {
  return p.bias ? __fadd_rn(s, p.bias[e]) : s;
}

// Small T: a block of kWarps warps per token, the token's L score evaluations spread over its 256
// threads (element e by lane e % 32 of warp (e / 32) % kWarps), then warp 0 selects from the
// scores in shared memory (s[L], then sel[L] = s + bias). At small T the kernel is one token's
// latency.
__global__ void __launch_bounds__(kWarps * 32) sm90_route_block_kernel(const __grid_constant__ RouteParams p) {
  extern __shared__ float smem[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, t = blockIdx.x;
  const int L = p.num_logical;
  float* s = smem;
  float* sel = s + L;
  uint32_t errors = 0;
  for (int e = 32 * warp + lane; e < L; e += 32 * kWarps) {
    const float v = load_logit(p, static_cast<int64_t>(t) * L + e);
    if (!isfinite(v)) errors |= kErrorRouterInput;
    s[e] = router_math::sqrt_softplus(v);
    sel[e] = exact_sel(p, s[e], e);
  }
  __syncthreads();  // every element of the token evaluated
  if (warp != 0) {
    report_errors(errors, lane, p.error_flags);
    return;
  }
  int64_t my_id;
  if (p.token_ids) {
    my_id = hash_slot(p, t, lane, errors);
  } else {
    LaneBest lb;
    uint32_t all = 0;
    for (int j = 0, e = lane; e < L; ++j, e += 32) {
      lb.offer(sel[e], e);
      all |= 1u << j;
    }
    my_id = warp_top_k(lb, sel, all, L, p.top_k, lane);
  }
  const float my_s = my_id >= 0 ? s[my_id] : 0.0f;
  write_slot(p, t, lane, my_id, slot_weight(p, static_cast<int>(my_id), my_s));
  report_errors(errors, lane, p.error_flags);
}

// One warp per token; lane l owns the elements e = l + 32 j. Router mode, in three passes:
//   1. cheap bounds lo <= sel <= hi of every element (route_bounds: approx_score +- its margin,
//      plus 1e-5 |sel| for the bias add's rounding; non-finite logits: -inf, +inf), and a
//      threshold tau <= the K-th largest lo (the K-th largest of the lanes' two largest lo's);
//      at least K elements have sel >= tau, so every element of the exact top K has hi >= tau.
//   2. the exact scores (router_math) of the candidates hi >= tau only: up to 32 candidates
//      one per lane, more each lane its own in turn;
//   3. the exact top K among the candidates (the rest are below the K-th exact value).
// The result is the exhaustive selection's, bit for bit; the exact evaluations drop from L to
// about K + a few per token. Shared memory per warp: s[L] (the logit until its exact score),
// sel[L] (hi until its exact value, or the compacted candidate list). Hash layers evaluate only
// their K table ids. Remap-only mode reads K ids per token.
__global__ void __launch_bounds__(kWarps * 32) sm90_route_warp_kernel(const __grid_constant__ RouteParams p) {
  extern __shared__ float smem[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int t = blockIdx.x * kWarps + warp;
  if (t >= p.num_tokens) return;
  const int L = p.num_logical, K = p.top_k;
  uint32_t errors = 0;
  int64_t my_id = -1;
  float my_weight = 0.0f;
  if (!p.logits) {
    if (lane < K) my_id = load_id(p.logical_ids, p.logical_ids_int64, static_cast<int64_t>(t) * K + lane);
  } else if (p.token_ids) {
    for (int e = lane; e < L; e += 32)
      if (!isfinite(load_logit(p, static_cast<int64_t>(t) * L + e))) errors |= kErrorRouterInput;
    my_id = hash_slot(p, t, lane, errors);
    const float my_s = my_id >= 0 ? router_math::sqrt_softplus(load_logit(p, static_cast<int64_t>(t) * L + my_id)) : 0.0f;
    my_weight = slot_weight(p, static_cast<int>(my_id), my_s);
  } else {
    float* s = smem + static_cast<size_t>(warp) * 2 * L;
    float* sel = s + L;
    // 1. bounds; the lane's two largest lower bounds.
    float lo1 = -INFINITY, lo2 = -INFINITY;
    for (int e0 = 0; e0 < L; e0 += 32 * kUnroll) {
      float v[kUnroll], b[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int e = e0 + 32 * u + lane;
        v[u] = e < L ? load_logit(p, static_cast<int64_t>(t) * L + e) : 0.0f;
        b[u] = p.bias && e < L ? p.bias[e] : 0.0f;
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {  // branch-free, so the SFU chains of the elements overlap
        const int e = e0 + 32 * u + lane;
        const bool in = e < L, finite = isfinite(v[u]);
        const float sa = route_bounds::approx_score(v[u]);
        const float sel_a = sa + b[u];
        const float m = route_bounds::score_margin(sa) + 1e-5f * fabsf(sel_a);
        const float lo = in && finite ? sel_a - m : -INFINITY;
        if (in && !finite) errors |= kErrorRouterInput;
        if (in) {
          s[e] = v[u];
          sel[e] = finite ? sel_a + m : INFINITY;
        }
        lo2 = fmaxf(lo2, fminf(lo, lo1));
        lo1 = fmaxf(lo1, lo);
      }
    }
    // tau: pop the warp's largest head until K elements are counted (a lane holding the head
    // counts one element per round); -inf (everything a candidate) is always safe.
    float tau = -INFINITY;
    for (int k = 0, counted = 0; k < K && counted < K; ++k) {
      const uint32_t key = order_key(lo1, 0);
      const uint32_t top = __reduce_max_sync(0xffffffffu, key);
      const uint32_t holders = __ballot_sync(0xffffffffu, key == top);
      counted += __popc(holders);
      tau = __shfl_sync(0xffffffffu, lo1, __ffs(holders) - 1);
      if (key == top) {
        lo1 = lo2;
        lo2 = -INFINITY;
      }
    }
    // 2. candidates and their exact scores.
    uint32_t cand = 0;
    for (int j = 0, e = lane; e < L; ++j, e += 32)
      if (sel[e] >= tau) cand |= 1u << j;
    const int mine = __popc(cand), n = __reduce_add_sync(0xffffffffu, mine);
    float my_s = 0.0f;
    if (n <= 32) {
      // One candidate per lane (compacted in lane order through sel's row, its bounds read),
      // then K rounds: the largest key, the lowest id among its holders; the owner drops out.
      int slot = mine;
      for (int d = 1; d < 32; d *= 2) {
        const int x = __shfl_up_sync(0xffffffffu, slot, d);
        if (lane >= d) slot += x;
      }
      slot -= mine;
      int* list = reinterpret_cast<int*>(sel);
      __syncwarp();
      for (uint32_t rest = cand; rest; rest &= rest - 1) list[slot++] = lane + 32 * (__ffs(rest) - 1);
      __syncwarp();
      const int e = lane < n ? list[lane] : 0;
      float se = 0.0f;
      uint32_t key = 0;  // 0: no candidate (order_key of a real value is > 0)
      if (lane < n) {
        se = router_math::sqrt_softplus(s[e]);
        key = order_key(exact_sel(p, se, e), e);
      }
      for (int k = 0; k < K; ++k) {
        const uint32_t top = __reduce_max_sync(0xffffffffu, key);
        const uint32_t win = __reduce_min_sync(0xffffffffu, key == top ? static_cast<uint32_t>(e) : 0xffffffffu);
        const uint32_t owner = __ballot_sync(0xffffffffu, key == top && static_cast<uint32_t>(e) == win);
        const float win_s = __shfl_sync(0xffffffffu, se, __ffs(owner) - 1);
        if (lane == k) {
          my_id = win;
          my_s = win_s;
        }
        if ((owner >> lane) & 1u) key = 0;
      }
    } else {
      // Each lane its own candidates in turn, then warp_top_k.
      LaneBest lb;
      for (uint32_t rest = cand; rest; rest &= rest - 1) {
        const int e = lane + 32 * (__ffs(rest) - 1);
        const float se = router_math::sqrt_softplus(s[e]);
        s[e] = se;
        sel[e] = exact_sel(p, se, e);
        lb.offer(sel[e], e);
      }
      __syncwarp();
      my_id = warp_top_k(lb, sel, cand, L, K, lane);
      __syncwarp();
      my_s = my_id >= 0 ? s[my_id] : 0.0f;  // a candidate: its exact score
    }
    my_weight = slot_weight(p, static_cast<int>(my_id), my_s);
  }
  write_slot(p, t, lane, my_id, my_weight);
  report_errors(errors, lane, p.error_flags);
}

}  // namespace

cudaError_t launch_sm90_route(const RouteParams& p, cudaStream_t stream) {
  if (p.num_tokens == 0) return cudaSuccess;
  if (p.logits && p.num_tokens <= kRouteBlockPerTokenMaxTokens) {  // latency-bound: spread each token
    sm90_route_block_kernel<<<p.num_tokens, kWarps * 32, sizeof(float) * 2 * p.num_logical, stream>>>(p);
    return cudaGetLastError();
  }
  const int blocks = (p.num_tokens + kWarps - 1) / kWarps;
  const size_t smem = p.logits ? sizeof(float) * 2 * p.num_logical * kWarps : 0;
  sm90_route_warp_kernel<<<blocks, kWarps * 32, smem, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace moe_ep::cuda
