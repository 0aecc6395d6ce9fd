#include "cli/device_driver.h"

#include <fstream>
#include <string>
#include <thread>

#include <fmt/format.h>

#include "core/check.h"

namespace moe_ep::cli {

std::unique_ptr<Driver> make_driver(Device device) {
  if (device.type == DeviceType::kCPU) return make_cpu_driver();
#ifdef MOE_EP_CLI_HAS_CUDA_DRIVER
  return make_cuda_driver(device.index);
#else
#ifdef MOE_EP_WITH_CUDA
  MOE_EP_FAIL(ErrorCode::kUnsupported, "device {}: this build of the moe_ep tool has no CUDA "
              "driver yet; use --device cpu", device.str());
#else
  MOE_EP_FAIL(ErrorCode::kUnsupported, "device {}: CUDA is not compiled into this build (no "
              "nvcc at configure time); use --device cpu", device.str());
#endif
#endif
}

std::vector<DeviceDescription> list_cuda_devices(std::string* status) {
#ifdef MOE_EP_CLI_HAS_CUDA_DRIVER
  return cuda_driver_list_devices(status);
#else
#ifdef MOE_EP_WITH_CUDA
  if (status) *status = "cuda: compiled, but the tool's CUDA driver is not built yet";
#else
  if (status) *status = "cuda: not compiled";
#endif
  return {};
#endif
}

DeviceDescription describe_cpu() {
  DeviceDescription d;
  d.device = Device::cpu();
  d.num_units = static_cast<int>(std::thread::hardware_concurrency());
  d.name = "cpu";
  std::ifstream cpuinfo("/proc/cpuinfo");
  for (std::string line; std::getline(cpuinfo, line);) {
    if (line.rfind("model name", 0) == 0) {
      const auto colon = line.find(':');
      if (colon != std::string::npos) d.name = line.substr(line.find_first_not_of(' ', colon + 1));
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
  return d;
}

}  // namespace moe_ep::cli
