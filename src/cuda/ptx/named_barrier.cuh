// Named barriers: a subset of a block's warps (e.g. one warpgroup) synchronizes without the rest.
// Id 0 is __syncthreads(); the kernels here use 1.. for their warpgroups.
#pragma once

#include <cstdint>

namespace moe_ep::cuda::ptx {

// Every one of `threads` threads (a multiple of 32, whole warps) of barrier `id` must call it.
__device__ __forceinline__ void named_barrier_sync(uint32_t id, uint32_t threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

}  // namespace moe_ep::cuda::ptx
