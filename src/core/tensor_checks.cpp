#include "core/tensor_checks.h"

#include <fmt/format.h>

#include "core/check.h"

namespace moe_ep::detail {
namespace {

std::string dims_str(std::initializer_list<Dim> dims, bool values) {
  std::string s = "[";
  bool first = true;
  for (const Dim& d : dims) {
    s += first ? "" : ", ";
    s += values ? std::to_string(d.value) : d.name;
    first = false;
  }
  return s + "]";
}

std::string strides_str(const TensorView& t) {
  std::string s = "[";
  for (int i = 0; i < t.ndim; ++i) s += fmt::format("{}{}", i ? ", " : "", t.strides[i]);
  return s + "]";
}

}  // namespace

std::string dtypes_str(std::initializer_list<DType> dtypes) {
  std::string s;
  for (DType d : dtypes) s += fmt::format("{}{}", s.empty() ? "" : " | ", dtype_name(d));
  return s;
}

void check_tensor(const TensorView& t, std::string_view name, std::initializer_list<DType> dtypes,
                  std::initializer_list<Dim> dims, std::string_view device_rule, bool device_ok) {
  const std::string param(name);
  MOE_EP_CHECK_PARAM(t.defined(), param, "{} is missing; expected {} {} = {}", name,
                     dtypes_str(dtypes), dims_str(dims, false), dims_str(dims, true));
  bool dtype_ok = false;
  for (DType d : dtypes) dtype_ok |= (t.dtype == d);
  MOE_EP_CHECK_PARAM(dtype_ok, param, "{} has dtype {}; expected {}", name, dtype_name(t.dtype),
                     dtypes_str(dtypes));
  bool shape_ok = t.ndim == static_cast<int32_t>(dims.size());
  int d = 0;
  for (const Dim& dim : dims) shape_ok = shape_ok && t.shape[d++] == dim.value;
  MOE_EP_CHECK_PARAM(shape_ok, param, "{} has shape {}; expected {} = {}", name, t.shape_str(),
                     dims_str(dims, false), dims_str(dims, true));
  MOE_EP_CHECK_PARAM(t.is_contiguous(), param,
                     "{} with shape {} has strides {}; expected row-major contiguous", name,
                     t.shape_str(), strides_str(t));
  MOE_EP_CHECK_PARAM(t.numel() == 0 || t.data != nullptr, param,
                     "{} with shape {} has a null data pointer", name, t.shape_str());
  MOE_EP_CHECK_PARAM(device_ok, param, "{} is on {}; expected {}", name, t.device.str(), device_rule);
}

void check_absent(const TensorView& t, std::string_view name, std::string_view why) {
  MOE_EP_CHECK_PARAM(!t.defined(), std::string(name), "{} is given but not used {}; leave it empty",
                     name, why);
}

}  // namespace moe_ep::detail
