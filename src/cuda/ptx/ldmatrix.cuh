// ldmatrix: four 8x8 b16 matrices from shared memory into one register each per lane.
// Lanes 8i..8i+7 give the row addresses of matrix i; lane l receives row l/4, b16 columns
// 2*(l%4) + {0,1} of every matrix (4 consecutive bytes).
#pragma once

#include <cstdint>

#include "cuda/ptx/smem.cuh"

namespace moe_ep::cuda::ptx {

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t smem_row_addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_row_addr));
}

}  // namespace moe_ep::cuda::ptx
