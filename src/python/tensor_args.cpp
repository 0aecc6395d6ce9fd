#include "python/tensor_args.h"

#include <cstring>
#include <string>

#include "core/check.h"
#include "moe_ep/dtype.h"
#include "moe_ep/error.h"

namespace moe_ep::python {
namespace {

// ml_dtypes element types numpy cannot export through DLPack: (numpy dtype name, storage, type).
struct StorageAlias {
  const char* name;
  const char* storage;
  DType dtype;
};
constexpr StorageAlias kAliases[] = {
    {"bfloat16", "uint16", DType::kBF16},
    {"float8_e4m3fn", "uint8", DType::kE4M3},
    {"float8_e8m0fnu", "uint8", DType::kE8M0},
};

TensorView to_view(const nb::ndarray<>& a, const char* name, std::optional<DType> dtype = {}) {
  TensorView v;
  v.data = a.data();
  MOE_EP_CHECK(a.ndim() <= static_cast<size_t>(kMaxTensorDims), "{} has {} dimensions; expected at most {}",
               name, a.ndim(), kMaxTensorDims);
  v.ndim = static_cast<int32_t>(a.ndim());
  for (size_t d = 0; d < a.ndim(); ++d) {
    v.shape[d] = static_cast<int64_t>(a.shape(d));
    v.strides[d] = static_cast<int64_t>(a.stride(d));
  }
  // Strides of size-1 dimensions and of empty tensors address nothing; exporters differ in what
  // they report there (0, or anything), so they become the row-major ones.
  int64_t row_major = 1, numel = 1;
  for (int32_t d = 0; d < v.ndim; ++d) numel *= v.shape[d];
  for (int32_t d = v.ndim - 1; d >= 0; --d) {
    if (v.shape[d] == 1 || numel == 0) v.strides[d] = row_major;
    row_major *= v.shape[d];
  }
  const nb::dlpack::dtype dt = a.dtype();
  v.dtype = dtype ? *dtype : dtype_from_dlpack({dt.code, dt.bits, dt.lanes});
  switch (a.device_type()) {
    case nb::device::cpu::value: v.device = Device::cpu(); break;
    case nb::device::cuda::value: v.device = Device::cuda(a.device_id()); break;
    default:
      throw nb::type_error(("moe_ep: " + std::string(name) + " is on DLPack device type " +
                            std::to_string(a.device_type()) + "; expected cpu or cuda")
                               .c_str());
  }
  return v;
}

}  // namespace

std::optional<ImportedTensor> import_tensor(nb::handle obj, const char* name) {
  if (obj.is_none()) return std::nullopt;
  ImportedTensor t;
  if (nb::try_cast(obj, t.array, false)) {
    try {
      t.view = to_view(t.array, name);
    } catch (const Error& e) {  // a dtype with no moe_ep equivalent: a type error
      throw nb::type_error((std::string(name) + ": " + e.message()).c_str());
    }
    return t;
  }
  if (nb::hasattr(obj, "dtype") && nb::hasattr(obj, "view")) {
    // numpy: dtype.name "bfloat16", view("uint16"); torch: str(dtype) "torch.float8_e4m3fn",
    // view(torch.uint8) (for a torch whose DLPack export lacks the type).
    std::string dtype_name =
        nb::cast<std::string>(nb::module_::import_("builtins").attr("str")(obj.attr("dtype")));
    const bool is_torch = dtype_name.rfind("torch.", 0) == 0;
    if (is_torch) dtype_name = dtype_name.substr(6);
    for (const StorageAlias& alias : kAliases) {
      if (dtype_name != alias.name) continue;
      nb::object storage = nb::str(alias.storage);
      if (is_torch) storage = nb::module_::import_("torch").attr(alias.storage);
      t.keepalive = obj.attr("view")(storage);
      if (nb::try_cast(t.keepalive, t.array, false)) {
        t.view = to_view(t.array, name, alias.dtype);
        return t;
      }
    }
  }
  throw nb::type_error((std::string("moe_ep: ") + name + " is a " +
                        nb::type_name(obj.type()).c_str() +
                        "; expected a torch tensor or numpy array (DLPack)")
                           .c_str());
}

ImportedTensor import_required(nb::handle obj, const char* name) {
  std::optional<ImportedTensor> t = import_tensor(obj, name);
  if (!t) throw nb::type_error((std::string("moe_ep: ") + name + " is None; expected a tensor").c_str());
  return std::move(*t);
}

Device parse_device(const std::string& text) {
  if (text == "cpu") return Device::cpu();
  if (text == "cuda") return Device::cuda(0);
  if (text.rfind("cuda:", 0) == 0) {
    const std::string idx = text.substr(5);
    if (!idx.empty() && idx.find_first_not_of("0123456789") == std::string::npos && idx.size() < 4)
      return Device::cuda(std::stoi(idx));
  }
  MOE_EP_FAIL(ErrorCode::kInvalidArgument, "device = '{}' is not a device; expected 'cpu', 'cuda' or 'cuda:N'",
              text);
}

}  // namespace moe_ep::python
