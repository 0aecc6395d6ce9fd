// E4M3 codes moved to a coarser power-of-two scale: Q8 rows moved to one scale per 128 re-encode
// each group's four k32 blocks to the largest of their four E8M0 scales (kernels/sm90_q8_regroup.cu,
// the activations of the rs-fp8-k128 forms).
#pragma once

#include <cstdint>

#include <cuda_fp16.h>

#include "cuda/ptx/convert.cuh"

namespace moe_ep::cuda {

// The largest of the four E8M0 bytes of a word.
__device__ __forceinline__ int e8m0_word_max(uint32_t word) {
  const uint32_t m = __vmaxu4(word, word >> 16);
  return static_cast<int>(max(m & 0xFF, (m >> 8) & 0xFF));
}

// Four e4m3 codes (byte i = code i) times 2^-d for d >= 1, each rounded to nearest even in e4m3,
// subnormals included (a code below half the least subnormal becomes a zero of its sign). Up to
// d = 15 the product is exact in f16 (an e4m3 value's last bit is at least 2^-9, times 2^-15 is
// f16's least subnormal 2^-24), so one rounding happens, from f16; beyond, from fp32.
__device__ __forceinline__ uint32_t e4m3x4_times_pow2_neg(uint32_t v, int d) {
  uint32_t lo, hi;
  ptx::cvt_f16x2x2_from_e4m3x4(v, lo, hi);
  if (d <= 15) {
    const uint32_t f = d == 15 ? 0x0200u : 0x3C00u - (static_cast<uint32_t>(d) << 10);  // 2^-d in f16
    const uint32_t scale = f | (f << 16);
    return ptx::cvt_e4m3x2_from_f16x2(ptx::hmul2_f16(lo, scale)) |
           (static_cast<uint32_t>(ptx::cvt_e4m3x2_from_f16x2(ptx::hmul2_f16(hi, scale))) << 16);
  }
  const float f = __uint_as_float(static_cast<uint32_t>(127 - min(d, 64)) << 23);
  auto half = [](uint32_t v, int i) { return __half2float(__ushort_as_half(static_cast<unsigned short>(v >> (16 * i)))); };
  return ptx::cvt_e4m3x2(half(lo, 0) * f, half(lo, 1) * f) |
         (static_cast<uint32_t>(ptx::cvt_e4m3x2(half(hi, 0) * f, half(hi, 1) * f)) << 16);
}

// Sixteen e4m3 codes (a 16-byte chunk of a row) times 2^-d, as e4m3x4_times_pow2_neg.
__device__ __forceinline__ uint4 e4m3x16_times_pow2_neg(uint4 v, int d) {
  return make_uint4(e4m3x4_times_pow2_neg(v.x, d), e4m3x4_times_pow2_neg(v.y, d), e4m3x4_times_pow2_neg(v.z, d),
                    e4m3x4_times_pow2_neg(v.w, d));
}

}  // namespace moe_ep::cuda
