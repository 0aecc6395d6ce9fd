#include "route_bounds_probe.h"

#include <cstring>

#include "core/router_math.h"
#include "cuda/kernels/sm90_route_bounds.cuh"

namespace moe_ep::cuda::test {
namespace {

struct SweepCounters {
  unsigned long long finite, violations;
  unsigned int first_violation_bits, worst_ratio_bits;
  unsigned long long worst_key;  // (ratio bits << 32) | pattern: the largest ratio, then pattern
};

// Each thread checks 64 consecutive patterns of its block's range; the error is taken in double.
__global__ void route_bounds_sweep_kernel(uint64_t first, SweepCounters* c) {
  const uint64_t base = first + (static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * 64;
  unsigned long long finite = 0, violations = 0;
  uint32_t first_bad = 0xffffffffu;
  float worst = 0.0f;
  uint32_t worst_bits = 0;
  for (int i = 0; i < 64; ++i) {
    const uint32_t bits = static_cast<uint32_t>(base + i);
    const float v = __uint_as_float(bits);
    if (!isfinite(v)) continue;
    ++finite;
    const float exact = router_math::sqrt_softplus(v);
    const float approx = route_bounds::approx_score(v);
    const float margin = route_bounds::score_margin(approx);
    const double err = fabs(static_cast<double>(exact) - static_cast<double>(approx));
    if (!(err <= static_cast<double>(margin))) {
      ++violations;
      first_bad = min(first_bad, bits);
    }
    const float ratio = static_cast<float>(err / static_cast<double>(margin));
    if (ratio > worst) {
      worst = ratio;
      worst_bits = bits;
    }
  }
  atomicAdd(&c->finite, finite);
  if (violations) {
    atomicAdd(&c->violations, violations);
    atomicMin(&c->first_violation_bits, first_bad);
  }
  atomicMax(&c->worst_key, (static_cast<unsigned long long>(__float_as_uint(worst)) << 32) | worst_bits);
}

}  // namespace

cudaError_t run_route_bounds_sweep(RouteBoundsSweep& out) {
  SweepCounters* c = nullptr;
  cudaError_t err = cudaMalloc(&c, sizeof(SweepCounters));
  if (err != cudaSuccess) return err;
  SweepCounters init{0, 0, 0xffffffffu, 0, 0};
  err = cudaMemcpy(c, &init, sizeof init, cudaMemcpyHostToDevice);
  constexpr uint64_t kPerLaunch = uint64_t{1} << 28;  // 2^28 patterns: 16 launches
  for (uint64_t first = 0; err == cudaSuccess && first < (uint64_t{1} << 32); first += kPerLaunch) {
    route_bounds_sweep_kernel<<<static_cast<unsigned>(kPerLaunch / 64 / 256), 256>>>(first, c);
    err = cudaGetLastError();
  }
  SweepCounters r{};
  if (err == cudaSuccess) err = cudaMemcpy(&r, c, sizeof r, cudaMemcpyDeviceToHost);
  cudaFree(c);
  out.finite = r.finite;
  out.violations = r.violations;
  out.first_violation_bits = r.first_violation_bits;
  const uint32_t ratio_bits = static_cast<uint32_t>(r.worst_key >> 32);
  std::memcpy(&out.worst_ratio, &ratio_bits, sizeof ratio_bits);
  out.worst_bits = static_cast<uint32_t>(r.worst_key);
  return err;
}

}  // namespace moe_ep::cuda::test
