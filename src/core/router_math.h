// sqrt(softplus(v)) in fp32, written with IEEE-754 basic operations only (add, sub, mul, div,
// fma, sqrt: each correctly rounded) so that the CPU router and the device router produce the
// same bits. std::exp / std::log1p and CUDA's expf / log1pf differ by an ulp here and there.
//
//   softplus(v) = max(v, 0) + log1p(exp(-|v|))
//   exp(-a)   : Cody-Waite reduction -a = n*ln2 + r, |r| <= ln2/2; degree-7 Taylor in r (error
//               < 2^-27); times 2^n built from bits. a > 86 gives 0 (exp(-86) ~ 4e-38 is near the
//               smallest normal; the result is then max(v, 0) + 0).
//   log1p(u)  : w = 1 + u (rounded) with its exact rounding error c = u - (w - 1); w = 2^e * m,
//               m in [sqrt(1/2), sqrt(2)); log(m) = log1p(f), f = m - 1, by the fdlibm logf
//               kernel (s = f / (2 + f), |error| < 2^-34); log1p(u) = e*ln2 + log1p(f) + c / w.
//   divisions : q = a / d for d in [1, 2.5] without a division instruction (the device's IEEE
//               division is a branch around a slow path, which keeps the compiler from
//               interleaving evaluations): r0 = 1.25843 - 0.35955 d (|1 - d r0| <= 0.102),
//               three Newton steps r += r (1 - d r) (error 1e-8), q = a r, then one residual
//               correction q += r (a - d q). Within an ulp of a / d.
// Accurate to a few ulp (tests/core/test_router.cpp compares with float64).
//
// Invariant: no expression may be contracted into an fma behind our back. Device code uses the
// __f*_rn intrinsics (never contracted); host code is compiled with -ffp-contract=off
// (src/CMakeLists.txt) and calls std::fma where an fma is meant.
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define MOE_EP_HD __host__ __device__ __forceinline__
#else
#include <cmath>
#define MOE_EP_HD inline
#endif

namespace moe_ep::router_math {

#if defined(__CUDA_ARCH__)
MOE_EP_HD float add(float a, float b) { return __fadd_rn(a, b); }
MOE_EP_HD float sub(float a, float b) { return __fsub_rn(a, b); }
MOE_EP_HD float mul(float a, float b) { return __fmul_rn(a, b); }
MOE_EP_HD float div(float a, float b) { return __fdiv_rn(a, b); }
MOE_EP_HD float fma(float a, float b, float c) { return __fmaf_rn(a, b, c); }
MOE_EP_HD float sqrt(float a) { return __fsqrt_rn(a); }
MOE_EP_HD float rint(float a) { return rintf(a); }
MOE_EP_HD float from_bits(uint32_t u) { return __uint_as_float(u); }
MOE_EP_HD uint32_t to_bits(float f) { return __float_as_uint(f); }
#else
MOE_EP_HD float add(float a, float b) { return a + b; }
MOE_EP_HD float sub(float a, float b) { return a - b; }
MOE_EP_HD float mul(float a, float b) { return a * b; }
MOE_EP_HD float div(float a, float b) { return a / b; }
MOE_EP_HD float fma(float a, float b, float c) { return std::fma(a, b, c); }
MOE_EP_HD float sqrt(float a) { return std::sqrt(a); }
MOE_EP_HD float rint(float a) { return std::nearbyint(a); }  // round half to even (default mode)
MOE_EP_HD float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
MOE_EP_HD uint32_t to_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}
#endif

// exp(-a) for a >= 0; NaN gives 0.
MOE_EP_HD float exp_neg(float a) {
  if (!(a <= 86.0f)) return 0.0f;  // also NaN
  const float x = -a;
  const float n = rint(mul(x, 1.44269504088896341f));  // -124 <= n <= 0
  float r = fma(n, -0.693145751953125f, x);             // ln2 split: hi has 16 bits
  r = fma(n, -1.42860676533018704e-06f, r);
  float p = 1.98412701e-4f;  // 1/7!, then 1/6! ... (fp32 roundings of the Taylor coefficients)
  p = fma(p, r, 1.38888892e-3f);
  p = fma(p, r, 8.33333377e-3f);
  p = fma(p, r, 4.16666679e-2f);
  p = fma(p, r, 1.66666672e-1f);
  p = fma(p, r, 0.5f);
  p = fma(p, r, 1.0f);
  p = fma(p, r, 1.0f);
  const int32_t e = static_cast<int32_t>(n);
  return mul(p, from_bits(static_cast<uint32_t>(e + 127) << 23));
}

// a / d for d in [1, 2.5] (see above).
MOE_EP_HD float div_by_1_to_2p5(float a, float d) {
  float r = fma(d, -0.359550562f, 1.25842697f);
  r = fma(r, fma(-d, r, 1.0f), r);
  r = fma(r, fma(-d, r, 1.0f), r);
  r = fma(r, fma(-d, r, 1.0f), r);
  const float q = mul(a, r);
  return fma(fma(-d, q, a), r, q);
}

// log1p(u) for u in [0, 1].
MOE_EP_HD float log1p_unit(float u) {
  const float w = add(1.0f, u);
  const float c = sub(u, sub(w, 1.0f));  // exact: the rounding error of 1 + u
  float m = w;
  float e = 0.0f;
  if (w > 1.41421356f) {
    m = mul(w, 0.5f);
    e = 1.0f;
  }
  const float f = sub(m, 1.0f);  // exact (Sterbenz)
  const float s = div_by_1_to_2p5(f, add(2.0f, f));  // 2 + f in [1.70, 2.42)
  const float z = mul(s, s);
  const float z2 = mul(z, z);
  const float t1 = mul(z2, fma(z2, 0.24279078841f, 0.40000972152f));
  const float t2 = mul(z, fma(z2, 0.28498786688f, 0.66666662693f));
  const float R = add(t2, t1);
  const float hfsq = mul(mul(0.5f, f), f);
  const float log_m = sub(f, sub(hfsq, mul(s, add(hfsq, R))));
  const float corr = div_by_1_to_2p5(c, w);  // w in [1, 2]
  // e*ln2 with ln2 split so that e*hi is exact.
  return fma(e, 0.693145751953125f, add(log_m, fma(e, 1.42860676533018704e-06f, corr)));
}

MOE_EP_HD float sqrt_softplus(float v) {
  const float a = v < 0.0f ? -v : v;
  const float pos = v > 0.0f ? v : 0.0f;
  const float sp = add(pos, log1p_unit(exp_neg(a)));
  return sqrt(sp);
}

// The router's score of one slot: (s / sum) * routed_scaling_factor, sum floored at 1e-20.
MOE_EP_HD float routed_weight(float s, float sum, float scale) {
  return mul(div(s, sum < 1e-20f ? 1e-20f : sum), scale);
}

}  // namespace moe_ep::router_math
