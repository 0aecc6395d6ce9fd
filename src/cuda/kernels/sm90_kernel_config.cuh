// Plan-time configuration of a persistent kernel: raise its dynamic shared-memory limit and
// report how many blocks of `threads` fit on one multiprocessor.
#pragma once

#include <cuda_runtime.h>

namespace moe_ep::cuda {

template <class Kernel>
cudaError_t configure_persistent_kernel(Kernel kernel, int threads, int shared_bytes, int* blocks_per_sm) {
  cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, shared_bytes);
  if (err != cudaSuccess) return err;
  return cudaOccupancyMaxActiveBlocksPerMultiprocessor(blocks_per_sm, kernel, threads, shared_bytes);
}

// Two variants of one kernel share a launch grid: the smaller of their occupancies.
template <class KernelA, class KernelB>
cudaError_t configure_persistent_kernels(KernelA a, int shared_a, KernelB b, int shared_b, int threads,
                                         int* blocks_per_sm) {
  int na = 0, nb = 0;
  cudaError_t err = configure_persistent_kernel(a, threads, shared_a, &na);
  if (err == cudaSuccess) err = configure_persistent_kernel(b, threads, shared_b, &nb);
  *blocks_per_sm = na < nb ? na : nb;
  return err;
}

}  // namespace moe_ep::cuda
