#include "moe_ep/backend.h"

#include <cmath>

#include <fmt/format.h>

#include "check.h"
#include "host_memory.h"

namespace moe_ep {
namespace {

#ifdef MOE_EP_WITH_CUDA
constexpr bool kCudaCompiled = true;
#else
constexpr bool kCudaCompiled = false;
#endif

constexpr Implementation kImplementations[] = {
    {"cpu", DeviceType::kCPU, 0, 0, true},
    {"cuda-sm90", DeviceType::kCUDA, 90, 90, kCudaCompiled},
};

constexpr WeightFormat kMxfp4Formats[] = {WeightFormat::kMXFP4, WeightFormat::kBF16};
constexpr WeightFormat kNvfp4Formats[] = {WeightFormat::kNVFP4, WeightFormat::kMXFP4,
                                          WeightFormat::kBF16};

constexpr uint32_t kAllParts =
    kRuntimeSymmetricWorkspace | kRuntimePeerTransport | kRuntimeDeviceErrorFlag;

// H and I alignment: 128 is the K/N tile of the SM90 kernels and a multiple of every
// quantization block (32 for MXFP4/Q8, 16 for NVFP4).
const FamilyProperties kFamilies[] = {
    {"mxfp4", "MXFP4 weights (e2m1 + UE8M0/32), FP8 e4m3 activations with UE8M0/32 scales",
     kAllParts, kImplementations, kMxfp4Formats, 128, 128},
    {"nvfp4", "NVFP4 weights (e2m1 + e4m3/16 + fp32 global), NVFP4 activations per token",
     kAllParts, kImplementations, kNvfp4Formats, 128, 128},
};

}  // namespace

std::span<const FamilyProperties> backend_table() { return kFamilies; }

std::string backend_names() {
  std::string names;
  for (const auto& f : kFamilies) names += fmt::format("{}{}", names.empty() ? "" : ", ", f.name);
  return names;
}

const FamilyProperties& find_family(std::string_view name, std::string_view option) {
  for (const auto& f : kFamilies)
    if (f.name == name) return f;
  MOE_EP_FAIL(ErrorCode::kInvalidArgument, "{} '{}' is not a known backend; allowed: {}", option,
              name, backend_names());
}

const Implementation* find_implementation(const FamilyProperties& family, Device device,
                                          int compute_capability, std::string* reason) {
  for (const auto& impl : family.implementations) {
    if (impl.device != device.type) continue;
    if (!impl.compiled) {
      if (reason)
        *reason = fmt::format("backend '{}' for {} is not compiled into this build (rebuild with "
                              "the CUDA toolkit)", family.name, device.str());
      return nullptr;
    }
    if (device.type == DeviceType::kCUDA &&
        (compute_capability < impl.min_compute_capability ||
         compute_capability > impl.max_compute_capability)) {
      if (reason)
        *reason = fmt::format("backend '{}' needs compute capability {}..{} on {}, the device has "
                              "{}", family.name, impl.min_compute_capability,
                              impl.max_compute_capability, device.str(), compute_capability);
      return nullptr;
    }
    return &impl;
  }
  if (reason) *reason = fmt::format("backend '{}' has no implementation for {}", family.name, device.str());
  return nullptr;
}

void validate_config(const FleetParams& fleet, const KernelConfig& config, int world_size) {
  const FamilyProperties& family = find_family(config.family);
  MOE_EP_CHECK(world_size >= 1, "world_size = {} is invalid; expected >= 1", world_size);
  MOE_EP_CHECK(fleet.num_experts >= 1, "num_experts = {} is invalid; expected >= 1",
               fleet.num_experts);
  MOE_EP_CHECK(fleet.num_experts % world_size == 0,
               "num_experts = {} is not divisible by world_size = {}; expected E % R == 0",
               fleet.num_experts, world_size);
  MOE_EP_CHECK(fleet.max_tokens_per_rank >= 1,
               "max_tokens_per_rank = {} is invalid; expected >= 1", fleet.max_tokens_per_rank);
  MOE_EP_CHECK(fleet.hidden_size >= 1 && fleet.hidden_size % family.hidden_align == 0,
               "hidden_size = {} is not supported by backend '{}'; expected a positive multiple "
               "of {}", fleet.hidden_size, family.name, family.hidden_align);
  MOE_EP_CHECK(config.intermediate_size >= 1 &&
                   config.intermediate_size % family.intermediate_align == 0,
               "intermediate_size = {} is not supported by backend '{}'; expected a positive "
               "multiple of {}", config.intermediate_size, family.name,
               family.intermediate_align);
  MOE_EP_CHECK(config.top_k >= 1 && config.top_k <= fleet.num_experts,
               "top_k = {} is invalid; expected 1..num_experts ({})", config.top_k,
               fleet.num_experts);
  // Sizes derived from these (weights E x 2I x H, activations T x K x H) must fit in int64.
  MOE_EP_CHECK(detail::saturating_bytes({fleet.num_experts, 2, config.intermediate_size,
                                         fleet.hidden_size}) < INT64_MAX &&
                   detail::saturating_bytes({fleet.max_tokens_per_rank, config.top_k,
                                             fleet.hidden_size}) < INT64_MAX,
               "num_experts = {}, intermediate_size = {}, hidden_size = {}, max_tokens_per_rank = "
               "{}, top_k = {}: E x 2I x H or T x K x H overflows int64; expected sizes that fit",
               fleet.num_experts, config.intermediate_size, fleet.hidden_size,
               fleet.max_tokens_per_rank, config.top_k);
  if (config.activation_clamp) {
    const float c = *config.activation_clamp;
    MOE_EP_CHECK(std::isfinite(c) && c >= 0.0f,
                 "activation_clamp = {} is invalid; expected a finite value >= 0 (or none for "
                 "+inf)", c);
  }
}

std::string can_implement(const FleetParams& fleet, const KernelConfig& config, int world_size,
                          Device device, int compute_capability, WeightFormat format) {
  try {
    validate_config(fleet, config, world_size);
  } catch (const Error& e) {
    return e.message();
  }
  const FamilyProperties& family = find_family(config.family);
  bool format_ok = false;
  for (WeightFormat f : family.weight_formats) format_ok |= (f == format);
  if (!format_ok)
    return fmt::format("backend '{}' does not accept {} weights", family.name,
                       weight_format_name(format));
  std::string reason;
  if (!find_implementation(family, device, compute_capability, &reason)) return reason;
  return "";
}

}  // namespace moe_ep
