// Bulk copies (SM90): global -> shared copies by the copy engine, completing on an mbarrier's
// transaction count, and the L2 eviction policy they may carry.
//
// Protocol: before the copies of a phase can complete, some thread adds their bytes to the
// barrier's transaction count of that phase (mbarrier_expect_tx); the phase completes once its
// arrivals are in and the count is back to zero, and a thread that observes the completion
// (mbarrier_wait_parity) sees the copied bytes with plain loads and through wgmma.
#pragma once

#include <cstdint>

#include "cuda/ptx/smem.cuh"

namespace moe_ep::cuda::ptx {

// An L2 policy for data read once (streamed weights): evict these lines first.
__device__ __forceinline__ uint64_t l2_evict_first_policy() {
  uint64_t policy;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(policy));
  return policy;
}

// The same for data other blocks may read again (no eviction hint).
__device__ __forceinline__ uint64_t l2_evict_normal_policy() {
  uint64_t policy;
  asm volatile("createpolicy.fractional.L2::evict_normal.b64 %0, 1.0;\n" : "=l"(policy));
  return policy;
}

// Adds `bytes` to the transaction count of the barrier's current phase (no arrival).
__device__ __forceinline__ void mbarrier_expect_tx(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(bytes)
               : "memory");
}

// `bytes` (a multiple of 16; both addresses 16-byte aligned) from global `src` to shared
// `smem_dst` of this block; on completion the bytes are subtracted from `bar`'s count.
__device__ __forceinline__ void cp_async_bulk_g2s(uint32_t smem_dst, const void* src, uint32_t bytes, uint64_t* bar,
                                                  uint64_t l2_policy) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1], %2, [%3], %4;\n" ::"r"(
          smem_dst),
      "l"(src), "r"(bytes), "r"(smem_addr(bar)), "l"(l2_policy)
      : "memory");
}

}  // namespace moe_ep::cuda::ptx
