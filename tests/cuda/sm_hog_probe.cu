#include "sm_hog_probe.h"

namespace moe_ep::cuda::test {
namespace {

__device__ __forceinline__ uint64_t global_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__global__ void __launch_bounds__(1024) sm_hog_kernel(uint64_t nanoseconds) {
  extern __shared__ uint8_t held[];
  const uint64_t end = global_ns() + nanoseconds;
  while (global_ns() < end) __nanosleep(1000);
  if (threadIdx.x == 0) held[0] = 0;  // the allocation stays
}

}  // namespace

cudaError_t launch_sm_hog(int blocks, int shared_bytes, uint64_t nanoseconds, cudaStream_t stream) {
  if (const cudaError_t e = cudaFuncSetAttribute(sm_hog_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, shared_bytes);
      e != cudaSuccess)
    return e;
  sm_hog_kernel<<<blocks, 1024, shared_bytes, stream>>>(nanoseconds);
  return cudaGetLastError();
}

}  // namespace moe_ep::cuda::test
