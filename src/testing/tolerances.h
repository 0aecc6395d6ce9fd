// Relative-error thresholds, ||out - ref||_2 / ||ref||_2 in float64, for comparing a device
// implementation with the CPU reference backend on the same recipe and the same weights.
// One place for the CLI and the tests.
#pragma once

#include <string_view>

namespace moe_ep::testing {

// mxfp4: FP8 activations and MXFP4 weights are bit-exact on both sides; differences come only
// from fp32 accumulation order, which can flip a bf16 rounding of gu or o_k (2^-9 relative) and,
// through Q8 of h, one e4m3 code (2^-4 relative) in a few elements.
inline constexpr double kMxfp4DeviceRelErr = 2e-3;
// nvfp4: as mxfp4, but a flipped rounding moves an e2m1 code of h (up to 1/3 relative) and a
// per-token global scale; provisional until measured on the device.
inline constexpr double kNvfp4DeviceRelErr = 1e-2;

// The threshold for `family` ("mxfp4" or "nvfp4"); a negative value for an unknown family.
constexpr double device_rel_err_threshold(std::string_view family) {
  if (family == "mxfp4") return kMxfp4DeviceRelErr;
  if (family == "nvfp4") return kNvfp4DeviceRelErr;
  return -1.0;
}

}  // namespace moe_ep::testing
