#include "cuda/device_info.h"

#include <cuda_runtime.h>

#include "core/check.h"
#include "moe_ep/tensor.h"

namespace moe_ep {

int cuda::read_compute_capability(Device device) {
  if (device.type != DeviceType::kCUDA) return 0;
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || device.index < 0 || device.index >= count) {
    cudaGetLastError();  // clear the non-sticky error
    return 0;
  }
  int major = 0, minor = 0;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device.index) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device.index) != cudaSuccess)
    return 0;
  return major * 10 + minor;
}

namespace cuda {
namespace {

std::string error_text(cudaError_t err) {
  return fmt::format("{}: {}", cudaGetErrorName(err), cudaGetErrorString(err));
}

bool query(int index, CudaDeviceInfo* info, std::string* reason) {
  cudaDeviceProp prop{};
  const cudaError_t err = cudaGetDeviceProperties(&prop, index);
  if (err != cudaSuccess) {
    cudaGetLastError();
    *reason = error_text(err);
    return false;
  }
  info->index = index;
  info->name = prop.name;
  info->compute_capability = prop.major * 10 + prop.minor;
  info->memory_bytes = static_cast<int64_t>(prop.totalGlobalMem);
  info->sm_count = prop.multiProcessorCount;
  info->l2_bytes = prop.l2CacheSize;
  info->shared_per_block_optin = static_cast<int64_t>(prop.sharedMemPerBlockOptin);
  return true;
}

}  // namespace

std::vector<CudaDeviceInfo> list_devices(std::string* status) {
  std::vector<CudaDeviceInfo> out;
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess || count == 0) {
    cudaGetLastError();
    if (status)
      *status = fmt::format("no CUDA device ({})", err != cudaSuccess ? error_text(err) : "count 0");
    return out;
  }
  for (int i = 0; i < count; ++i) {
    CudaDeviceInfo info;
    std::string reason;
    if (query(i, &info, &reason)) out.push_back(info);
  }
  if (status) *status = fmt::format("{} CUDA device(s)", out.size());
  return out;
}

CudaDeviceInfo device_info(int index) {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) cudaGetLastError();
  MOE_EP_CHECK_CODE(err == cudaSuccess && count > 0, ErrorCode::kUnsupported,
                    "cuda:{} is not available: no CUDA device ({})", index,
                    err != cudaSuccess ? error_text(err) : "cudaGetDeviceCount returned 0");
  MOE_EP_CHECK_CODE(index >= 0 && index < count, ErrorCode::kUnsupported,
                    "cuda:{} does not exist; this machine has {} CUDA device(s) (cuda:0..cuda:{})",
                    index, count, count - 1);
  CudaDeviceInfo info;
  std::string reason;
  MOE_EP_CHECK_CODE(query(index, &info, &reason), ErrorCode::kUnsupported,
                    "cuda:{} cannot be queried: {}", index, reason);
  return info;
}

}  // namespace cuda
}  // namespace moe_ep
