// Owning device allocation (cudaMalloc / cudaFree), move-only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>

#include <cuda_runtime.h>

#include "cuda/errors.h"

namespace moe_ep::cuda {

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes) : bytes_(bytes) {
    if (bytes == 0) return;
    const cudaError_t err = cudaMalloc(&ptr_, bytes);
    if (err != cudaSuccess) {
      cudaGetLastError();
      MOE_EP_FAIL(ErrorCode::kDevice, "cudaMalloc of {} bytes ({:.1f} MiB) failed: {} ({})", bytes,
                  bytes / 1048576.0, cudaGetErrorName(err), cudaGetErrorString(err));
    }
  }
  ~DeviceBuffer() {
    if (ptr_) MOE_EP_CUDA_IGNORE(cudaFree(ptr_));
  }
  DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(std::exchange(o.ptr_, nullptr)), bytes_(o.bytes_) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    std::swap(ptr_, o.ptr_);
    std::swap(bytes_, o.bytes_);
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  template <class T = uint8_t>
  T* get(size_t byte_offset = 0) const {
    return reinterpret_cast<T*>(static_cast<uint8_t*>(ptr_) + byte_offset);
  }
  size_t bytes() const { return bytes_; }

  // Synchronous host -> device copy of a whole host vector into a new buffer.
  template <class Vec>
  static DeviceBuffer upload(const Vec& host) {
    DeviceBuffer b(host.size() * sizeof(host[0]));
    if (b.bytes()) MOE_EP_CUDA_CHECK(cudaMemcpy(b.ptr_, host.data(), b.bytes(), cudaMemcpyHostToDevice));
    return b;
  }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace moe_ep::cuda
