// A device sweep of kernels/sm90_route_bounds.cuh over every fp32 bit pattern: the router's
// top-k pre-filter is exact only if its bounds hold for every finite logit.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

namespace moe_ep::cuda::test {

struct RouteBoundsSweep {
  uint64_t finite = 0;      // finite logits checked
  uint64_t violations = 0;  // |sqrt_softplus(v) - approx_score(v)| > score_margin(approx_score(v))
  uint32_t first_violation_bits = 0;
  float worst_ratio = 0.0f;  // max |error| / margin (< 1 everywhere when the bounds hold)
  uint32_t worst_bits = 0;
};

// All 2^32 patterns; synchronous.
cudaError_t run_route_bounds_sweep(RouteBoundsSweep& out);

}  // namespace moe_ep::cuda::test
