// Streaming global reads of data read once (expert weights): loads through the non-coherent
// path with no L1 allocation, and bulk prefetches into L2 that cost no registers, so a kernel
// can keep far more bytes in flight than its registers or shared memory hold.
#pragma once

#include <cstdint>

namespace moe_ep::cuda::ptx {

__device__ __forceinline__ uint4 ld_stream_v4(const void* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

__device__ __forceinline__ uint32_t ld_stream_u32(const void* p) {
  uint32_t v;
  asm volatile("ld.global.nc.L1::no_allocate.u32 %0, [%1];\n" : "=r"(v) : "l"(p));
  return v;
}

// SM90 bulk prefetch of [p, p + bytes) into L2; p and bytes multiples of 16. No completion
// to wait for: a later load of the range finds it in L2 (or fetches it again).
__device__ __forceinline__ void prefetch_l2_bulk(const void* p, uint32_t bytes) {
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;\n" ::"l"(p), "r"(bytes) : "memory");
}

}  // namespace moe_ep::cuda::ptx
