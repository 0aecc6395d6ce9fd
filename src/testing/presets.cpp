#include "testing/presets.h"

#include <fmt/format.h>

#include "core/check.h"

namespace moe_ep::testing {
namespace {

const Preset kPresets[] = {
    {"deepseek-v4-flash", "DeepSeek V4 Flash MoE layer", 4096, 2048, 256, 6, 10.0f, 43, 1.5f, 8192},
    {"deepseek-v4-pro", "DeepSeek V4 Pro MoE layer", 7168, 3072, 384, 6, 10.0f, 61, 2.5f, 8192},
    {"tiny", "small layer for the CPU demo and the tests", 256, 128, 16, 4, 10.0f, 2, 1.0f, 256},
};

}  // namespace

std::span<const Preset> presets() { return kPresets; }

std::string preset_names() {
  std::string names;
  for (const Preset& p : kPresets) names += fmt::format("{}{}", names.empty() ? "" : ", ", p.name);
  return names;
}

const Preset& find_preset(std::string_view name, std::string_view option) {
  for (const Preset& p : kPresets)
    if (p.name == name) return p;
  MOE_EP_FAIL(ErrorCode::kInvalidArgument, "{} '{}' is not a known preset; allowed: {}", option,
              name, preset_names());
}

}  // namespace moe_ep::testing
