#include "cli/roofline.h"

#include <algorithm>

namespace moe_ep::cli {

Roofline roofline(int64_t unique_experts, int64_t expert_bytes, int64_t valid_slots, int64_t H,
                  int64_t I, const RooflineRates& rates, int64_t tokens, int64_t Is) {
  Roofline r;
  r.weight_bytes = unique_experts * expert_bytes + (Is > 0 ? 3 * H * Is * 2 : 0);
  r.flops = 2.0 * static_cast<double>(valid_slots) * 3.0 * static_cast<double>(H) * static_cast<double>(I) +
            2.0 * static_cast<double>(tokens) * 3.0 * static_cast<double>(H) * static_cast<double>(Is);
  r.memory_floor_us = static_cast<double>(r.weight_bytes) / rates.bandwidth_bytes_per_s * 1e6;
  r.compute_floor_us = r.flops / rates.compute_flop_per_s * 1e6;
  r.floor_us = std::max(r.memory_floor_us, r.compute_floor_us);
  return r;
}

}  // namespace moe_ep::cli
