// Registers the CPU backend: every recipe, any CPU; one rank (CommSource::kSingleProcess) or
// simulated in-process ranks (CommSource::kSimulated, core/sim_transport.h); the standalone
// shared expert; the host as its one device.
#include <fstream>
#include <thread>

#include "core/check.h"
#include "core/registry.h"
#include "cpu/cpu_layers.h"
#include "cpu/cpu_routing_stage.h"

namespace moe_ep::cpu {
namespace {

constexpr Recipe kRecipes[] = {Recipe::kMxfp4, Recipe::kNvfp4};

// The CPU reference has no kernel variants: a pinned GPU choice is refused, not ignored.
std::string gpu_only_overrides(const KernelOverrides& o) {
  KernelOverrides gpu_only = o;
  gpu_only.num_threads = 0;
  gpu_only.cpu_batch_tokens = 0;
  return gpu_only.str();
}

std::unique_ptr<Layer::Impl> create_cpu_layer(const LayerRequest& request) {
  const std::string gpu_only = gpu_only_overrides(request.overrides);
  MOE_EP_CHECK_CODE(gpu_only.empty(), ErrorCode::kUnsupported,
                    "overrides {}: the CPU backend has no kernel variants; it takes num_threads and "
                    "cpu_batch_tokens only", gpu_only);
  return request.runtime->bootstrap().comm == CommSource::kSimulated ? make_cpu_ep_layer(request)
                                                                      : make_cpu_layer(request);
}

}  // namespace

std::vector<DeviceProperties> list_cpu_devices(std::string* status) {
  DeviceProperties d;
  d.device = Device::cpu();
  d.num_units = static_cast<int>(std::thread::hardware_concurrency());
  d.name = "cpu";
  std::ifstream cpuinfo("/proc/cpuinfo");
  for (std::string line; std::getline(cpuinfo, line);) {
    if (line.rfind("model name", 0) == 0) {
      const auto colon = line.find(':');
      const auto begin = colon == std::string::npos ? colon : line.find_first_not_of(' ', colon + 1);
      if (begin != std::string::npos) d.name = line.substr(begin);
      break;
    }
  }
  std::ifstream meminfo("/proc/meminfo");
  for (std::string key; meminfo >> key;) {
    int64_t kib = 0;
    meminfo >> kib;
    if (key == "MemTotal:") {
      d.memory_bytes = kib * 1024;
      break;
    }
    meminfo.ignore(1 << 10, '\n');
  }
  if (status) *status = "the host";
  return {d};
}

}  // namespace moe_ep::cpu

namespace moe_ep::detail {

void register_cpu_backend() {
  using namespace moe_ep::cpu;
  detail::BackendEntry e;
  e.info = {"cpu", "the reference backend: exact to docs/spec.md, multithreaded, any CPU",
            DeviceType::kCPU, 0, 0, kRecipes};
  e.create = &create_cpu_layer;
  e.create_routing_stage = &create_cpu_routing_stage;
  e.list_devices = &list_cpu_devices;
  e.create_shared_expert = &make_cpu_shared_expert;
  detail::register_backend(e);
}

}  // namespace moe_ep::detail
