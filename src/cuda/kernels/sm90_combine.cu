#include "cuda/kernels/sm90_combine.h"

#include "cuda/ptx/griddep.cuh"
#include "cuda/tile/bf16x8_sum.cuh"

namespace moe_ep::cuda {
namespace {

constexpr int kThreads = 128;

// Thread = 8 consecutive columns of one token (16-byte loads and stores).
__global__ void __launch_bounds__(kThreads) sm90_combine_kernel(const __grid_constant__ CombineParams p) {
  ptx::grid_dependency_wait();
  ptx::launch_dependents();
  const int t = blockIdx.x;
  const int col = (blockIdx.y * kThreads + threadIdx.x) * 8;
  if (col >= p.hidden) return;
  Bf16x8Sum sum;
  for (int k = 0; k < p.top_k; ++k) {
    const int row = p.slot_row[t * p.top_k + k];
    if (row >= 0) sum.add(p.o + static_cast<int64_t>(row) * p.hidden + col);
  }
  if (p.add != nullptr) sum.round_then_add(p.add + static_cast<int64_t>(t) * p.hidden + col);
  sum.store(p.y + static_cast<int64_t>(t) * p.hidden + col);
}

}  // namespace

cudaError_t launch_sm90_combine(const CombineParams& p, cudaStream_t stream) {
  if (p.num_tokens == 0) return cudaSuccess;
  const dim3 grid(p.num_tokens, (p.hidden / 8 + kThreads - 1) / kThreads);
  return launch_dependent(sm90_combine_kernel, grid, kThreads, 0, stream, p);
}

}  // namespace moe_ep::cuda
