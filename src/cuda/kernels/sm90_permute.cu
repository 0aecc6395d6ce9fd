#include "cuda/kernels/sm90_permute.h"

#include "cuda/kernels/sm90_kernel_config.cuh"
#include "cuda/kernels/sm90_permute_block.cuh"

namespace moe_ep::cuda {
namespace {

template <class Id>
__global__ void __launch_bounds__(kPermuteThreads) sm90_permute_kernel(const __grid_constant__ PermuteParams p) {
  extern __shared__ int32_t smem[];
  permute_block<Id>(p, smem);
}

}  // namespace

size_t sm90_permute_shared_bytes(int num_experts) {
  return sizeof(int32_t) * static_cast<size_t>(num_experts) * (2 + kPermuteWarps);
}

cudaError_t configure_sm90_permute(int num_experts) {
  const int bytes = static_cast<int>(sm90_permute_shared_bytes(num_experts));
  const cudaError_t err = raise_dynamic_shared_limit(sm90_permute_kernel<int32_t>, bytes);
  return err != cudaSuccess ? err : raise_dynamic_shared_limit(sm90_permute_kernel<int64_t>, bytes);
}

cudaError_t launch_sm90_permute(const PermuteParams& p, cudaStream_t stream) {
  const size_t bytes = sm90_permute_shared_bytes(p.num_experts);
  if (p.ids_are_int64) return launch_dependent(sm90_permute_kernel<int64_t>, 1, kPermuteThreads, bytes, stream, p);
  return launch_dependent(sm90_permute_kernel<int32_t>, 1, kPermuteThreads, bytes, stream, p);
}

}  // namespace moe_ep::cuda
