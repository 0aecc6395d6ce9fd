#include "core/registry.h"

#include <mutex>
#include <vector>

#include <fmt/format.h>

#include "core/check.h"

namespace moe_ep::detail {
namespace {

struct Registry {
  std::mutex mutex;
  std::vector<BackendEntry> backends;
  std::vector<TransportEntry> transports;
};

Registry& raw_registry() {
  static Registry r;
  return r;
}

Registry& registry() {
  static std::once_flag once;
  std::call_once(once, register_builtin_backends);
  return raw_registry();
}

std::string_view device_kind_name(DeviceType d) { return d == DeviceType::kCPU ? "cpu" : "cuda"; }

}  // namespace

void register_backend(const BackendEntry& entry) {
  Registry& r = raw_registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  for (const BackendEntry& e : r.backends)
    MOE_EP_CHECK_CODE(e.info.name != entry.info.name && e.info.device != entry.info.device,
                      ErrorCode::kInternal, "backend '{}' registered twice (device kind {})",
                      entry.info.name, device_kind_name(entry.info.device));
  r.backends.push_back(entry);
}

void register_transport(const TransportEntry& entry) {
  Registry& r = raw_registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.transports.push_back(entry);
}

// Registration happens once, before any look-up, so the vectors no longer change.
std::span<const BackendEntry> backends() { return registry().backends; }
std::span<const TransportEntry> transports() { return registry().transports; }

const BackendEntry* find_backend(DeviceType device) {
  for (const BackendEntry& e : backends())
    if (e.info.device == device) return &e;
  return nullptr;
}

const TransportEntry* find_transport(CommSource comm, DeviceType device, std::string* reason) {
  std::string served;
  for (const TransportEntry& t : transports()) {
    bool source = false, dev = false;
    for (CommSource s : t.sources) {
      source |= s == comm;
      served += fmt::format("{}{} ({})", served.empty() ? "" : ", ", comm_source_name(s), t.name);
    }
    for (DeviceType d : t.devices) dev |= d == device;
    if (source && dev) return &t;
  }
  if (reason)
    *reason = fmt::format("this build has no transport for Bootstrap.comm = {} on a {} device; "
                          "it has: {}", comm_source_name(comm), device_kind_name(device), served);
  return nullptr;
}

}  // namespace moe_ep::detail
