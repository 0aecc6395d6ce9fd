// cp.async (SM80+): asynchronous global -> shared copies, grouped and awaited per group.
// With src_bytes < size the rest of the destination is zero-filled (src_bytes = 0: no read).
#pragma once

#include <cstdint>

#include "cuda/ptx/smem.cuh"

namespace moe_ep::cuda::ptx {

__device__ __forceinline__ void cp_async_16(uint32_t smem_dst, const void* src, uint32_t src_bytes = 16) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_dst), "l"(src),
               "r"(src_bytes));
}

__device__ __forceinline__ void cp_async_8(uint32_t smem_dst, const void* src, uint32_t src_bytes = 8) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;\n" ::"r"(smem_dst), "l"(src),
               "r"(src_bytes));
}

__device__ __forceinline__ void cp_async_4(uint32_t smem_dst, const void* src, uint32_t src_bytes = 4) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(smem_dst), "l"(src),
               "r"(src_bytes));
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }

// Waits until at most `kPending` committed groups are still in flight.
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending));
}

}  // namespace moe_ep::cuda::ptx
