#include "moe_ep/weights.h"

#include <string>

#include "check.h"

namespace moe_ep {

std::string_view weight_format_name(WeightFormat format) {
  switch (format) {
    case WeightFormat::kMXFP4: return "mxfp4";
    case WeightFormat::kNVFP4: return "nvfp4";
    case WeightFormat::kBF16: return "bf16";
  }
  return "unknown";
}

WeightFormat parse_weight_format(std::string_view name, std::string_view parameter) {
  for (const WeightFormat f : {WeightFormat::kMXFP4, WeightFormat::kNVFP4, WeightFormat::kBF16})
    if (weight_format_name(f) == name) return f;
  MOE_EP_CHECK_PARAM(false, std::string(parameter), "{} '{}' is not a weight format; allowed: mxfp4, nvfp4, bf16",
                     parameter, name);
  return WeightFormat::kMXFP4;  // not reached
}

}  // namespace moe_ep
