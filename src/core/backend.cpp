#include "moe_ep/backend.h"

#include <fmt/format.h>

#include "check.h"
#include "core/registry.h"

namespace moe_ep {
namespace {

std::string cc_str(int cc) { return fmt::format("{}.{}", cc / 10, cc % 10); }

// "" or why not; *entry is the backend of the device's kind when there is one.
std::string check_request(const MoeDesc& desc, int world_size, Device device, WeightFormat format,
                          const detail::BackendEntry** entry) {
  try {
    validate_desc(desc, world_size);
  } catch (const Error& e) {
    return e.message();
  }
  const RecipeTraits& recipe = desc.traits();
  if (!recipe.accepts(format)) {
    std::string allowed;
    for (WeightFormat f : recipe.weight_formats)
      allowed += fmt::format("{}{}", allowed.empty() ? "" : ", ", weight_format_name(f));
    return fmt::format("weights.format = {} is not accepted by recipe '{}'; expected one of {}",
                       weight_format_name(format), recipe.name, allowed);
  }
  const detail::BackendEntry* e = detail::find_backend(device.type);
  if (!e) {
    std::string names;
    for (const BackendInfo& b : registered_backends())
      names += fmt::format("{}{}", names.empty() ? "" : ", ", b.name);
    return fmt::format("device {}: this build has no backend for it (built in: {}); use device "
                       "cpu or rebuild with the CUDA toolkit", device.str(), names);
  }
  *entry = e;
  const BackendInfo& info = e->info;
  bool recipe_ok = false;
  for (Recipe r : info.recipes) recipe_ok |= r == desc.recipe;
  if (!recipe_ok)
    return fmt::format("recipe '{}' has no implementation in backend '{}'", recipe.name, info.name);
  const int cc = e->compute_capability ? e->compute_capability(device) : 0;
  if (device.type != DeviceType::kCPU &&
      (cc < info.min_compute_capability || cc > info.max_compute_capability))
    return fmt::format("backend '{}' (recipe '{}') needs compute capability {}..{} on {}; the "
                       "device has {}", info.name, recipe.name, cc_str(info.min_compute_capability),
                       cc_str(info.max_compute_capability), device.str(),
                       cc ? cc_str(cc) : std::string("none (it cannot be used)"));
  return e->can_implement ? e->can_implement(desc, world_size, device, cc) : std::string();
}

}  // namespace

std::vector<BackendInfo> registered_backends() {
  std::vector<BackendInfo> out;
  for (const detail::BackendEntry& e : detail::backends()) out.push_back(e.info);
  return out;
}

int device_compute_capability(Device device) {
  const detail::BackendEntry* e = detail::find_backend(device.type);
  return e && e->compute_capability ? e->compute_capability(device) : 0;
}

std::vector<TransportInfo> registered_transports() {
  std::vector<TransportInfo> out;
  for (const detail::TransportEntry& t : detail::transports())
    out.push_back({std::string(t.name), t.status ? t.status() : std::string("built in")});
  return out;
}

std::string can_implement(const MoeDesc& desc, int world_size, Device device, WeightFormat format) {
  const detail::BackendEntry* entry = nullptr;
  return check_request(desc, world_size, device, format, &entry);
}

std::string_view select_implementation(const MoeDesc& desc, int world_size, Device device,
                                       WeightFormat format) {
  validate_desc(desc, world_size);  // invalid anywhere: kInvalidArgument
  const detail::BackendEntry* entry = nullptr;
  const std::string reason = check_request(desc, world_size, device, format, &entry);
  MOE_EP_CHECK_CODE(reason.empty(), ErrorCode::kUnsupported, "{}", reason);
  return entry->info.name;
}

}  // namespace moe_ep
