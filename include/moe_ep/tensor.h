// Non-owning strided tensor view. Field meanings follow DLPack's DLTensor: shape and strides
// count elements, device type codes are DLPack's (kDLCPU = 1, kDLCUDA = 2).
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>

#include "moe_ep/dtype.h"

namespace moe_ep {

enum class DeviceType : int32_t { kCPU = 1, kCUDA = 2 };

struct Device {
  DeviceType type = DeviceType::kCPU;
  int32_t index = 0;

  static Device cpu() { return {DeviceType::kCPU, 0}; }
  static Device cuda(int32_t index = 0) { return {DeviceType::kCUDA, index}; }
  bool operator==(const Device&) const = default;
  std::string str() const;  // "cpu" or "cuda:N"
};

inline constexpr int kMaxTensorDims = 4;

struct TensorView {
  void* data = nullptr;
  DType dtype = DType::kU8;
  Device device{};
  int32_t ndim = 0;
  std::array<int64_t, kMaxTensorDims> shape{};
  std::array<int64_t, kMaxTensorDims> strides{};

  // A row-major contiguous view.
  static TensorView contiguous(void* data, DType dtype, std::initializer_list<int64_t> shape,
                               Device device = Device::cpu());

  bool defined() const { return ndim > 0 || data != nullptr; }
  int64_t size(int dim) const { return shape[dim]; }
  int64_t stride(int dim) const { return strides[dim]; }
  int64_t numel() const;
  int64_t nbytes() const { return numel() * dtype_size(dtype); }
  bool is_contiguous() const;
  std::string shape_str() const;  // "[T, H]" style, e.g. "[128, 4096]"

  template <class T>
  T* ptr() const {
    return static_cast<T*>(data);
  }
};

}  // namespace moe_ep
