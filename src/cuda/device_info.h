// CUDA devices as the library and the CLI see them (no CUDA types in this header).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "moe_ep/tensor.h"

namespace moe_ep::cuda {

// major*10+minor of a CUDA device; 0 when it does not exist or cannot be read (never throws).
int read_compute_capability(Device device);

struct CudaDeviceInfo {
  int index = 0;
  std::string name;
  int compute_capability = 0;  // major*10+minor
  int64_t memory_bytes = 0;
  int sm_count = 0;
  int64_t l2_bytes = 0;
  int64_t shared_per_block_optin = 0;
};

// Visible devices; empty with `status` saying why ("no CUDA device (cudaErrorNoDevice: ...)").
std::vector<CudaDeviceInfo> list_devices(std::string* status);

// Throws kUnsupported naming the index and the reason when device `index` cannot be used.
CudaDeviceInfo device_info(int index);

}  // namespace moe_ep::cuda
