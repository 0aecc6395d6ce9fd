// Cheap bounds on the router's score s = sqrt(softplus(v)) (core/router_math.h), for the top-k
// pre-filter of kernels/sm90_route.cu: for every finite fp32 v,
//
//   |router_math::sqrt_softplus(v) - approx_score(v)| <= score_margin(approx_score(v))
//
// (tests/cuda/route_bounds_probe.cu checks all 2^32 bit patterns on the device). approx_score
// uses the SFU's ex2 / lg2 / rsqrt (relative errors ~2^-22); its weakest spot is log1p(u) for
// u just above 2^-10 (absolute error ~2e-7 on a value ~1e-3), so the margin's relative part,
// 1e-3, holds a wide slack. Exponents below -126 flush to zero (s ~ 1e-19 where the exact
// score is 0 for |v| > 86): the absolute part covers them.
#pragma once

namespace moe_ep::cuda::route_bounds {

__device__ __forceinline__ float ex2_approx(float x) {
  float r;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(r) : "f"(x));
  return r;
}

__device__ __forceinline__ float lg2_approx(float x) {
  float r;
  asm("lg2.approx.ftz.f32 %0, %1;\n" : "=f"(r) : "f"(x));
  return r;
}

__device__ __forceinline__ float rsqrt_approx(float x) {
  float r;
  asm("rsqrt.approx.ftz.f32 %0, %1;\n" : "=f"(r) : "f"(x));
  return r;
}

// sqrt(max(v, 0) + log1p(exp(-|v|))) to ~1e-4 relative; v finite.
__device__ __forceinline__ float approx_score(float v) {
  const float u = ex2_approx(fabsf(v) * -1.44269504f);  // exp(-|v|) in (0, 1]
  const float l = u < 0x1p-10f ? u * __fmaf_rn(-0.5f, u, 1.0f) : lg2_approx(1.0f + u) * 0.693147182f;
  const float sp = fmaxf(v, 0.0f) + l;
  return sp > 0.0f ? sp * rsqrt_approx(sp) : 0.0f;
}

__device__ __forceinline__ float score_margin(float approx) { return __fmaf_rn(approx, 1e-3f, 1e-18f); }

}  // namespace moe_ep::cuda::route_bounds
