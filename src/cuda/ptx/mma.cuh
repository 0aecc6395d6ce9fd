// Warp-level tensor-core MMA (mma.sync), SM80+ shapes, fp32 accumulation.
//
// Fragment layouts (lane = 4 * group + thread_in_group):
//   A m16 x k: a0 row group, a1 row group+8, a2 row group (upper k half), a3 row group+8 (upper)
//   B k x n8:  b0 column group (lower k half), b1 column group (upper k half)
//   C m16 x n8: c0,c1 row group, columns 2*thread_in_group + {0,1}; c2,c3 row group+8
#pragma once

#include <cstdint>

#include "cuda/ptx/convert.cuh"

namespace moe_ep::cuda::ptx {

// D = A(16x32 e4m3, row) * B(32x8 e4m3, col) + C. Each A/B register holds 4 consecutive k.
__device__ __forceinline__ void mma_m16n8k32_e4m3(float (&d)[4], const uint32_t (&a)[4],
                                                  uint32_t b0, uint32_t b1, const float (&c)[4]) {
  asm("mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%10,%11,%12,%13};\n"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "f"(c[0]), "f"(c[1]),
        "f"(c[2]), "f"(c[3]));
}

// D = A(16x16 f16, row) * B(16x8 f16, col) + C. Each A/B register holds 2 consecutive k.
__device__ __forceinline__ void mma_m16n8k16_f16(float (&d)[4], const uint32_t (&a)[4],
                                                 uint32_t b0, uint32_t b1, const float (&c)[4]) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%10,%11,%12,%13};\n"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "f"(c[0]), "f"(c[1]),
        "f"(c[2]), "f"(c[3]));
}

// D = A(16x16 bf16, row) * B(16x8 bf16, col) + C. Each A/B register holds 2 consecutive k.
__device__ __forceinline__ void mma_m16n8k16_bf16(float (&d)[4], const uint32_t (&a)[4],
                                                  uint32_t b0, uint32_t b1, const float (&c)[4]) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%10,%11,%12,%13};\n"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "f"(c[0]), "f"(c[1]),
        "f"(c[2]), "f"(c[3]));
}

// The m16n8k32 e4m3 product as SM90 computes it: SM90 has no FP8 mma.sync, so ptxas lowers
// mma_m16n8k32_e4m3 to e4m3 -> f16 unpacks of the low and the high 2 bytes of every A/B
// register, HMMA of the low halves from zero, HMMA of the high halves onto it, then + C. This is
// that sequence without the final + C (an FADD the compiler cannot drop for a zero C, because
// of signed zeros): D = A * B, bitwise the lowered mma_m16n8k32_e4m3 with C = 0.
__device__ __forceinline__ void mma_m16n8k32_e4m3_via_f16(float (&d)[4], const uint32_t (&a)[4],
                                                          uint32_t b0, uint32_t b1) {
  uint32_t a_lo[4], a_hi[4], b_lo[2], b_hi[2];
#pragma unroll
  for (int i = 0; i < 4; ++i) cvt_f16x2x2_from_e4m3x4(a[i], a_lo[i], a_hi[i]);
  cvt_f16x2x2_from_e4m3x4(b0, b_lo[0], b_hi[0]);
  cvt_f16x2x2_from_e4m3x4(b1, b_lo[1], b_hi[1]);
  const float zero[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  mma_m16n8k16_f16(d, a_lo, b_lo[0], b_lo[1], zero);
  mma_m16n8k16_f16(d, a_hi, b_hi[0], b_hi[1], d);
}

}  // namespace moe_ep::cuda::ptx
