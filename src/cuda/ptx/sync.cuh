// Flags between GPUs (and between CTAs of one GPU): the nanosecond clock and acquire / release
// accesses at GPU or system scope.
#pragma once

#include <cstdint>

namespace moe_ep::cuda::ptx {

// The global nanosecond timer (%globaltimer): one clock for every SM of the GPU.
__device__ __forceinline__ uint64_t globaltimer_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// Memory scope of a flag: kGpu for CTAs of one GPU, kSystem for peers on other GPUs (NVLink).
enum class Scope { kGpu, kSystem };

template <Scope kScope>
__device__ __forceinline__ uint32_t ld_acquire(const uint32_t* p) {
  uint32_t v;
  if constexpr (kScope == Scope::kGpu)
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  else
    asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

template <Scope kScope>
__device__ __forceinline__ void st_release(uint32_t* p, uint32_t v) {
  if constexpr (kScope == Scope::kGpu)
    asm volatile("st.release.gpu.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
  else
    asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

// *p += v at GPU scope with acquire and release semantics; returns the value before.
__device__ __forceinline__ uint32_t atom_add_acq_rel_gpu(uint32_t* p, uint32_t v) {
  uint32_t old;
  asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], %2;" : "=r"(old) : "l"(p), "r"(v) : "memory");
  return old;
}

// Wrap-around order of epochs: a is at or past b.
__device__ __forceinline__ bool epoch_reached(uint32_t a, uint32_t b) {
  return static_cast<int32_t>(a - b) >= 0;
}

}  // namespace moe_ep::cuda::ptx
