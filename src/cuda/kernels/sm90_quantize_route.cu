#include "cuda/kernels/sm90_quantize_route.h"

#include "cuda/kernels/sm90_kernel_config.cuh"
#include "cuda/kernels/sm90_nvfp4_row.cuh"
#include "cuda/kernels/sm90_permute_block.cuh"
#include "cuda/kernels/sm90_q8_block.cuh"

namespace moe_ep::cuda {
namespace {

// The quantization beside the routing, from block 1 on: Q8 of 32-element blocks
// (block - 1) * kPermuteThreads + tid, or NVFP4 of rows (block - 1) * kRowsPerBlock + g, one group g
// of kRowThreads threads per row (the NVFP4 kernel's block, sm90_nvfp4_row.cuh).
struct Q8Blocks {
  using Params = Q8QuantizeParams;
  static int64_t grid_blocks(const Params& q) { return (q.rows * (q.cols / 32) + kPermuteThreads - 1) / kPermuteThreads; }
  static __device__ __forceinline__ void run(const Params& q, int64_t block, int32_t*) {
    const int64_t b = block * kPermuteThreads + threadIdx.x;
    if (b < q.rows * (q.cols / 32)) q8_quantize_block(q, b);
  }
};

struct Nvfp4Rows {
  using Params = Nvfp4QuantizeParams;
  static constexpr int kRowThreads = 128, kRowsPerBlock = kPermuteThreads / kRowThreads;
  static_assert(sizeof(int32_t) * (2 + kPermuteWarps) >= sizeof(float) * kRowsPerBlock * (kRowThreads / 32),
                "one expert's routing shared memory holds the groups' warp maxima");
  static int64_t grid_blocks(const Params& x) { return (x.max_rows + kRowsPerBlock - 1) / kRowsPerBlock; }
  // The groups' warp maxima in the routing block's dynamic shared memory (136 E >= 128 bytes), so
  // the kernel needs no more than the routing's size (the layer's check of E).
  static __device__ __forceinline__ void run(const Params& x, int64_t block, int32_t* smem) {
    const int g = threadIdx.x / kRowThreads;
    float* warp_amax = reinterpret_cast<float*>(smem) + g * (kRowThreads / 32);
    const int64_t row = block * kRowsPerBlock + g;
    nvfp4_quantize_row<kRowThreads>(x, row, threadIdx.x % kRowThreads, row < x.max_rows, warp_amax);
  }
};

// Block 0: the routing; blocks 1 ..: Work's quantization.
template <class Work, class Id>
__global__ void __launch_bounds__(kPermuteThreads)
    sm90_quantize_route_kernel(const __grid_constant__ typename Work::Params x, const __grid_constant__ PermuteParams route) {
  extern __shared__ int32_t smem[];
  if (blockIdx.x == 0) {
    permute_block<Id>(route, smem);
    return;
  }
  ptx::grid_dependency_wait();
  ptx::launch_dependents();
  Work::run(x, static_cast<int64_t>(blockIdx.x) - 1, smem);
}

template <class Work>
cudaError_t configure(int num_experts) {
  const int bytes = static_cast<int>(sm90_permute_shared_bytes(num_experts));
  const cudaError_t err = raise_dynamic_shared_limit(sm90_quantize_route_kernel<Work, int32_t>, bytes);
  return err != cudaSuccess ? err : raise_dynamic_shared_limit(sm90_quantize_route_kernel<Work, int64_t>, bytes);
}

template <class Work>
cudaError_t launch(const typename Work::Params& x, const PermuteParams& route, cudaStream_t stream) {
  const unsigned grid = 1 + static_cast<unsigned>(Work::grid_blocks(x));
  const size_t bytes = sm90_permute_shared_bytes(route.num_experts);
  if (route.ids_are_int64)
    return launch_dependent(sm90_quantize_route_kernel<Work, int64_t>, grid, kPermuteThreads, bytes, stream, x, route);
  return launch_dependent(sm90_quantize_route_kernel<Work, int32_t>, grid, kPermuteThreads, bytes, stream, x, route);
}

}  // namespace

cudaError_t configure_sm90_quantize_route(int num_experts) { return configure<Q8Blocks>(num_experts); }

cudaError_t launch_sm90_quantize_route(const Q8QuantizeParams& q8, const PermuteParams& route, cudaStream_t stream) {
  return launch<Q8Blocks>(q8, route, stream);
}

cudaError_t configure_sm90_nvfp4_quantize_route(int num_experts) { return configure<Nvfp4Rows>(num_experts); }

cudaError_t launch_sm90_nvfp4_quantize_route(const Nvfp4QuantizeParams& x, const PermuteParams& route,
                                             cudaStream_t stream) {
  if (x.num_rows != nullptr) return cudaErrorInvalidValue;  // x.max_rows rows: no device row count
  return launch<Nvfp4Rows>(x, route, stream);
}

}  // namespace moe_ep::cuda
