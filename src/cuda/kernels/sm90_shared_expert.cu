#include "cuda/kernels/sm90_shared_expert.h"

#include "cuda/kernels/sm90_shared_expert_math.cuh"
#include "cuda/ptx/ld_global.cuh"

namespace moe_ep::cuda {
namespace {

using shared_expert::bf16_value;

constexpr int kWarps = 4;
constexpr int kTok = 4;  // tokens per block (grid.y); a T = 1 forward takes the kernels for one
// A half-warp reads a weight row in segments of 128 terms (16 lanes x 16 bytes, contiguous), kBatch
// segments in flight per lane; a segment goes through the warp's shared memory so that lane j can
// take its partial's terms j, j + 16, ... of it. The block's activation rows for the batch's
// kBatchTerms terms are staged in shared memory (double-buffered) by all its threads.
constexpr int kSegmentTerms = 128;
constexpr int kBatch = 8;
constexpr int kBatchTerms = kBatch * kSegmentTerms;
constexpr int kSegmentStride = 2 * kSegmentTerms + 32;  // bytes: the halves' segments in other banks
constexpr int kWarpSmem = kBatch * 2 * kSegmentStride;

template <int kTokens>
struct DotSmem {
  uint8_t segments[kWarps][kWarpSmem];
  uint16_t act[2][kTokens][kBatchTerms];
};

// The activation terms [s0 * 128, + kBatchTerms) of the block's rows, 16 bytes per thread and
// step (kAligned: 16-byte loads, else 2-byte ones); terms past n are zero (never read).
template <int kTokens, bool kAligned>
struct ActStage {
  static constexpr int kChunks = kTokens * kBatchTerms / 8, kPerThread = (kChunks + kWarps * 32 - 1) / (kWarps * 32);
  uint4 v[kPerThread];
  __device__ __forceinline__ void load(const uint16_t* act, int64_t stride, int n, int tokens, int s0) {
#pragma unroll
    for (int c = 0; c < kPerThread; ++c) {
      const int idx = threadIdx.x + c * kWarps * 32, tt = idx / (kBatchTerms / 8);
      const int term = s0 * kSegmentTerms + 8 * (idx % (kBatchTerms / 8));
      v[c] = make_uint4(0, 0, 0, 0);
      if (idx < kChunks && tt < tokens && term < n) {
        const uint16_t* src = act + tt * stride + term;
        if constexpr (kAligned) {
          v[c] = __ldg(reinterpret_cast<const uint4*>(src));
        } else {
          uint32_t w[4];
#pragma unroll
          for (int q = 0; q < 4; ++q) w[q] = static_cast<uint32_t>(__ldg(src + 2 * q)) | static_cast<uint32_t>(__ldg(src + 2 * q + 1)) << 16;
          v[c] = make_uint4(w[0], w[1], w[2], w[3]);
        }
      }
    }
  }
  __device__ __forceinline__ void store(uint16_t (*dst)[kBatchTerms]) const {
#pragma unroll
    for (int c = 0; c < kPerThread; ++c) {
      const int idx = threadIdx.x + c * kWarps * 32;
      if (idx < kChunks) *reinterpret_cast<uint4*>(&dst[idx / (kBatchTerms / 8)][8 * (idx % (kBatchTerms / 8))]) = v[c];
    }
  }
};

// The dot products of one weight row w (n terms, n % 16 == 0, 16-byte aligned; null: this warp
// only helps to stage the activations) with the block's activation rows, in the CPU's order:
// partial j (lane j of the half-warp, 0..15) adds the terms j, j + 16, j + 32, ... in sequence,
// then the fold p[j] += p[j + 8], + 4, + 2, + 1 leaves the sum in lane j = 0.
// Every thread of the block calls it (it synchronizes the block).
template <int kTokens, bool kAligned>
__device__ __forceinline__ void dot_row(const uint16_t* __restrict__ w, const uint16_t* __restrict__ act,
                                        int64_t act_stride, int n, int tokens, DotSmem<kTokens>& sm,
                                        float (&p)[kTokens]) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, j = lane % 16;
  uint8_t* seg = sm.segments[warp] + (lane / 16) * kSegmentStride;
#pragma unroll
  for (int tt = 0; tt < kTokens; ++tt) p[tt] = 0.0f;
  const int segments = (n + kSegmentTerms - 1) / kSegmentTerms;
  uint4 reg[kBatch];
  auto load_w = [&](int s0) {
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      const int first = (s0 + u) * kSegmentTerms + 8 * j;  // lane j's 8 terms of the segment
      reg[u] = w && first < n ? ptx::ld_stream_v4(w + first) : make_uint4(0, 0, 0, 0);
    }
  };
  ActStage<kTokens, kAligned> stage;
  load_w(0);
  stage.load(act, act_stride, n, tokens, 0);
  stage.store(sm.act[0]);
  __syncthreads();
  for (int s0 = 0, buf = 0; s0 < segments; s0 += kBatch, buf ^= 1) {
#pragma unroll
    for (int u = 0; u < kBatch; ++u) *reinterpret_cast<uint4*>(seg + 2 * u * kSegmentStride + 16 * j) = reg[u];
    __syncwarp();
    const bool more = s0 + kBatch < segments;  // block-uniform
    if (more) {
      load_w(s0 + kBatch);
      stage.load(act, act_stride, n, tokens, s0 + kBatch);
    }
    if (w) {
#pragma unroll
      for (int u = 0; u < kBatch; ++u) {
        const int base = (s0 + u) * kSegmentTerms;
        if (base >= n) break;
        const uint16_t* terms = reinterpret_cast<const uint16_t*>(seg + 2 * u * kSegmentStride);
#pragma unroll
        for (int m = 0; m < kSegmentTerms / 16; ++m) {
          if (base + 16 * m >= n) break;  // n % 16 == 0: the whole half-warp stops together
          const float wv = bf16_value(terms[16 * m + j]);
          const int i = u * kSegmentTerms + 16 * m + j;
#pragma unroll
          for (int tt = 0; tt < kTokens; ++tt)
            if (kTokens == 1 || tt < tokens) p[tt] = __fmaf_rn(bf16_value(sm.act[buf][tt][i]), wv, p[tt]);  // exact product
        }
      }
    }
    if (more) stage.store(sm.act[buf ^ 1]);
    __syncthreads();  // next batch's activations staged; this batch's segments and activations read
  }
#pragma unroll
  for (int off = 8; off >= 1; off /= 2)
#pragma unroll
    for (int tt = 0; tt < kTokens; ++tt) p[tt] = __fadd_rn(p[tt], __shfl_down_sync(0xffffffffu, p[tt], off, 16));
}

// Warp: h column i; lanes 0-15 its gate row, 16-31 its up row.
template <int kTokens, bool kAligned>
__global__ void __launch_bounds__(kWarps * 32) sm90_shared_gate_up_kernel(const __grid_constant__ SharedExpertParams p) {
  __shared__ __align__(16) DotSmem<kTokens> sm;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int i = blockIdx.x * kWarps + warp;
  const bool active = i < p.intermediate;  // warp-uniform; idle warps still stage activations
  const int tok0 = blockIdx.y * kTokens;
  const int tokens = min(kTokens, p.num_tokens - tok0);
  const int row = lane < 16 ? i : p.intermediate + i;
  float acc[kTokens];
  dot_row<kTokens, kAligned>(active ? p.w13 + static_cast<int64_t>(row) * p.hidden : nullptr,
                             p.x + static_cast<int64_t>(tok0) * p.hidden, p.hidden, p.hidden, tokens, sm, acc);
#pragma unroll
  for (int tt = 0; tt < kTokens; ++tt) {
    const float up_sum = __shfl_sync(0xffffffffu, acc[tt], 16);
    if (active && lane == 0 && tt < tokens)
      p.h[static_cast<int64_t>(tok0 + tt) * p.intermediate + i] = shared_expert::swiglu_h(acc[tt], up_sum, p.clamp);
  }
}

// Warp: output features 2w, 2w + 1, one per half-warp.
template <int kTokens>
__global__ void __launch_bounds__(kWarps * 32) sm90_shared_down_kernel(const __grid_constant__ SharedExpertParams p) {
  __shared__ __align__(16) DotSmem<kTokens> sm;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int n = 2 * (blockIdx.x * kWarps + warp) + lane / 16;
  const bool active = n < p.hidden;  // warp-uniform (H % 16 == 0)
  const int tok0 = blockIdx.y * kTokens;
  const int tokens = min(kTokens, p.num_tokens - tok0);
  float acc[kTokens];
  dot_row<kTokens, true>(active ? p.w2 + static_cast<int64_t>(n) * p.intermediate : nullptr,
                         p.h + static_cast<int64_t>(tok0) * p.intermediate, p.intermediate, p.intermediate,
                         tokens, sm, acc);
  if (!active || lane % 16 != 0) return;
#pragma unroll
  for (int tt = 0; tt < kTokens; ++tt) {
    if (tt >= tokens) break;
    uint16_t& out = p.y[static_cast<int64_t>(tok0 + tt) * p.hidden + n];
    out = shared_expert::down_out(acc[tt], out, p.accumulate);
  }
}

template <int kTokens>
void launch_dot_products(const SharedExpertParams& p, cudaStream_t stream) {
  const unsigned token_blocks = static_cast<unsigned>((p.num_tokens + kTokens - 1) / kTokens);
  const dim3 grid1(static_cast<unsigned>((p.intermediate + kWarps - 1) / kWarps), token_blocks);
  // x rows are staged with 16-byte loads when x allows (H % 16 == 0 keeps every row aligned alike).
  if (reinterpret_cast<uintptr_t>(p.x) % 16 == 0)
    sm90_shared_gate_up_kernel<kTokens, true><<<grid1, kWarps * 32, 0, stream>>>(p);
  else
    sm90_shared_gate_up_kernel<kTokens, false><<<grid1, kWarps * 32, 0, stream>>>(p);
  const dim3 grid2(static_cast<unsigned>((p.hidden / 2 + kWarps - 1) / kWarps), token_blocks);
  sm90_shared_down_kernel<kTokens><<<grid2, kWarps * 32, 0, stream>>>(p);
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
  if (p.num_tokens == 1)
    launch_dot_products<1>(p, stream);
  else
    launch_dot_products<kTok>(p, stream);
  return cudaGetLastError();
}

}  // namespace moe_ep::cuda
