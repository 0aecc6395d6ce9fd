// Conversions and byte permutes. On the host the same functions run as bit-exact emulations, so
// the FP4 decoders built on them are unit-tested without a GPU.
#pragma once

#include <cstdint>

#ifdef __CUDACC__
#define MOE_EP_HD __host__ __device__ __forceinline__
#else
#define MOE_EP_HD inline
#endif

namespace moe_ep::cuda::ptx {

// prmt.b32 (default mode): byte i of the result is byte (selector nibble i & 7) of {hi:lo};
// selector bit 3 of a nibble replicates that byte's sign bit instead (decode_fp4x8_standard
// spreads sign bits with it).
MOE_EP_HD uint32_t prmt(uint32_t lo, uint32_t hi, uint32_t selector) {
#if defined(__CUDA_ARCH__)
  uint32_t r;
  asm("prmt.b32 %0, %1, %2, %3;\n" : "=r"(r) : "r"(lo), "r"(hi), "r"(selector));
  return r;
#else
  const uint64_t bytes = (static_cast<uint64_t>(hi) << 32) | lo;
  uint32_t r = 0;
  for (int i = 0; i < 4; ++i) {
    const uint32_t nib = (selector >> (4 * i)) & 0xF;
    uint32_t b = static_cast<uint32_t>(bytes >> (8 * (nib & 7))) & 0xFF;
    if (nib & 8) b = (b & 0x80) ? 0xFF : 0x00;
    r |= b << (8 * i);
  }
  return r;
#endif
}

// mul.rn.bf16x2: each half the bf16 product rounded to nearest even. The emulation rounds the
// fp32 product, which is exact unless it leaves fp32's normal range (the decoders here multiply
// by powers of two inside it); NaN payloads are not modelled.
MOE_EP_HD uint32_t mul_bf16x2(uint32_t a, uint32_t b) {
#if defined(__CUDA_ARCH__)
  uint32_t r;
  asm("mul.rn.bf16x2 %0, %1, %2;\n" : "=r"(r) : "r"(a), "r"(b));
  return r;
#else
  uint32_t r = 0;
  for (int half = 0; half < 2; ++half) {
    const uint32_t ua = ((a >> (16 * half)) & 0xFFFFu) << 16, ub = ((b >> (16 * half)) & 0xFFFFu) << 16;
    float fa, fb;
    __builtin_memcpy(&fa, &ua, 4);
    __builtin_memcpy(&fb, &ub, 4);
    const float p = fa * fb;
    uint32_t u;
    __builtin_memcpy(&u, &p, 4);
    u += 0x7FFFu + ((u >> 16) & 1u);
    r |= (u >> 16) << (16 * half);
  }
  return r;
#endif
}

#if defined(__CUDACC__)
// Two fp32 -> two e4m3 (round to nearest even, saturating to +-448): lo in byte 0.
__device__ __forceinline__ uint16_t cvt_e4m3x2(float lo, float hi) {
  uint16_t r;
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;\n" : "=h"(r) : "f"(hi), "f"(lo));
  return r;
}

// Two e4m3 (byte 0 -> low half) -> f16x2, exact.
__device__ __forceinline__ uint32_t cvt_f16x2_from_e4m3x2(uint16_t v) {
  uint32_t r;
  asm("cvt.rn.f16x2.e4m3x2 %0, %1;\n" : "=r"(r) : "h"(v));
  return r;
}

// Four e4m3 (bytes 0, 1 -> lo; bytes 2, 3 -> hi) -> two f16x2, exact. One instruction each on
// SM90 (the high pair is read in place, no shift).
__device__ __forceinline__ void cvt_f16x2x2_from_e4m3x4(uint32_t v, uint32_t& lo, uint32_t& hi) {
  asm("{\n .reg .b16 l, h;\n mov.b32 {l, h}, %2;\n cvt.rn.f16x2.e4m3x2 %0, l;\n cvt.rn.f16x2.e4m3x2 %1, h;\n}\n"
      : "=r"(lo), "=r"(hi)
      : "r"(v));
}

// Two e4m3 (bytes 0, 1 of v when kHigh is false, bytes 2, 3 when true) -> f16x2, exact.
template <bool kHigh>
__device__ __forceinline__ uint32_t cvt_f16x2_from_e4m3x2_of(uint32_t v) {
  uint32_t r;
  if constexpr (kHigh)
    asm("{\n .reg .b16 l, h;\n mov.b32 {l, h}, %1;\n cvt.rn.f16x2.e4m3x2 %0, h;\n}\n" : "=r"(r) : "r"(v));
  else
    asm("{\n .reg .b16 l, h;\n mov.b32 {l, h}, %1;\n cvt.rn.f16x2.e4m3x2 %0, l;\n}\n" : "=r"(r) : "r"(v));
  return r;
}

// a * {s.lo, s.lo} (kHigh false) or a * {s.hi, s.hi} (f16x2, round to nearest even). The
// broadcast is an operand swizzle of HMUL2, not an instruction.
template <bool kHigh>
__device__ __forceinline__ uint32_t hmul2_f16_by_half(uint32_t a, uint32_t s) {
  uint32_t r;
  if constexpr (kHigh)
    asm("{\n .reg .b16 l, h;\n .reg .b32 d;\n mov.b32 {l, h}, %2;\n mov.b32 d, {h, h};\n mul.rn.f16x2 %0, %1, d;\n}\n"
        : "=r"(r) : "r"(a), "r"(s));
  else
    asm("{\n .reg .b16 l, h;\n .reg .b32 d;\n mov.b32 {l, h}, %2;\n mov.b32 d, {l, l};\n mul.rn.f16x2 %0, %1, d;\n}\n"
        : "=r"(r) : "r"(a), "r"(s));
  return r;
}

__device__ __forceinline__ uint32_t hmul2_f16(uint32_t a, uint32_t b) {
  uint32_t r;
  asm("mul.rn.f16x2 %0, %1, %2;\n" : "=r"(r) : "r"(a), "r"(b));
  return r;
}
#endif

}  // namespace moe_ep::cuda::ptx
