// Plan-time configuration of a kernel: raise its dynamic shared-memory limit and (persistent
// kernels) report how many blocks of `threads` fit on one multiprocessor.
#pragma once

#include <mutex>

#include <cuda_runtime.h>

namespace moe_ep::cuda {

// Raises a kernel's dynamic shared-memory limit on the current device to at least `bytes`, never
// lowers it: the limit belongs to the process and device, not to a layer, and a layer created
// later with fewer experts or a smaller K must not take away what an earlier one needs.
// Serialized, since layers may be created from several threads.
template <class Kernel>
cudaError_t raise_dynamic_shared_limit(Kernel kernel, int bytes) {
  static std::mutex mutex;
  const std::lock_guard<std::mutex> lock(mutex);
  cudaFuncAttributes attributes{};
  const cudaError_t err = cudaFuncGetAttributes(&attributes, kernel);
  if (err != cudaSuccess) return err;
  if (attributes.maxDynamicSharedSizeBytes >= bytes) return cudaSuccess;
  return cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
}

template <class Kernel>
cudaError_t configure_persistent_kernel(Kernel kernel, int threads, int shared_bytes, int* blocks_per_sm) {
  const cudaError_t err = raise_dynamic_shared_limit(kernel, shared_bytes);
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
