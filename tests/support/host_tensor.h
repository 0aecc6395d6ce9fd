// Owning host buffers with a TensorView over them, for the tests.
#pragma once

#include <cstdint>
#include <vector>

#include "moe_ep/tensor.h"

namespace moe_ep::testsupport {

inline TensorView view_of(void* data, DType dtype, const std::vector<int64_t>& shape) {
  TensorView t;
  t.data = data;
  t.dtype = dtype;
  t.device = Device::cpu();
  t.ndim = static_cast<int32_t>(shape.size());
  int64_t stride = 1;
  for (int d = t.ndim - 1; d >= 0; --d) {
    t.shape[d] = shape[d];
    t.strides[d] = stride;
    stride *= shape[d];
  }
  return t;
}

template <class T>
class HostTensor {
 public:
  HostTensor() = default;
  HostTensor(DType dtype, std::vector<int64_t> shape, T fill = T{})
      : dtype_(dtype), shape_(std::move(shape)) {
    int64_t n = 1;
    for (int64_t s : shape_) n *= s;
    values_.assign(static_cast<size_t>(n), fill);
  }
  HostTensor(const HostTensor&) = default;
  HostTensor(HostTensor&&) = default;
  HostTensor& operator=(const HostTensor&) = default;
  HostTensor& operator=(HostTensor&&) = default;

  bool empty() const { return shape_.empty(); }
  TensorView view() const {
    if (shape_.empty()) return TensorView{};
    return view_of(const_cast<T*>(values_.data()), dtype_, shape_);
  }
  std::vector<T>& values() { return values_; }
  const std::vector<T>& values() const { return values_; }
  T& operator[](size_t i) { return values_[i]; }
  const T& operator[](size_t i) const { return values_[i]; }
  size_t size() const { return values_.size(); }
  const std::vector<int64_t>& shape() const { return shape_; }

 private:
  DType dtype_ = DType::kU8;
  std::vector<int64_t> shape_;
  std::vector<T> values_;
};

}  // namespace moe_ep::testsupport
