// Shared-memory mbarriers (SM80+, phases with parity waits) and the generic -> async proxy fence
// (SM90) used between threads that write shared memory and the wgmma that reads it.
//
// Phase protocol: a barrier initialised with `count` completes a phase after `count` arrivals;
// try_wait.parity(p) succeeds once the phase of parity p has completed. A fresh barrier is in
// phase 0, and waiting for parity 1 succeeds at once (the phase "before" 0 counts as complete),
// so a producer waits for parity ((use / stages) & 1) ^ 1 on an empty-slot barrier and a
// consumer for (use / stages) & 1 on a full-slot barrier.
#pragma once

#include <cstdint>

#include "cuda/ptx/smem.cuh"

namespace moe_ep::cuda::ptx {

__device__ __forceinline__ void mbarrier_init(uint64_t* bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(count) : "memory");
}

// Arrive (release at CTA scope).
__device__ __forceinline__ void mbarrier_arrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(smem_addr(bar)) : "memory");
}

// Blocks until the phase of `parity` has completed (acquire at CTA scope).
__device__ __forceinline__ void mbarrier_wait_parity(uint64_t* bar, uint32_t parity) {
  asm volatile(
      "{\n"
      ".reg .pred done;\n"
      "WAIT:\n"  // labels are local to the braces
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT;\n"
      "}\n" ::"r"(smem_addr(bar)),
      "r"(parity)
      : "memory");
}

// Makes this thread's earlier generic-proxy shared-memory writes (st.shared, completed cp.async)
// visible to later async-proxy reads (wgmma operands) ordered after it by a barrier.
__device__ __forceinline__ void fence_proxy_async_shared() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

// Orders mbarrier.init before other threads use the barrier.
__device__ __forceinline__ void fence_mbarrier_init() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}

}  // namespace moe_ep::cuda::ptx
