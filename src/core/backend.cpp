#include "moe_ep/backend.h"

#include <fmt/format.h>

#include "check.h"
#include "core/registry.h"

namespace moe_ep {
namespace {

std::string cc_str(int cc) { return fmt::format("{}.{}", cc / 10, cc % 10); }

std::string built_in_backends() {
  std::string names;
  for (const detail::BackendEntry& e : detail::backends())
    names += fmt::format("{}{}", names.empty() ? "" : ", ", e.info.name);
  return names;
}

// Whether `device`'s compute capability `cc` is in the backend's range (always on the CPU).
bool in_cc_range(const detail::BackendEntry& e, Device device, int cc) {
  return device.type == DeviceType::kCPU ||
         (cc >= e.info.min_compute_capability && cc <= e.info.max_compute_capability);
}

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
  if (!e)
    return fmt::format("device {}: this build has no backend for it (built in: {}); use device "
                       "cpu or rebuild with the CUDA toolkit", device.str(), built_in_backends());
  *entry = e;
  const BackendInfo& info = e->info;
  bool recipe_ok = false;
  for (Recipe r : info.recipes) recipe_ok |= r == desc.recipe;
  if (!recipe_ok)
    return fmt::format("recipe '{}' has no implementation in backend '{}'", recipe.name, info.name);
  const int cc = e->compute_capability ? e->compute_capability(device) : 0;
  if (!in_cc_range(*e, device, cc))
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

std::vector<DeviceProperties> list_devices(DeviceType type, std::string* status) {
  const detail::BackendEntry* e = detail::find_backend(type);
  const char* kind = type == DeviceType::kCPU ? "cpu" : "cuda";
  std::string why;
  if (!e)
    why = fmt::format("{}: this build has no backend for these devices (built in: {})", kind,
                      built_in_backends());
  else if (!e->list_devices)
    why = fmt::format("{}: backend '{}' lists no devices", kind, e->info.name);
  if (!why.empty()) {
    if (status) *status = why;
    return {};
  }
  return e->list_devices(status);
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

namespace moe_ep::detail {

const BackendEntry& backend_for(Device device, std::string_view what) {
  const BackendEntry* e = find_backend(device.type);
  MOE_EP_CHECK_CODE(e != nullptr, ErrorCode::kUnsupported,
                    "{} on {}: this build has no backend for the device (built in: {})", what,
                    device.str(), built_in_backends());
  const int cc = e->compute_capability ? e->compute_capability(device) : 0;
  MOE_EP_CHECK_CODE(in_cc_range(*e, device, cc), ErrorCode::kUnsupported,
                    "{} on {}: backend '{}' needs compute capability {}..{}; the device has {}",
                    what, device.str(), e->info.name, cc_str(e->info.min_compute_capability),
                    cc_str(e->info.max_compute_capability),
                    cc ? cc_str(cc) : std::string("none (it cannot be used)"));
  return *e;
}

}  // namespace moe_ep::detail
