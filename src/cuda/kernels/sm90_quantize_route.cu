#include "cuda/kernels/sm90_quantize_route.h"

#include "cuda/kernels/sm90_kernel_config.cuh"
#include "cuda/kernels/sm90_nvfp4_row.cuh"
#include "cuda/kernels/sm90_permute_block.cuh"
#include "cuda/kernels/sm90_q8_block.cuh"

namespace moe_ep::cuda {
namespace {

// Block 0: the routing; block b > 0: Q8 of 32-element blocks (b - 1) * kPermuteThreads + tid.
template <class Id>
__global__ void __launch_bounds__(kPermuteThreads) sm90_quantize_route_kernel(const __grid_constant__ Q8QuantizeParams q8,
                                                                             const __grid_constant__ PermuteParams route) {
  extern __shared__ int32_t smem[];
  if (blockIdx.x == 0) {
    permute_block<Id>(route, smem);
    return;
  }
  ptx::grid_dependency_wait();
  ptx::launch_dependents();
  const int64_t block = static_cast<int64_t>(blockIdx.x - 1) * kPermuteThreads + threadIdx.x;
  if (block < q8.rows * (q8.cols / 32)) q8_quantize_block(q8, block);
}

// NVFP4: block 0 routes; block b > 0 quantizes rows (b - 1) * kRowsPerBlock + g, one group g of
// kNvfp4RowThreads threads per row (the NVFP4 kernel's block, sm90_nvfp4_row.cuh).
constexpr int kNvfp4RowThreads = 128;
constexpr int kNvfp4RowsPerBlock = kPermuteThreads / kNvfp4RowThreads;

template <class Id>
__global__ void __launch_bounds__(kPermuteThreads)
    sm90_nvfp4_quantize_route_kernel(const __grid_constant__ Nvfp4QuantizeParams x, const __grid_constant__ PermuteParams route) {
  extern __shared__ int32_t smem[];
  if (blockIdx.x == 0) {
    permute_block<Id>(route, smem);
    return;
  }
  ptx::grid_dependency_wait();
  ptx::launch_dependents();
  __shared__ float warp_amax[kNvfp4RowsPerBlock][kNvfp4RowThreads / 32];
  const int g = threadIdx.x / kNvfp4RowThreads;
  const int64_t row = static_cast<int64_t>(blockIdx.x - 1) * kNvfp4RowsPerBlock + g;
  nvfp4_quantize_row<kNvfp4RowThreads>(x, row, threadIdx.x % kNvfp4RowThreads, row < x.max_rows, warp_amax[g]);
}

}  // namespace

cudaError_t configure_sm90_nvfp4_quantize_route(int num_experts) {
  const int bytes = static_cast<int>(sm90_permute_shared_bytes(num_experts));
  const cudaError_t err = raise_dynamic_shared_limit(sm90_nvfp4_quantize_route_kernel<int32_t>, bytes);
  return err != cudaSuccess ? err : raise_dynamic_shared_limit(sm90_nvfp4_quantize_route_kernel<int64_t>, bytes);
}

cudaError_t launch_sm90_nvfp4_quantize_route(const Nvfp4QuantizeParams& x, const PermuteParams& route,
                                             cudaStream_t stream) {
  const unsigned grid = 1 + static_cast<unsigned>((x.max_rows + kNvfp4RowsPerBlock - 1) / kNvfp4RowsPerBlock);
  const size_t bytes = sm90_permute_shared_bytes(route.num_experts);
  if (route.ids_are_int64)
    return launch_dependent(sm90_nvfp4_quantize_route_kernel<int64_t>, grid, kPermuteThreads, bytes, stream, x, route);
  return launch_dependent(sm90_nvfp4_quantize_route_kernel<int32_t>, grid, kPermuteThreads, bytes, stream, x, route);
}

cudaError_t configure_sm90_quantize_route(int num_experts) {
  const int bytes = static_cast<int>(sm90_permute_shared_bytes(num_experts));
  const cudaError_t err = raise_dynamic_shared_limit(sm90_quantize_route_kernel<int32_t>, bytes);
  return err != cudaSuccess ? err : raise_dynamic_shared_limit(sm90_quantize_route_kernel<int64_t>, bytes);
}

cudaError_t launch_sm90_quantize_route(const Q8QuantizeParams& q8, const PermuteParams& route, cudaStream_t stream) {
  const int64_t blocks = q8.rows * (q8.cols / 32);
  const unsigned grid = 1 + static_cast<unsigned>((blocks + kPermuteThreads - 1) / kPermuteThreads);
  const size_t bytes = sm90_permute_shared_bytes(route.num_experts);
  if (route.ids_are_int64)
    return launch_dependent(sm90_quantize_route_kernel<int64_t>, grid, kPermuteThreads, bytes, stream, q8, route);
  return launch_dependent(sm90_quantize_route_kernel<int32_t>, grid, kPermuteThreads, bytes, stream, q8, route);
}

}  // namespace moe_ep::cuda
