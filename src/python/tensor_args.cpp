#include "python/tensor_args.h"

#include <cstring>
#include <string>

#include <nanobind/stl/string.h>  // nb::cast<std::string>: without it the cast throws bad_cast

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

// A view of a DLPack tensor description (the library checks shape, strides and device).
TensorView make_view(void* data, int64_t ndim, const int64_t* shape, const int64_t* strides, DLTypeCode code,
                     int32_t device_type, int32_t device_id, const char* name, std::optional<DType> dtype) {
  TensorView v;
  v.data = data;
  MOE_EP_CHECK(ndim <= kMaxTensorDims, "{} has {} dimensions; expected at most {}", name, ndim, kMaxTensorDims);
  v.ndim = static_cast<int32_t>(ndim);
  for (int32_t d = 0; d < v.ndim; ++d) v.shape[d] = shape[d];
  // Strides of size-1 dimensions and of empty tensors address nothing; exporters differ in what
  // they report there (0, or anything), so they become the row-major ones (as do absent strides).
  int64_t row_major = 1, numel = 1;
  for (int32_t d = 0; d < v.ndim; ++d) numel *= v.shape[d];
  for (int32_t d = v.ndim - 1; d >= 0; --d) {
    v.strides[d] = strides == nullptr || v.shape[d] == 1 || numel == 0 ? row_major : strides[d];
    row_major *= v.shape[d];
  }
  v.dtype = dtype ? *dtype : dtype_from_dlpack(code);
  switch (device_type) {
    case nb::device::cpu::value: v.device = Device::cpu(); break;
    case nb::device::cuda::value: v.device = Device::cuda(device_id); break;
    default:
      throw nb::type_error(("moe_ep: " + std::string(name) + " is on DLPack device type " +
                            std::to_string(device_type) + "; expected cpu or cuda")
                               .c_str());
  }
  return v;
}

template <typename Array>
TensorView to_view(const Array& a, const char* name, std::optional<DType> dtype = {}) {
  const nb::dlpack::dtype dt = a.dtype();
  int64_t shape[kMaxTensorDims], strides[kMaxTensorDims];
  const int64_t ndim = static_cast<int64_t>(a.ndim());
  for (int64_t d = 0; d < ndim && d < kMaxTensorDims; ++d) {
    shape[d] = static_cast<int64_t>(a.shape(d));
    strides[d] = static_cast<int64_t>(a.stride(d));
  }
  return make_view(const_cast<void*>(static_cast<const void*>(a.data())), ndim, shape, strides, {dt.code, dt.bits, dt.lanes}, a.device_type(), a.device_id(),
                   name, dtype);
}

// ---- the DLPack C exchange API (DLPack 1.3) --------------------------------------------------
// A producer type may hold, in its __dlpack_c_exchange_api__ attribute, a capsule named
// "dlpack_exchange_api" with a table of C functions (torch.Tensor does since torch 2.10). Its
// dltensor_from_py_object_no_sync fills a DLTensor that borrows the object's data, shape and
// strides for as long as the object lives (here: the library call), with no Python code run;
// current_work_stream gives the framework's current stream. The __dlpack__ protocol costs
// microseconds per tensor (Python code in the producer); this costs tens of nanoseconds. The
// declarations follow the layout of the DLPack specification's dlpack.h.
namespace dlx {
struct Version {
  uint32_t major, minor;
};
struct Header {
  Version version;
  Header* prev_api;
};
struct Tensor {
  void* data;
  int32_t device_type, device_id;  // DLDevice
  int32_t ndim;
  uint8_t code, bits;              // DLDataType
  uint16_t lanes;
  int64_t* shape;
  int64_t* strides;
  uint64_t byte_offset;
};
struct Api {
  Header header;
  void* managed_tensor_allocator;
  void* managed_tensor_from_py_object_no_sync;
  void* managed_tensor_to_py_object_no_sync;
  int (*dltensor_from_py_object_no_sync)(void* py_object, Tensor* out);
  int (*current_work_stream)(int32_t device_type, int32_t device_id, void** out_stream);
};

// The table of obj's type, or null; looked up once per type (the few tensor types a process
// passes in stay referenced by the cache).
const Api* api_of(nb::handle obj) {
  struct Entry {
    PyTypeObject* type;
    const Api* api;
  };
  static Entry cache[8];
  static int used = 0;
  PyTypeObject* type = Py_TYPE(obj.ptr());
  for (int i = 0; i < used; ++i)
    if (cache[i].type == type) return cache[i].api;
  const Api* api = nullptr;
  PyObject* capsule = PyObject_GetAttrString(reinterpret_cast<PyObject*>(type), "__dlpack_c_exchange_api__");
  if (capsule == nullptr) {
    PyErr_Clear();
  } else {
    if (PyCapsule_IsValid(capsule, "dlpack_exchange_api")) {
      api = static_cast<const Api*>(PyCapsule_GetPointer(capsule, "dlpack_exchange_api"));
      if (api != nullptr && (api->header.version.major != 1 || api->dltensor_from_py_object_no_sync == nullptr))
        api = nullptr;
    }
    Py_DECREF(capsule);  // the type holds the capsule
  }
  if (used < 8) {
    Py_INCREF(reinterpret_cast<PyObject*>(type));
    cache[used++] = {type, api};
  }
  return api;
}

// obj through the exchange API; false (nothing raised) when its type has none or the producer
// refuses it, so the caller takes the __dlpack__ path (which also gives the messages).
bool import_view(nb::handle obj, const char* name, TensorView& view) {
  const Api* api = api_of(obj);
  if (api == nullptr) return false;
  Tensor t;
  if (api->dltensor_from_py_object_no_sync(obj.ptr(), &t) != 0) {
    PyErr_Clear();
    return false;
  }
  if (t.ndim < 0 || t.ndim > kMaxTensorDims || (t.device_type != nb::device::cpu::value &&
                                                t.device_type != nb::device::cuda::value))
    return false;
  try {
    view = make_view(static_cast<char*>(t.data) + t.byte_offset, t.ndim, t.shape, t.strides,
                     {t.code, t.bits, t.lanes}, t.device_type, t.device_id, name, std::nullopt);
  } catch (const Error&) {  // an element type without a DLPack code of ours: the alias path
    return false;
  }
  return true;
}
}  // namespace dlx

// obj as a DLPack array into t (its view tagged `dtype` when given): false when it is none.
// Inputs are imported read-only (numpy refuses to export a read-only array as writable); an
// output must be writable, and a read-only one is refused with that reason.
bool try_import(nb::handle obj, const char* name, bool writable, std::optional<DType> dtype,
                ImportedTensor& t) {
  if (writable) {
    if (nb::try_cast(obj, t.writable, false)) {
      t.view = to_view(t.writable, name, dtype);
      return true;
    }
    if (nb::try_cast(obj, t.array, false))
      throw nb::value_error((std::string("moe_ep: ") + name +
                             " is a read-only array; expected a writable one (the forward writes it)")
                                .c_str());
    return false;
  }
  if (!nb::try_cast(obj, t.array, false)) return false;
  t.view = to_view(t.array, name, dtype);
  return true;
}

}  // namespace

std::optional<ImportedTensor> import_tensor(nb::handle obj, const char* name, bool writable) {
  if (obj.is_none()) return std::nullopt;
  ImportedTensor t;
  if (dlx::import_view(obj, name, t.view)) return t;
  try {
    if (try_import(obj, name, writable, std::nullopt, t)) return t;
  } catch (const Error& e) {  // a dtype with no moe_ep equivalent: a type error
    throw nb::type_error((std::string(name) + ": " + e.message()).c_str());
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
      if (try_import(t.keepalive, name, writable, alias.dtype, t)) return t;
    }
  }
  throw nb::type_error((std::string("moe_ep: ") + name + " is a " +
                        nb::type_name(obj.type()).c_str() +
                        "; expected a torch tensor or numpy array (DLPack)")
                           .c_str());
}

ImportedTensor import_required(nb::handle obj, const char* name, bool writable) {
  std::optional<ImportedTensor> t = import_tensor(obj, name, writable);
  if (!t) throw nb::type_error((std::string("moe_ep: ") + name + " is None; expected a tensor").c_str());
  return std::move(*t);
}

bool imports_through_exchange_api(nb::handle tensor) {
  TensorView view;
  return dlx::import_view(tensor, "tensor", view);
}

std::optional<void*> exchange_current_stream(nb::handle tensor, int device_index) {
  const dlx::Api* api = dlx::api_of(tensor);
  if (api == nullptr || api->current_work_stream == nullptr) return std::nullopt;
  void* stream = nullptr;
  if (api->current_work_stream(nb::device::cuda::value, device_index, &stream) != 0) {
    PyErr_Clear();
    return std::nullopt;
  }
  return stream;
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

// torch._C._cuda_getCurrentRawStream, looked up once torch is imported (never imports torch).
void* torch_current_stream(int device_index) {
  static nb::object* fn = nullptr;
  if (fn == nullptr) {
    nb::dict modules = nb::borrow<nb::dict>(nb::module_::import_("sys").attr("modules"));
    if (!modules.contains("torch")) return nullptr;
    nb::object c = nb::getattr(modules["torch"], "_C", nb::none());
    if (c.is_none() || !nb::hasattr(c, "_cuda_getCurrentRawStream")) return nullptr;
    fn = new nb::object(c.attr("_cuda_getCurrentRawStream"));  // lives for the process
  }
  return reinterpret_cast<void*>(nb::cast<uintptr_t>((*fn)(device_index)));
}

void* call_stream(std::optional<uintptr_t> stream, nb::handle tensor, int device_index) {
  if (stream) return reinterpret_cast<void*>(*stream);
  const std::optional<void*> current = exchange_current_stream(tensor, device_index);
  return current ? *current : torch_current_stream(device_index);
}

}  // namespace moe_ep::python
