// Shared-memory addressing for PTX operands.
#pragma once

#include <cstdint>

namespace moe_ep::cuda::ptx {

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

}  // namespace moe_ep::cuda::ptx
