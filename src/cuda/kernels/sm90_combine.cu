#include "cuda/kernels/sm90_combine.h"

#include <cuda_bf16.h>

#include "cuda/ptx/griddep.cuh"

namespace moe_ep::cuda {
namespace {

constexpr int kThreads = 128;

__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
  const uint32_t l = __bfloat16_as_ushort(__float2bfloat16_rn(lo));
  const uint32_t h = __bfloat16_as_ushort(__float2bfloat16_rn(hi));
  return l | (h << 16);
}

// Thread = 8 consecutive columns of one token (16-byte loads and stores).
__global__ void __launch_bounds__(kThreads) sm90_combine_kernel(const __grid_constant__ CombineParams p) {
  ptx::grid_dependency_wait();
  ptx::launch_dependents();
  const int t = blockIdx.x;
  const int col = (blockIdx.y * kThreads + threadIdx.x) * 8;
  if (col >= p.hidden) return;
  float sum[8];
#pragma unroll
  for (int j = 0; j < 8; ++j) sum[j] = 0.0f;
  for (int k = 0; k < p.top_k; ++k) {
    const int row = p.slot_row[t * p.top_k + k];
    if (row < 0) continue;
    const uint4 v = *reinterpret_cast<const uint4*>(p.o + static_cast<int64_t>(row) * p.hidden + col);
    const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      sum[2 * j] += __uint_as_float(w[j] << 16);
      sum[2 * j + 1] += __uint_as_float(w[j] & 0xFFFF0000u);
    }
  }
  if (p.add != nullptr) {
    const uint4 v = *reinterpret_cast<const uint4*>(p.add + static_cast<int64_t>(t) * p.hidden + col);
    const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      sum[2 * j] = __fadd_rn(__bfloat162float(__float2bfloat16_rn(sum[2 * j])), __uint_as_float(w[j] << 16));
      sum[2 * j + 1] =
          __fadd_rn(__bfloat162float(__float2bfloat16_rn(sum[2 * j + 1])), __uint_as_float(w[j] & 0xFFFF0000u));
    }
  }
  uint4 out;
  out.x = pack_bf16x2(sum[0], sum[1]);
  out.y = pack_bf16x2(sum[2], sum[3]);
  out.z = pack_bf16x2(sum[4], sum[5]);
  out.w = pack_bf16x2(sum[6], sum[7]);
  *reinterpret_cast<uint4*>(p.y + static_cast<int64_t>(t) * p.hidden + col) = out;
}

}  // namespace

cudaError_t launch_sm90_combine(const CombineParams& p, cudaStream_t stream) {
  if (p.num_tokens == 0) return cudaSuccess;
  const dim3 grid(p.num_tokens, (p.hidden / 8 + kThreads - 1) / kThreads);
  return launch_dependent(sm90_combine_kernel, grid, kThreads, 0, stream, p);
}

}  // namespace moe_ep::cuda
