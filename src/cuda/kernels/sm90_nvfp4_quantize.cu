#include "cuda/kernels/sm90_nvfp4_quantize.h"

#include "cuda/kernels/sm90_nvfp4_row.cuh"
#include "cuda/ptx/griddep.cuh"

namespace moe_ep::cuda {
namespace {

constexpr int kThreads = 128;

// One block per row (nvfp4_quantize_row). Launched as a programmatic dependent (ptx/griddep.cuh):
// it waits for the kernel before it (the input, the row count) and lets the next one launch at
// once (that one waits in turn).
__global__ void __launch_bounds__(kThreads) sm90_nvfp4_quantize_kernel(const __grid_constant__ Nvfp4QuantizeParams p) {
  ptx::grid_dependency_wait();
  ptx::launch_dependents();
  const int64_t row = blockIdx.x;
  if (p.num_rows != nullptr && row >= *p.num_rows) return;
  __shared__ float warp_amax[kThreads / 32];
  nvfp4_quantize_row<kThreads>(p, row, threadIdx.x, true, warp_amax);
}

}  // namespace

cudaError_t launch_sm90_nvfp4_quantize(const Nvfp4QuantizeParams& p, cudaStream_t stream) {
  if (p.max_rows == 0) return cudaSuccess;
  return launch_dependent(sm90_nvfp4_quantize_kernel, p.max_rows, kThreads, 0, stream, p);
}

}  // namespace moe_ep::cuda
