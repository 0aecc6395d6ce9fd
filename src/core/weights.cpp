#include "moe_ep/weights.h"

namespace moe_ep {

std::string_view weight_format_name(WeightFormat format) {
  switch (format) {
    case WeightFormat::kMXFP4: return "mxfp4";
    case WeightFormat::kNVFP4: return "nvfp4";
    case WeightFormat::kBF16: return "bf16";
  }
  return "unknown";
}

}  // namespace moe_ep
