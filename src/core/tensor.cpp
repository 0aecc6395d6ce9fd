#include "moe_ep/tensor.h"

#include <fmt/format.h>

#include "check.h"

namespace moe_ep {

std::string Device::str() const {
  if (type == DeviceType::kCPU) return index == 0 ? std::string("cpu") : fmt::format("cpu:{}", index);
  return fmt::format("cuda:{}", index);
}

TensorView TensorView::contiguous(void* data, DType dtype, std::initializer_list<int64_t> shape,
                                  Device device) {
  MOE_EP_CHECK(shape.size() >= 1 && shape.size() <= kMaxTensorDims,
               "tensor rank {} is not supported; expected 1..{}", shape.size(), kMaxTensorDims);
  TensorView t;
  t.data = data;
  t.dtype = dtype;
  t.device = device;
  t.ndim = static_cast<int32_t>(shape.size());
  int i = 0;
  for (int64_t s : shape) t.shape[i++] = s;
  int64_t stride = 1;
  for (int d = t.ndim - 1; d >= 0; --d) {
    t.strides[d] = stride;
    stride *= t.shape[d];
  }
  return t;
}

// A caller's view may carry any ndim; only 0..kMaxTensorDims index the shape.
static bool ndim_ok(int32_t ndim) { return ndim >= 0 && ndim <= kMaxTensorDims; }

int64_t TensorView::numel() const {
  if (!ndim_ok(ndim)) return 0;
  int64_t n = 1;
  for (int d = 0; d < ndim; ++d) n *= shape[d];
  return ndim == 0 ? 0 : n;
}

bool TensorView::is_contiguous() const {
  if (!ndim_ok(ndim)) return false;
  int64_t stride = 1;
  for (int d = ndim - 1; d >= 0; --d) {
    if (shape[d] != 1 && strides[d] != stride) return false;
    stride *= shape[d];
  }
  return true;
}

std::string TensorView::shape_str() const {
  if (!ndim_ok(ndim)) return fmt::format("<ndim {}, not 0..{}>", ndim, kMaxTensorDims);
  std::string s = "[";
  for (int d = 0; d < ndim; ++d) s += fmt::format("{}{}", d ? ", " : "", shape[d]);
  return s + "]";
}

}  // namespace moe_ep
