#include "cuda/kernels/sm90_shared_expert.h"

#include "cuda/kernels/sm90_shared_expert_math.cuh"

namespace moe_ep::cuda {
namespace {

using shared_expert::bf16_value;

constexpr int kWarps = 8;
constexpr int kTok = 4;

// The half-warp's dot products of one weight row (n terms) with kTok activation rows; lane j
// (0..15) of the half-warp ends with the folded sum in lane 0.
__device__ __forceinline__ void dot16(const uint16_t* __restrict__ w, const uint16_t* __restrict__ act,
                                      int64_t act_stride, int n, int tokens, int j, float (&p)[kTok]) {
#pragma unroll
  for (int tt = 0; tt < kTok; ++tt) p[tt] = 0.0f;
  // Unrolled so that many independent weight loads are in flight; the adds keep their order.
#pragma unroll 16
  for (int i = 0; i < n; i += 16) {
    const float wv = bf16_value(w[i + j]);
#pragma unroll
    for (int tt = 0; tt < kTok; ++tt)
      if (tt < tokens) p[tt] = __fmaf_rn(bf16_value(act[tt * act_stride + i + j]), wv, p[tt]);  // exact product
  }
#pragma unroll
  for (int off = 8; off >= 1; off /= 2)
#pragma unroll
    for (int tt = 0; tt < kTok; ++tt) p[tt] = __fadd_rn(p[tt], __shfl_down_sync(0xffffffffu, p[tt], off, 16));
}

__global__ void __launch_bounds__(kWarps * 32) sm90_shared_gate_up_kernel(const __grid_constant__ SharedExpertParams p) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, j = lane % 16;
  const int i = blockIdx.x * kWarps + warp;
  if (i >= p.intermediate) return;
  const int tok0 = blockIdx.y * kTok;
  const int tokens = min(kTok, p.num_tokens - tok0);
  const int row = lane < 16 ? i : p.intermediate + i;
  float acc[kTok];
  dot16(p.w13 + static_cast<int64_t>(row) * p.hidden, p.x + static_cast<int64_t>(tok0) * p.hidden, p.hidden,
        p.hidden, tokens, j, acc);
#pragma unroll
  for (int tt = 0; tt < kTok; ++tt) {
    const float up_sum = __shfl_sync(0xffffffffu, acc[tt], 16);
    if (lane == 0 && tt < tokens)
      p.h[static_cast<int64_t>(tok0 + tt) * p.intermediate + i] = shared_expert::swiglu_h(acc[tt], up_sum, p.clamp);
  }
}

__global__ void __launch_bounds__(kWarps * 32) sm90_shared_down_kernel(const __grid_constant__ SharedExpertParams p) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, j = lane % 16;
  const int n = (blockIdx.x * kWarps + warp) * 2 + lane / 16;
  if ((blockIdx.x * kWarps + warp) * 2 >= p.hidden) return;  // whole warps only (H % 16 == 0)
  const int tok0 = blockIdx.y * kTok;
  const int tokens = min(kTok, p.num_tokens - tok0);
  float acc[kTok];
  dot16(p.w2 + static_cast<int64_t>(n) * p.intermediate, p.h + static_cast<int64_t>(tok0) * p.intermediate,
        p.intermediate, p.intermediate, tokens, j, acc);
  if (j != 0) return;
#pragma unroll
  for (int tt = 0; tt < kTok; ++tt) {
    if (tt >= tokens) break;
    uint16_t& out = p.y[static_cast<int64_t>(tok0 + tt) * p.hidden + n];
    out = shared_expert::down_out(acc[tt], out, p.accumulate);
  }
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
  const unsigned token_blocks = static_cast<unsigned>((p.num_tokens + kTok - 1) / kTok);
  const dim3 grid1(static_cast<unsigned>((p.intermediate + kWarps - 1) / kWarps), token_blocks);
  sm90_shared_gate_up_kernel<<<grid1, kWarps * 32, 0, stream>>>(p);
  const dim3 grid2(static_cast<unsigned>((p.hidden / 2 + kWarps - 1) / kWarps), token_blocks);
  sm90_shared_down_kernel<<<grid2, kWarps * 32, 0, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace moe_ep::cuda
