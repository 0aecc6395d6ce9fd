// Relative-error thresholds, ||out - ref||_2 / ||ref||_2 in float64, for comparing a device
// implementation with the CPU reference backend on the same recipe and the same weights.
// One place for the CLI and the tests.
#pragma once

#include "moe_ep/kernel_config.h"
#include "moe_ep/recipe.h"

namespace moe_ep::testing {

// Both sides accumulate in fp32 in different orders, so only rounding-boundary flips differ;
// the CPU reference tests (tests/cpu/test_cpu_layer_reference.cpp) measured the same kind of
// flips (fp32 vs float64 accumulation, 30 seeds) at <= 9.3e-5 for mxfp4 and <= 1.4e-2 for nvfp4.
// mxfp4: a flipped bf16 rounding of gu moves one e4m3 code of Q8(h) by one step (~2^-4 of one
// element); 2e-3 leaves a 20x margin and is still far below a wrong expert or a missed slot (~1).
inline constexpr double kMxfp4DeviceRelErr = 2e-3;
// nvfp4: a flip can move the per-token amax of h and so requantize that slot's whole row.
inline constexpr double kNvfp4DeviceRelErr = 3e-2;

// mxfp4 with NumericsPolicy::exact_accumulation = false: FP8 wgmma sums each k32 block with
// ~2^-14 relative error instead of fp32's 2^-24: a few percent of GEMM 2's bf16 outputs and a
// fraction of a percent of the e4m3 codes of Q8(h) flip by one step; the threshold leaves a 2x
// margin over the layer error seen against the CPU layer (bench/results, TESTING.md).
inline constexpr double kMxfp4WgmmaDeviceRelErr = 6e-3;

// mxfp4 on the rs-fp8-k128 forms (pinned only): the activations are moved to one scale per 128
// k before each GEMM, so a k32 block whose scale is 2^d below its group's largest keeps its codes
// times 2^-d in e4m3, losing up to d of their bits. Measured against mma.sync on the same routed
// rows (2026-12-07, H100): 2.5e-3..3.0e-3 at T = 300 and 4096, 7.4e-3 at T = 7 (26 rows); against
// the CPU layer on deepseek-v4-flash 2.4e-3..4.3e-3. Twice the largest.
inline constexpr double kMxfp4K128DeviceRelErr = 1.5e-2;

// The threshold of `recipe` (exact_accumulation: NumericsPolicy of the layer).
constexpr double device_rel_err_threshold(Recipe recipe, bool exact_accumulation = true) {
  switch (recipe) {
    case Recipe::kMxfp4: return exact_accumulation ? kMxfp4DeviceRelErr : kMxfp4WgmmaDeviceRelErr;
    case Recipe::kNvfp4: return kNvfp4DeviceRelErr;
  }
  return -1.0;
}

// The threshold of a layer whose GEMM family is `gemm` (KernelOverrides::gemm: the k128 forms
// carry their own).
constexpr double device_rel_err_threshold(Recipe recipe, bool exact_accumulation, GemmKernel gemm) {
  return gemm == GemmKernel::kWgmmaRsK128 ? kMxfp4K128DeviceRelErr
                                          : device_rel_err_threshold(recipe, exact_accumulation);
}

}  // namespace moe_ep::testing
