#include "cuda/kernels/sm90_shared_expert.h"

#include "cuda/kernels/sm90_shared_expert_math.cuh"
#include "cuda/ptx/cp_async.cuh"
#include "cuda/ptx/griddep.cuh"
#include "cuda/ptx/smem.cuh"

namespace moe_ep::cuda {
namespace {

using shared_expert::bf16_hi;
using shared_expert::bf16_lo;

constexpr int kTok = 4;  // tokens per block (grid.y); a T = 1 forward takes the kernels for one
// One warp per block and 8 weight rows per warp; lane 4r + q holds row r's partials 4q .. 4q + 3
// (the terms 16m + 4q + c of each 16-term step m). The rows stream in stages of 256 terms through
// a ring of kStages slots in the warp's shared memory (kStages - 1 stages in flight while one is
// read): lane l copies the 16 bytes [8l, 8l + 8) of every row of a stage (cp.async, one
// contiguous 512-byte row per warp instruction).
constexpr int kRows = 8;
constexpr int kStageTerms = 256;
constexpr int kSteps = kStageTerms / 16;
constexpr int kStages = 5;
// A slot's row stride: 512 + 32 bytes, so the 8-byte reads of a half-warp (rows r .. r + 3,
// q = 0 .. 3) fall in 32 distinct banks.
constexpr int kRowBytes = 2 * kStageTerms + 32;
static_assert(kStageTerms == 32 * 8, "one 16-byte piece per lane, row and stage");

template <int kTokens>
struct WarpSmem {
  uint8_t w[kStages][kRows][kRowBytes];
  uint16_t act_in[kStages][kTokens][kStageTerms];  // bf16 as copied (16-byte aligned activations)
  float act[kTokens][kStageTerms];                 // the stage being read, as fp32
};

__device__ __forceinline__ void store_fp32(float* dst, uint4 v) {
  *reinterpret_cast<float4*>(dst) = make_float4(bf16_lo(v.x), bf16_hi(v.x), bf16_lo(v.y), bf16_hi(v.y));
  *reinterpret_cast<float4*>(dst + 4) = make_float4(bf16_lo(v.z), bf16_hi(v.z), bf16_lo(v.w), bf16_hi(v.w));
}

// Lane l's activation terms [8l, + 8) of a stage for the block's tokens (rows past `tokens` are
// zero), staged into WarpSmem::act as fp32. kAligned: copied with the stage's weights into
// act_in; else 2-byte loads into registers one stage ahead. Earlier grids write them (x the
// caller's, h kernel 1's): read through L2 only (cp.async.cg, ld.global.cg), after
// grid_dependency_wait.
template <int kTokens, bool kAligned>
struct Activations {
  const uint16_t* src;  // the block's first token row
  int64_t stride;
  int n, tokens;
  uint4 v[kTokens];

  __device__ __forceinline__ void copy(WarpSmem<kTokens>& sm, int slot, int stage) const {
    const int l8 = 8 * static_cast<int>(threadIdx.x % 32), term = stage * kStageTerms + l8;
#pragma unroll
    for (int tt = 0; tt < kTokens; ++tt)
      if (tt < tokens && term < n) ptx::cp_async_16(ptx::smem_addr(&sm.act_in[slot][tt][l8]), src + tt * stride + term);
  }
  __device__ __forceinline__ void load(int stage) {
    const int term = stage * kStageTerms + 8 * static_cast<int>(threadIdx.x % 32);
#pragma unroll
    for (int tt = 0; tt < kTokens; ++tt) {
      uint32_t w[4] = {0, 0, 0, 0};
      if (tt < tokens && term < n) {
        const uint16_t* a = src + tt * stride + term;
#pragma unroll
        for (int c = 0; c < 4; ++c) w[c] = static_cast<uint32_t>(__ldcg(a + 2 * c)) | static_cast<uint32_t>(__ldcg(a + 2 * c + 1)) << 16;
      }
      v[tt] = make_uint4(w[0], w[1], w[2], w[3]);
    }
  }
  __device__ __forceinline__ void to_fp32(WarpSmem<kTokens>& sm, int slot) const {
    const int l8 = 8 * static_cast<int>(threadIdx.x % 32);
#pragma unroll
    for (int tt = 0; tt < kTokens; ++tt) {
      uint4 x = v[tt];
      if constexpr (kAligned) x = tt < tokens ? *reinterpret_cast<const uint4*>(&sm.act_in[slot][tt][l8]) : make_uint4(0, 0, 0, 0);
      store_fp32(&sm.act[tt][l8], x);
    }
  }
};

// `steps` 16-term steps of one stage: p[tt][c] += act[tt][16m + 4q + c] * w[r][16m + 4q + c],
// one fp32 fma of an exact product per term, in increasing m.
template <int kTokens>
__device__ __forceinline__ void dot_stage(const uint8_t* w, const float (*act)[kStageTerms], int steps,
                                          float (&p)[kTokens][4]) {
  const int q = static_cast<int>(threadIdx.x % 4);
  auto step = [&](int m) {
    const uint2 wv = *reinterpret_cast<const uint2*>(w + 32 * m);
    const float wf[4] = {bf16_lo(wv.x), bf16_hi(wv.x), bf16_lo(wv.y), bf16_hi(wv.y)};
#pragma unroll
    for (int tt = 0; tt < kTokens; ++tt) {
      const float4 a = *reinterpret_cast<const float4*>(&act[tt][16 * m + 4 * q]);
      p[tt][0] = __fmaf_rn(a.x, wf[0], p[tt][0]);
      p[tt][1] = __fmaf_rn(a.y, wf[1], p[tt][1]);
      p[tt][2] = __fmaf_rn(a.z, wf[2], p[tt][2]);
      p[tt][3] = __fmaf_rn(a.w, wf[3], p[tt][3]);
    }
  };
  if (steps == kSteps) {
#pragma unroll
    for (int m = 0; m < kSteps; ++m) step(m);
  } else {
#pragma unroll 1
    for (int m = 0; m < steps; ++m) step(m);
  }
}

// The dot products of the warp's 8 weight rows (rows 0-3 at rows_lo + r * row_stride, rows 4-7 at
// rows_hi + (r - 4) * row_stride; n terms, n % 16 == 0, 16-byte aligned) with the block's
// activation rows, in the CPU's order: partial j adds the terms j, j + 16, ... in sequence, then
// p[j] += p[j + 8], + 4, + 2, + 1; row r's sums end in lane 4r.
// Before grid_dependency_wait only the first kStages weight stages are copied (no kernel writes
// the weights); the next grid may launch from there on.
// cp.async groups: W_0 .. W_{kStages-1}, then (kAligned) A_0 .. A_{kStages-1}, then one per
// iteration k with stage k + kStages's copies; so wait_group<kStages - 1> at iteration k leaves
// stage k landed on either path.
template <int kTokens, bool kAligned>
__device__ __forceinline__ void dot_rows(const uint16_t* __restrict__ rows_lo, const uint16_t* __restrict__ rows_hi,
                                         int64_t row_stride, Activations<kTokens, kAligned> act, int n,
                                         WarpSmem<kTokens>& sm, float (&sum)[kTokens]) {
  const int lane = static_cast<int>(threadIdx.x % 32);
  const int stages = (n + kStageTerms - 1) / kStageTerms;
  auto copy_weights = [&](int stage, int slot) {
    const int term = stage * kStageTerms + 8 * lane;
    if (term >= n) return;  // n % 16 == 0: whole 8-term pieces
#pragma unroll
    for (int r = 0; r < kRows; ++r)
      ptx::cp_async_16(ptx::smem_addr(&sm.w[slot][r][16 * lane]), (r < 4 ? rows_lo : rows_hi) + (r % 4) * row_stride + term);
  };
#pragma unroll
  for (int s = 0; s < kStages; ++s) {
    copy_weights(s, s);
    ptx::cp_async_commit();
  }
  ptx::launch_dependents();
  ptx::grid_dependency_wait();
  if constexpr (kAligned) {
#pragma unroll
    for (int s = 0; s < kStages; ++s) {
      act.copy(sm, s, s);
      ptx::cp_async_commit();
    }
  } else {
    act.load(0);
  }
  float p[kTokens][4];
#pragma unroll
  for (int tt = 0; tt < kTokens; ++tt)
#pragma unroll
    for (int c = 0; c < 4; ++c) p[tt][c] = 0.0f;
  const uint8_t* w_lane = &sm.w[0][lane / 4][8 * (lane % 4)];
  for (int k = 0, slot = 0; k < stages; ++k) {
    ptx::cp_async_wait<kStages - 1>();
    __syncwarp();  // stage k landed for every lane
    act.to_fp32(sm, slot);
    __syncwarp();
    if constexpr (!kAligned) act.load(k + 1);
    dot_stage<kTokens>(w_lane + slot * (kRows * kRowBytes), sm.act, min(kSteps, (n - k * kStageTerms) / 16), p);
    __syncwarp();  // the slot and act read by every lane
    copy_weights(k + kStages, slot);
    if constexpr (kAligned) act.copy(sm, slot, k + kStages);
    ptx::cp_async_commit();
    slot = slot == kStages - 1 ? 0 : slot + 1;
  }
#pragma unroll
  for (int tt = 0; tt < kTokens; ++tt) {
#pragma unroll
    for (int c = 0; c < 4; ++c) p[tt][c] = __fadd_rn(p[tt][c], __shfl_xor_sync(0xffffffffu, p[tt][c], 2));  // j += j + 8
#pragma unroll
    for (int c = 0; c < 4; ++c) p[tt][c] = __fadd_rn(p[tt][c], __shfl_xor_sync(0xffffffffu, p[tt][c], 1));  // j += j + 4
    sum[tt] = __fadd_rn(__fadd_rn(p[tt][0], p[tt][2]), __fadd_rn(p[tt][1], p[tt][3]));       // + 2, + 1
  }
}

// Warp: h columns i0 .. i0 + 3 (i0 = 4 blockIdx.x); rows 0-3 their gate rows, 4-7 their up rows.
template <int kTokens, bool kAligned>
__global__ void __launch_bounds__(32) sm90_shared_gate_up_kernel(const __grid_constant__ SharedExpertParams p) {
  __shared__ __align__(16) WarpSmem<kTokens> sm;
  const int lane = static_cast<int>(threadIdx.x);
  const int64_t H = p.hidden, i0 = 4 * static_cast<int64_t>(blockIdx.x);
  const int tok0 = static_cast<int>(blockIdx.y) * kTokens;
  const int tokens = min(kTokens, p.num_tokens - tok0);
  float acc[kTokens];
  dot_rows<kTokens, kAligned>(p.w13 + i0 * H, p.w13 + (p.intermediate + i0) * H, H,
                              {p.x + tok0 * H, H, p.hidden, tokens, {}}, p.hidden, sm, acc);
#pragma unroll
  for (int tt = 0; tt < kTokens; ++tt) {
    const float up_sum = __shfl_down_sync(0xffffffffu, acc[tt], 16);
    if (lane < 16 && lane % 4 == 0 && tt < tokens)
      p.h[static_cast<int64_t>(tok0 + tt) * p.intermediate + i0 + lane / 4] = shared_expert::swiglu_h(acc[tt], up_sum, p.clamp);
  }
}

// Warp: output features n0 .. n0 + 7 (n0 = 8 blockIdx.x), one W2 row each.
template <int kTokens>
__global__ void __launch_bounds__(32) sm90_shared_down_kernel(const __grid_constant__ SharedExpertParams p) {
  __shared__ __align__(16) WarpSmem<kTokens> sm;
  const int lane = static_cast<int>(threadIdx.x);
  const int64_t I = p.intermediate, n0 = 8 * static_cast<int64_t>(blockIdx.x);
  const int tok0 = static_cast<int>(blockIdx.y) * kTokens;
  const int tokens = min(kTokens, p.num_tokens - tok0);
  float acc[kTokens];
  dot_rows<kTokens, true>(p.w2 + n0 * I, p.w2 + (n0 + 4) * I, I, {p.h + tok0 * I, I, p.intermediate, tokens, {}},
                          p.intermediate, sm, acc);
  if (lane % 4 != 0) return;
#pragma unroll
  for (int tt = 0; tt < kTokens; ++tt) {
    if (tt >= tokens) break;
    uint16_t& out = p.y[static_cast<int64_t>(tok0 + tt) * p.hidden + n0 + lane / 4];
    out = shared_expert::down_out(acc[tt], out, p.accumulate);
  }
}

// Both kernels are programmatic dependents of the grid before them (ptx/griddep.cuh).
template <int kTokens>
cudaError_t launch_dot_products(const SharedExpertParams& p, cudaStream_t stream) {
  const unsigned token_blocks = static_cast<unsigned>((p.num_tokens + kTokens - 1) / kTokens);
  const dim3 grid1(static_cast<unsigned>(p.intermediate / 4), token_blocks);
  // x rows are copied 16 bytes at a time when x allows (H % 16 == 0 keeps every row aligned alike).
  const cudaError_t e = reinterpret_cast<uintptr_t>(p.x) % 16 == 0
                            ? launch_dependent(sm90_shared_gate_up_kernel<kTokens, true>, grid1, 32, 0, stream, p)
                            : launch_dependent(sm90_shared_gate_up_kernel<kTokens, false>, grid1, 32, 0, stream, p);
  if (e != cudaSuccess) return e;
  const dim3 grid2(static_cast<unsigned>(p.hidden / kRows), token_blocks);
  return launch_dependent(sm90_shared_down_kernel<kTokens>, grid2, 32, 0, stream, p);
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
  if (shared_expert_uses_tensor_cores(p)) return launch_sm90_shared_expert_mma(p, stream);
  const cudaError_t e = p.num_tokens == 1 ? launch_dot_products<1>(p, stream) : launch_dot_products<kTok>(p, stream);
  return e != cudaSuccess ? e : cudaGetLastError();
}

}  // namespace moe_ep::cuda
