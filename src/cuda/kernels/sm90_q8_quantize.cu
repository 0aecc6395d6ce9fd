#include "cuda/kernels/sm90_q8_quantize.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "cuda/kernels/sm90_q8_block.cuh"
#include "cuda/ptx/griddep.cuh"

namespace moe_ep::cuda {
namespace {

constexpr int kThreads = 256;

// One thread per 32-element block.
__global__ void __launch_bounds__(kThreads) sm90_q8_quantize_kernel(const __grid_constant__ Q8QuantizeParams p) {
  ptx::grid_dependency_wait();
  ptx::launch_dependents();
  const int64_t block = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (block >= p.rows * (p.cols / 32)) return;
  q8_quantize_block(p, block);
}

}  // namespace

cudaError_t launch_sm90_q8_quantize(const Q8QuantizeParams& p, cudaStream_t stream) {
  const int64_t blocks = p.rows * (p.cols / 32);
  if (blocks == 0) return cudaSuccess;
  const unsigned grid = static_cast<unsigned>((blocks + kThreads - 1) / kThreads);
  return launch_dependent(sm90_q8_quantize_kernel, grid, kThreads, 0, stream, p);
}

}  // namespace moe_ep::cuda
