// list_devices (moe_ep/backend.h): the host as the CPU's one device; the GPUs as their backend
// sees them, or none with the reason, on every build and machine.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "moe_ep/backend.h"

namespace moe_ep {
namespace {

TEST(DeviceList, TheCpuIsTheHost) {
  std::string status;
  const std::vector<DeviceProperties> cpus = list_devices(DeviceType::kCPU, &status);
  ASSERT_EQ(cpus.size(), 1u) << status;
  EXPECT_EQ(cpus[0].device, Device::cpu());
  EXPECT_FALSE(cpus[0].name.empty());
  EXPECT_GE(cpus[0].num_units, 1);
  EXPECT_EQ(cpus[0].compute_capability, 0);
}

TEST(DeviceList, GpusAreListedInOrderOrTheReasonIsGiven) {
  std::string status;
  const std::vector<DeviceProperties> gpus = list_devices(DeviceType::kCUDA, &status);
  EXPECT_FALSE(status.empty());
  if (gpus.empty()) {
    std::printf("[ devices  ] no GPU listed: %s\n", status.c_str());
    return;
  }
  for (size_t i = 0; i < gpus.size(); ++i) {
    EXPECT_EQ(gpus[i].device, Device::cuda(static_cast<int>(i)));
    EXPECT_GT(gpus[i].compute_capability, 0) << gpus[i].name;
    EXPECT_GT(gpus[i].memory_bytes, 0) << gpus[i].name;
    EXPECT_GT(gpus[i].num_units, 0) << gpus[i].name;
    // The backend's own reading of the device agrees with the listing.
    EXPECT_EQ(device_compute_capability(gpus[i].device), gpus[i].compute_capability);
  }
}

}  // namespace
}  // namespace moe_ep
