// Relative-error thresholds, ||out - ref||_2 / ||ref||_2 in float64, for comparing a device
// implementation with the CPU reference backend on the same recipe and the same weights.
// One place for the CLI and the tests.
#pragma once

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

// The threshold of `recipe` (exact_accumulation: NumericsPolicy of the layer).
constexpr double device_rel_err_threshold(Recipe recipe, bool exact_accumulation = true) {
  switch (recipe) {
    case Recipe::kMxfp4: return exact_accumulation ? kMxfp4DeviceRelErr : kMxfp4WgmmaDeviceRelErr;
    case Recipe::kNvfp4: return kNvfp4DeviceRelErr;
  }
  return -1.0;
}

}  // namespace moe_ep::testing
