#include "cuda/kernels/sm90_shared_expert.h"

#include "cuda/kernels/sm90_shared_expert_math.cuh"
#include "cuda/ptx/cp_async.cuh"
#include "cuda/ptx/cp_async_bulk.cuh"
#include "cuda/ptx/griddep.cuh"
#include "cuda/ptx/ldmatrix.cuh"
#include "cuda/ptx/mbarrier.cuh"
#include "cuda/ptx/smem.cuh"

namespace moe_ep::cuda {
namespace {

using shared_expert::bf16_hi;
using shared_expert::bf16_lo;

constexpr int kTok = 4;  // tokens per block (grid.y); a T = 1 forward takes the kernels for one
// One warp per block and 4 weight rows per warp; lane 8r + q holds row r's partials 2q, 2q + 1
// (the terms 16m + 2q + e of each 16-term step m). The rows stream in stages of 256 terms through
// a ring of kSlots slots in the warp's shared memory (kSlots - 1 stages in flight while one is
// read): lane 8r + q copies the 16-byte pieces q + 8j (j < 4) of row r of every stage (cp.async,
// four 128-byte row segments per warp instruction).
constexpr int kRows = 4;
constexpr int kStageTerms = 256;
constexpr int kSteps = kStageTerms / 16;
// Slots of the ring per kernel: each warp streams its rows at a rate of about (kSlots - 1) stages
// per load round trip; 4 slots (11.6 KB a warp at T = 1) already cover it, more are no faster.
constexpr int kGateUpSlots = 4;
constexpr int kDownSlots = 4;
// A slot's row stride: 512 + 32 bytes, so the 8 16-byte rows of an ldmatrix (rows r, halves h of
// one step) and the 4-byte reads of a warp (rows r, pairs q of one step) fall in distinct banks.
constexpr int kRowBytes = 2 * kStageTerms + 32;
constexpr int kSlotBytes = kRows * kRowBytes;
// WarpSmem::act[tt][q][2m + e] = term 16m + 2q + e of a stage; 32 + 4 floats a row, so the
// 16-byte reads of q = 0 .. 7 fall in distinct banks.
constexpr int kActStride = 2 * kSteps + 4;
static_assert(kStageTerms == 32 * 8, "one 16-byte activation piece per lane and stage");
static_assert(kSteps % 4 == 0, "ldmatrix.x4: 4 steps");

template <int kTokens, int kSlots>
struct WarpSmem {
  uint8_t w[kSlots][kRows][kRowBytes];
  uint16_t act_in[kSlots][kTokens][kStageTerms];  // bf16 as copied (16-byte aligned activations)
  float act[kTokens][8][kActStride];               // the stage being read, as fp32
  uint64_t full[kSlots];                           // bulk weights: slot s's copies landed
};

// Lane l's activation terms [8l, + 8) of a stage for the block's tokens (rows past `tokens` are
// zero), staged into WarpSmem::act as fp32. kAligned: copied with the stage's weights into
// act_in (lane l's own piece, so it reads it without a sync); else 2-byte loads into registers
// one stage ahead. Earlier grids write them (x the caller's, h kernel 1's): read through L2 only
// (cp.async.cg, ld.global.cg), after grid_dependency_wait.
template <int kTokens, bool kAligned, int kSlots>
struct Activations {
  const uint16_t* src;  // the block's first token row, + 8 lane
  int64_t stride;
  int left, tokens;     // left: n - 8 lane
  uint4 v[kTokens];

  __device__ __forceinline__ bool has(int tt) const { return kTokens == 1 || tt < tokens; }
  __device__ __forceinline__ void copy(WarpSmem<kTokens, kSlots>& sm, int slot, int stage) const {
    const int l8 = 8 * static_cast<int>(threadIdx.x % 32);
#pragma unroll
    for (int tt = 0; tt < kTokens; ++tt)
      if (has(tt) && stage * kStageTerms < left)
        ptx::cp_async_16(ptx::smem_addr(&sm.act_in[slot][tt][l8]), src + tt * stride + stage * kStageTerms);
  }
  __device__ __forceinline__ void load(int stage) {
#pragma unroll
    for (int tt = 0; tt < kTokens; ++tt) {
      uint32_t w[4] = {0, 0, 0, 0};
      if (has(tt) && stage * kStageTerms < left) {
        const uint16_t* a = src + tt * stride + stage * kStageTerms;
#pragma unroll
        for (int c = 0; c < 4; ++c) w[c] = static_cast<uint32_t>(__ldcg(a + 2 * c)) | static_cast<uint32_t>(__ldcg(a + 2 * c + 1)) << 16;
      }
      v[tt] = make_uint4(w[0], w[1], w[2], w[3]);
    }
  }
  // Terms 8l + 2c + e = 16 (l / 2) + 2 (4 (l % 2) + c) + e: act[tt][4 (l % 2) + c][2 (l / 2) + e].
  __device__ __forceinline__ void to_fp32(WarpSmem<kTokens, kSlots>& sm, int slot) const {
    const int l = static_cast<int>(threadIdx.x % 32);
#pragma unroll
    for (int tt = 0; tt < kTokens; ++tt) {
      uint4 x = v[tt];
      if constexpr (kAligned) x = has(tt) ? *reinterpret_cast<const uint4*>(&sm.act_in[slot][tt][8 * l]) : make_uint4(0, 0, 0, 0);
      float* d = &sm.act[tt][4 * (l % 2)][2 * (l / 2)];
      *reinterpret_cast<float2*>(d) = make_float2(bf16_lo(x.x), bf16_hi(x.x));
      *reinterpret_cast<float2*>(d + kActStride) = make_float2(bf16_lo(x.y), bf16_hi(x.y));
      *reinterpret_cast<float2*>(d + 2 * kActStride) = make_float2(bf16_lo(x.z), bf16_hi(x.z));
      *reinterpret_cast<float2*>(d + 3 * kActStride) = make_float2(bf16_lo(x.w), bf16_hi(x.w));
    }
  }
};

// `steps` 16-term steps of one stage: p[tt][e] += act[tt][16m + 2q + e] * w[r][16m + 2q + e], one
// fp32 fma of an exact product per term, in increasing m. A whole stage reads the weights by
// ldmatrix.x4, 4 steps each (w_ldsm: this lane's row address, matrix i = step 4g + i, row
// 2r' + h = half h of row r'; register i returns the lane's pair of step 4g + i); a partial one
// by 4-byte reads (w_lane: row r, pair q of step 0). a_lane: act[0][q].
template <int kTokens>
__device__ __forceinline__ void dot_stage(uint32_t w_ldsm, const uint8_t* w_lane, const float* a_lane, int steps,
                                          float (&p)[kTokens][2]) {
  constexpr int kTokStride = 8 * kActStride;
  if (steps == kSteps) {
#pragma unroll
    for (int g = 0; g < kSteps / 4; ++g) {
      uint32_t w[4];
      ptx::ldmatrix_x4(w, w_ldsm + 128 * g);
#pragma unroll
      for (int tt = 0; tt < kTokens; ++tt) {
        const float4 a0 = *reinterpret_cast<const float4*>(a_lane + tt * kTokStride + 8 * g);
        const float4 a1 = *reinterpret_cast<const float4*>(a_lane + tt * kTokStride + 8 * g + 4);
        p[tt][0] = __fmaf_rn(a0.x, bf16_lo(w[0]), p[tt][0]);
        p[tt][1] = __fmaf_rn(a0.y, bf16_hi(w[0]), p[tt][1]);
        p[tt][0] = __fmaf_rn(a0.z, bf16_lo(w[1]), p[tt][0]);
        p[tt][1] = __fmaf_rn(a0.w, bf16_hi(w[1]), p[tt][1]);
        p[tt][0] = __fmaf_rn(a1.x, bf16_lo(w[2]), p[tt][0]);
        p[tt][1] = __fmaf_rn(a1.y, bf16_hi(w[2]), p[tt][1]);
        p[tt][0] = __fmaf_rn(a1.z, bf16_lo(w[3]), p[tt][0]);
        p[tt][1] = __fmaf_rn(a1.w, bf16_hi(w[3]), p[tt][1]);
      }
    }
  } else {
#pragma unroll 1
    for (int m = 0; m < steps; ++m) {
      const uint32_t w = *reinterpret_cast<const uint32_t*>(w_lane + 32 * m);
#pragma unroll
      for (int tt = 0; tt < kTokens; ++tt) {
        const float2 a = *reinterpret_cast<const float2*>(a_lane + tt * kTokStride + 2 * m);
        p[tt][0] = __fmaf_rn(a.x, bf16_lo(w), p[tt][0]);
        p[tt][1] = __fmaf_rn(a.y, bf16_hi(w), p[tt][1]);
      }
    }
  }
}

// The dot products of the warp's 4 weight rows (rows 0-1 at rows_lo + r * row_stride, rows 2-3 at
// rows_hi + (r - 2) * row_stride; n terms, n % 16 == 0, 16-byte aligned) with the block's
// activation rows, in the CPU's order: partial j adds the terms j, j + 16, ... in sequence, then
// p[j] += p[j + 8], + 4, + 2 (shuffles across lanes 8r + q), + 1 (in the lane); row r's sums end
// in lane 8r.
// Before grid_dependency_wait only the first kSlots weight stages are copied (no kernel writes
// the weights); the next grid may launch from there on.
// cp.async groups: W_0 .. W_{kSlots-1}, then (kAligned) A_0 .. A_{kSlots-1}, then one per
// iteration k with stage k + kSlots's copies; so wait_group<kSlots - 1> at iteration k leaves
// stage k landed on either path.
// stage_stride: the distance between two stages of a row, kStageTerms in the row-major layout,
// shared_expert_tiled_stage_stride(rows) in the tiled one (rows_lo = the warp's block of stage 0,
// rows_hi = + 2 rows' stage, row_stride = kStageTerms).
// kBulk: lane r < 4 copies row r's piece of a stage with one bulk copy, completing on full[slot]
// (lane 0 adds the stage's bytes and arrives once); the W groups above stay, empty, so the
// activations' waits keep their count. A slot's next copies follow the warp's reads of it
// (__syncwarp) and the copying lane's proxy fence.
template <int kTokens, bool kAligned, int kSlots, bool kBulk>
__device__ __forceinline__ void dot_rows(const uint16_t* __restrict__ rows_lo, const uint16_t* __restrict__ rows_hi,
                                         int64_t row_stride, int64_t stage_stride,
                                         Activations<kTokens, kAligned, kSlots> act, int n,
                                         WarpSmem<kTokens, kSlots>& sm, float (&sum)[kTokens]) {
  const int lane = static_cast<int>(threadIdx.x % 32), r = lane / 8, q = lane % 8;
  const int stages = (n + kStageTerms - 1) / kStageTerms;
  const uint16_t* w_src = (r < 2 ? rows_lo : rows_hi) + (r % 2) * row_stride + 8 * q;
  const uint32_t w_dst = ptx::smem_addr(&sm.w[0][r][16 * q]);
  const uint16_t* bulk_src = (lane < 2 ? rows_lo : rows_hi) + (lane % 2) * row_stride;  // lanes < 4: row lane
  const uint32_t bulk_dst = ptx::smem_addr(&sm.w[0][lane % kRows][0]);
  uint64_t l2_policy = 0;
  if constexpr (kBulk) {
    // One token block reads every weight once; more (T > kTok) read them again.
    l2_policy = gridDim.y == 1 ? ptx::l2_evict_first_policy() : ptx::l2_evict_normal_policy();
    if (lane == 0)
      for (int s = 0; s < kSlots; ++s) ptx::mbarrier_init(&sm.full[s], 1);
    ptx::fence_mbarrier_init();
    __syncwarp();
  }
  auto copy_weights = [&](int stage, int slot) {
    if constexpr (kBulk) {
      const int terms = min(kStageTerms, n - stage * kStageTerms);
      if (terms <= 0) return;
      if (lane == 0) {
        ptx::mbarrier_expect_tx(&sm.full[slot], kRows * 2 * terms);
        ptx::mbarrier_arrive(&sm.full[slot]);
      }
      if (lane < kRows) {
        ptx::fence_proxy_async_shared();
        ptx::cp_async_bulk_g2s(bulk_dst + slot * kSlotBytes, bulk_src + stage * stage_stride, 2 * terms,
                               &sm.full[slot], l2_policy);
      }
    } else {
      const int left = n - stage * kStageTerms - 8 * q;  // n % 16 == 0: whole 8-term pieces
      const uint16_t* src = w_src + stage * stage_stride;
      const uint32_t dst = w_dst + slot * kSlotBytes;
#pragma unroll
      for (int j = 0; j < kStageTerms / 64; ++j)
        if (64 * j < left) ptx::cp_async_16(dst + 128 * j, src + 64 * j);
    }
  };
#pragma unroll
  for (int s = 0; s < kSlots; ++s) {
    copy_weights(s, s);
    ptx::cp_async_commit();
  }
  ptx::launch_dependents();
  ptx::grid_dependency_wait();
  if constexpr (kAligned) {
#pragma unroll
    for (int s = 0; s < kSlots; ++s) {
      act.copy(sm, s, s);
      ptx::cp_async_commit();
    }
  } else {
    act.load(0);
  }
  float p[kTokens][2];
#pragma unroll
  for (int tt = 0; tt < kTokens; ++tt) p[tt][0] = p[tt][1] = 0.0f;
  const uint32_t w_ldsm = ptx::smem_addr(&sm.w[0][q / 2][32 * r + 16 * (q % 2)]);
  const uint8_t* w_lane = &sm.w[0][r][4 * q];
  const float* a_lane = &sm.act[0][q][0];
  // Unrolled over the ring, so every slot offset is an immediate.
  for (int k0 = 0; k0 < stages; k0 += kSlots) {
#pragma unroll
    for (int slot = 0; slot < kSlots; ++slot) {
      const int k = k0 + slot;
      if (k >= stages) break;
      ptx::cp_async_wait<kSlots - 1>();
      if constexpr (kBulk) ptx::mbarrier_wait_parity(&sm.full[slot], static_cast<uint32_t>(k / kSlots) & 1u);
      act.to_fp32(sm, slot);
      __syncwarp();  // stage k landed and widened for every lane
      if constexpr (!kAligned) act.load(k + 1);
      dot_stage<kTokens>(w_ldsm + slot * kSlotBytes, w_lane + slot * kSlotBytes, a_lane,
                         min(kSteps, (n - k * kStageTerms) / 16), p);
      __syncwarp();  // the slot and act read by every lane
      copy_weights(k + kSlots, slot);
      if constexpr (kAligned) act.copy(sm, slot, k + kSlots);
      ptx::cp_async_commit();
    }
  }
#pragma unroll
  for (int tt = 0; tt < kTokens; ++tt) {
#pragma unroll
    for (int e = 0; e < 2; ++e) p[tt][e] = __fadd_rn(p[tt][e], __shfl_xor_sync(0xffffffffu, p[tt][e], 4));  // j += j + 8
#pragma unroll
    for (int e = 0; e < 2; ++e) p[tt][e] = __fadd_rn(p[tt][e], __shfl_xor_sync(0xffffffffu, p[tt][e], 2));  // j += j + 4
#pragma unroll
    for (int e = 0; e < 2; ++e) p[tt][e] = __fadd_rn(p[tt][e], __shfl_xor_sync(0xffffffffu, p[tt][e], 1));  // j += j + 2
    sum[tt] = __fadd_rn(p[tt][0], p[tt][1]);                                                                  // + 1
  }
}

// The tiled layout (shared_expert_tiled_index) of a matrix of `rows` rows of k terms: warp b's
// block of a stage holds its kRows rows' pieces in order, the next stage's block a stage of every
// row further on.
template <int kTokens, bool kAligned, int kSlots, bool kBulk>
__device__ __forceinline__ void dot_tiled_rows(const uint16_t* w, int64_t rows, int64_t k,
                                               Activations<kTokens, kAligned, kSlots> act,
                                               WarpSmem<kTokens, kSlots>& sm, float (&sum)[kTokens]) {
  const uint16_t* block = w + static_cast<int64_t>(blockIdx.x) * kRows * kStageTerms;
  dot_rows<kTokens, kAligned, kSlots, kBulk>(block, block + 2 * kStageTerms, kStageTerms,
                                      shared_expert_tiled_stage_stride(rows), act, static_cast<int>(k), sm, sum);
}

// Warp: h columns i0, i0 + 1 (i0 = 2 blockIdx.x); rows 0-1 their gate rows, 2-3 their up rows.
template <int kTokens, bool kAligned, bool kTiled, bool kBulk>
__global__ void __launch_bounds__(32) sm90_shared_gate_up_kernel(const __grid_constant__ SharedExpertParams p) {
  constexpr int kSlots = kGateUpSlots;
  __shared__ __align__(16) WarpSmem<kTokens, kSlots> sm;
  const int lane = static_cast<int>(threadIdx.x);
  const int64_t H = p.hidden, i0 = 2 * static_cast<int64_t>(blockIdx.x);
  const int tok0 = static_cast<int>(blockIdx.y) * kTokens;
  const int tokens = min(kTokens, p.num_tokens - tok0);
  float acc[kTokens];
  const Activations<kTokens, kAligned, kSlots> act{p.x + tok0 * H + 8 * lane, H, p.hidden - 8 * lane, tokens, {}};
  if constexpr (kTiled)
    dot_tiled_rows<kTokens, kAligned, kSlots, kBulk>(p.w13, 2 * static_cast<int64_t>(p.intermediate), H, act, sm, acc);
  else
    dot_rows<kTokens, kAligned, kSlots, kBulk>(p.w13 + i0 * H, p.w13 + (p.intermediate + i0) * H, H, kStageTerms, act,
                                        p.hidden, sm, acc);
#pragma unroll
  for (int tt = 0; tt < kTokens; ++tt) {
    const float up_sum = __shfl_down_sync(0xffffffffu, acc[tt], 16);
    if (lane < 16 && lane % 8 == 0 && tt < tokens)
      p.h[static_cast<int64_t>(tok0 + tt) * p.intermediate + i0 + lane / 8] = shared_expert::swiglu_h(acc[tt], up_sum, p.clamp);
  }
}

// Warp: output features n0 .. n0 + 3 (n0 = 4 blockIdx.x), one W2 row each.
template <int kTokens, bool kTiled, bool kBulk>
__global__ void __launch_bounds__(32) sm90_shared_down_kernel(const __grid_constant__ SharedExpertParams p) {
  constexpr int kSlots = kDownSlots;
  __shared__ __align__(16) WarpSmem<kTokens, kSlots> sm;
  const int lane = static_cast<int>(threadIdx.x);
  const int64_t I = p.intermediate, n0 = 4 * static_cast<int64_t>(blockIdx.x);
  const int tok0 = static_cast<int>(blockIdx.y) * kTokens;
  const int tokens = min(kTokens, p.num_tokens - tok0);
  float acc[kTokens];
  const Activations<kTokens, true, kSlots> act{p.h + tok0 * I + 8 * lane, I, p.intermediate - 8 * lane, tokens, {}};
  if constexpr (kTiled)
    dot_tiled_rows<kTokens, true, kSlots, kBulk>(p.w2, static_cast<int64_t>(p.hidden), I, act, sm, acc);
  else
    dot_rows<kTokens, true, kSlots, kBulk>(p.w2 + n0 * I, p.w2 + (n0 + 2) * I, I, kStageTerms, act, p.intermediate, sm, acc);
  if (lane % 8 != 0) return;
#pragma unroll
  for (int tt = 0; tt < kTokens; ++tt) {
    if (tt >= tokens) break;
    uint16_t& out = p.y[static_cast<int64_t>(tok0 + tt) * p.hidden + n0 + lane / 8];
    out = shared_expert::down_out(acc[tt], out, p.accumulate);
  }
}

// Both kernels are programmatic dependents of the grid before them (ptx/griddep.cuh).
template <int kTokens, bool kTiled, bool kBulk>
cudaError_t launch_dot_products(const SharedExpertParams& p, cudaStream_t stream) {
  const unsigned token_blocks = static_cast<unsigned>((p.num_tokens + kTokens - 1) / kTokens);
  const dim3 grid1(static_cast<unsigned>(p.intermediate / 2), token_blocks);
  // x rows are copied 16 bytes at a time when x allows (H % 16 == 0 keeps every row aligned alike).
  const cudaError_t e =
      reinterpret_cast<uintptr_t>(p.x) % 16 == 0
          ? launch_dependent(sm90_shared_gate_up_kernel<kTokens, true, kTiled, kBulk>, grid1, 32, 0, stream, p)
          : launch_dependent(sm90_shared_gate_up_kernel<kTokens, false, kTiled, kBulk>, grid1, 32, 0, stream, p);
  if (e != cudaSuccess) return e;
  const dim3 grid2(static_cast<unsigned>(p.hidden / kRows), token_blocks);
  return launch_dependent(sm90_shared_down_kernel<kTokens, kTiled, kBulk>, grid2, 32, 0, stream, p);
}

template <bool kTiled, bool kBulk>
cudaError_t launch_dot_products(const SharedExpertParams& p, cudaStream_t stream) {
  return p.num_tokens == 1 ? launch_dot_products<1, kTiled, kBulk>(p, stream)
                           : launch_dot_products<kTok, kTiled, kBulk>(p, stream);
}

template <bool kTiled>
cudaError_t launch_dot_products(const SharedExpertParams& p, cudaStream_t stream) {
  return p.bulk_weights ? launch_dot_products<kTiled, true>(p, stream) : launch_dot_products<kTiled, false>(p, stream);
}

}  // namespace

bool shared_expert_uses_tensor_cores(const SharedExpertParams& p) {
  // cp.async reads 16-byte chunks of x rows; the epilogues store bf16 pairs of y.
  const bool shapes_fit = p.hidden % kSharedExpertMmaHiddenMultiple == 0 &&
                          p.intermediate % kSharedExpertMmaIntermediateMultiple == 0 &&
                          reinterpret_cast<uintptr_t>(p.x) % 16 == 0 && reinterpret_cast<uintptr_t>(p.y) % 4 == 0;
  if (p.path == SharedExpertPath::kDotProducts) return false;
  if (p.path == SharedExpertPath::kTensorCores) return shapes_fit;
  return shapes_fit && p.num_tokens >= kSharedExpertMmaMinTokens;
}

cudaError_t launch_sm90_shared_expert(const SharedExpertParams& p, cudaStream_t stream) {
  if (p.num_tokens == 0) return cudaSuccess;
  if (p.tiled_weights && !shared_expert_tiles(p.hidden, p.intermediate)) return cudaErrorInvalidValue;
  if (p.bulk_weights && (reinterpret_cast<uintptr_t>(p.w13) % 16 != 0 || reinterpret_cast<uintptr_t>(p.w2) % 16 != 0))
    return cudaErrorInvalidValue;
  if (shared_expert_uses_tensor_cores(p)) return launch_sm90_shared_expert_mma(p, stream);
  const cudaError_t e = p.tiled_weights ? launch_dot_products<true>(p, stream) : launch_dot_products<false>(p, stream);
  return e != cudaSuccess ? e : cudaGetLastError();
}

namespace {

// One 16-byte piece (8 terms of a row) per thread, row-major in, tiled out.
__global__ void sm90_shared_expert_tile_kernel(const uint16_t* __restrict__ in, uint16_t* __restrict__ out,
                                               int64_t rows, int64_t k, int64_t intermediate) {
  const int64_t piece = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (piece >= rows * (k / 8)) return;
  const int64_t row = piece / (k / 8), col = piece % (k / 8) * 8;
  *reinterpret_cast<uint4*>(out + shared_expert_tiled_index(row, col, rows, intermediate)) =
      *reinterpret_cast<const uint4*>(in + row * k + col);
}

}  // namespace

cudaError_t launch_sm90_shared_expert_tile_weights(const uint16_t* in, uint16_t* out, int64_t rows, int64_t k,
                                                   int64_t intermediate, cudaStream_t stream) {
  if (rows % 4 != 0 || k % kStageTerms != 0 || rows * k >= (int64_t{1} << 31) ||
      (intermediate > 0 && rows != 2 * intermediate))
    return cudaErrorInvalidValue;
  const int64_t pieces = rows * (k / 8);
  if (pieces == 0) return cudaSuccess;
  sm90_shared_expert_tile_kernel<<<static_cast<unsigned>((pieces + 255) / 256), 256, 0, stream>>>(in, out, rows, k,
                                                                                                   intermediate);
  return cudaGetLastError();
}

}  // namespace moe_ep::cuda
