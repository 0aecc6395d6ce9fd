#include "cli/device_driver.h"

#include <string>

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
  return list_devices(DeviceType::kCUDA, status);
}

DeviceDescription describe_cpu() { return list_devices(DeviceType::kCPU).at(0); }

}  // namespace moe_ep::cli
