// Device versions of the quantization recipes of include/moe_ep/quant.h. Each function
// reproduces its host counterpart bit for bit (tests/cuda compares them on the device).
#pragma once

#include <cstdint>

#include <cuda_fp16.h>

#include "cuda/ptx/convert.cuh"

namespace moe_ep::cuda {

inline constexpr float kQ8AmaxFloorDevice = 1e-4f;
inline constexpr float kE4M3MaxDevice = 448.0f;
inline constexpr float kE2M1MaxDevice = 6.0f;

// The kWords 16-byte words of bf16 values at src, widened to fp32 (exact) in order.
template <int kWords>
__device__ __forceinline__ void load_bf16_as_float(const uint4* src, float (&v)[8 * kWords]) {
#pragma unroll
  for (int i = 0; i < kWords; ++i) {
    const uint4 w = src[i];
    const uint32_t words[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      v[8 * i + 2 * j] = __uint_as_float(words[j] << 16);
      v[8 * i + 2 * j + 1] = __uint_as_float(words[j] & 0xFFFF0000u);
    }
  }
}

// ceil(log2(v)) for finite v > 0, from the bits (formats.cpp: ceil_log2).
__device__ __forceinline__ int ceil_log2_device(float v) {
  const uint32_t bits = __float_as_uint(v);
  const int biased = static_cast<int>((bits >> 23) & 0xFF);
  const uint32_t mant = bits & 0x7FFFFF;
  if (biased == 0) {
    const int floor_log2 = 31 - __clz(mant);
    return ((mant & (mant - 1)) == 0 ? floor_log2 : floor_log2 + 1) - 149;
  }
  return biased - 127 + (mant != 0 ? 1 : 0);
}

// 2^(b - 127); b = 0 gives the subnormal 2^-127. b = 0xFF (NaN) never reaches the kernels.
__device__ __forceinline__ float e8m0_to_float_device(uint32_t b) {
  return __uint_as_float(b == 0 ? 0x00400000u : (b << 23));
}

// q8_saturate (include/moe_ep/quant.h): a finite value beyond +-1.875 * 2^127 becomes
// +-1.875 * 2^127, so that no code times its scale rounds to 2^128 (fp32 Inf); Inf and NaN pass.
inline constexpr float kQ8MaxFiniteDevice = 0x1.ep+127f;
__device__ __forceinline__ float q8_saturate_device(float v) {
  const float a = fabsf(v);
  return (a > kQ8MaxFiniteDevice && a <= 0x1.fffffep+127f) ? copysignf(kQ8MaxFiniteDevice, v) : v;
}

// q8_scale_byte: amax floored at 1e-4, s = 2^ceil(log2(amax / 448)), byte in [1, 254].
__device__ __forceinline__ uint32_t q8_scale_byte_device(float amax) {
  const float floored = fmaxf(amax, kQ8AmaxFloorDevice);
  if (!isfinite(floored)) return 254;
  const int e = ceil_log2_device(__fdiv_rn(floored, kE4M3MaxDevice)) + 127;
  return static_cast<uint32_t>(min(max(e, 1), 254));
}

__device__ __forceinline__ float e4m3_to_float_device(uint32_t byte) {
  const uint32_t h2 = ptx::cvt_f16x2_from_e4m3x2(static_cast<uint16_t>(byte & 0xFF));
  return __half2float(__ushort_as_half(static_cast<unsigned short>(h2 & 0xFFFF)));
}

__device__ __forceinline__ uint32_t float_to_e4m3_device(float v) {
  return ptx::cvt_e4m3x2(v, 0.0f) & 0xFF;
}

// e2m1 round to nearest even, saturating to +-6, sign kept (also for values rounding to 0);
// NaN gives +0 (formats.cpp: float_to_e2m1).
__device__ __forceinline__ uint32_t float_to_e2m1_device(float v) {
  if (isnan(v)) return 0;
  const uint32_t sign = (__float_as_uint(v) >> 28) & 0x8;
  const float a = fabsf(v);
  uint32_t code;
  if (a <= 0.25f) code = 0;
  else if (a < 0.75f) code = 1;
  else if (a <= 1.25f) code = 2;
  else if (a < 1.75f) code = 3;
  else if (a <= 2.5f) code = 4;
  else if (a < 3.5f) code = 5;
  else if (a <= 5.0f) code = 6;
  else code = 7;
  return sign | code;
}

// nvfp4_global_encode: g = 448 * 6 / amax, 1 when amax == 0 or g is not finite.
__device__ __forceinline__ float nvfp4_global_encode_device(float amax) {
  if (amax == 0.0f) return 1.0f;
  const float g = __fdiv_rn(kE4M3MaxDevice * kE2M1MaxDevice, amax);
  return isfinite(g) ? g : 1.0f;
}

}  // namespace moe_ep::cuda
