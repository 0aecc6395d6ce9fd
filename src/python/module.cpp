// The extension module moe_ep._core: a thin binding over the C++ library (include/moe_ep).
// Tensors arrive through DLPack (tensor_args.h); every moe_ep::Error becomes a Python exception
// by its code, carrying the library's message. No layer logic lives here.
#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/string_view.h>

#include "moe_ep/backend.h"
#include "moe_ep/error.h"
#include "moe_ep/recipe.h"
#include "moe_ep/workspace.h"
#include "python/bindings.h"
#include "python/tensor_args.h"

namespace nb = nanobind;

namespace moe_ep::python {
namespace {

PyObject* g_unsupported_error = nullptr;  // moe_ep.UnsupportedError(NotImplementedError)
PyObject* g_device_error = nullptr;       // moe_ep.DeviceError(RuntimeError)

// kInvalidArgument -> ValueError, kUnsupported -> UnsupportedError (a NotImplementedError, so a
// RuntimeError), kTimeout -> TimeoutError, kDevice -> DeviceError (a RuntimeError), kRuntime and
// kInternal -> RuntimeError. The exception's `code` attribute is the library's code name.
void translate_error(const std::exception_ptr& p, void*) {
  try {
    std::rethrow_exception(p);
  } catch (const Error& e) {
    PyObject* type = PyExc_RuntimeError;
    switch (e.code()) {
      case ErrorCode::kInvalidArgument: type = PyExc_ValueError; break;
      case ErrorCode::kUnsupported: type = g_unsupported_error; break;
      case ErrorCode::kTimeout: type = PyExc_TimeoutError; break;
      case ErrorCode::kDevice: type = g_device_error; break;
      case ErrorCode::kRuntime:
      case ErrorCode::kInternal: type = PyExc_RuntimeError; break;
    }
    PyObject* exc = PyObject_CallFunction(type, "s", e.what());
    if (exc == nullptr) return;  // the constructor's own error stays set
    // SetAttr takes its own reference to the value: ours is dropped here, else every refusal
    // leaks the code string.
    PyObject* code = PyUnicode_FromString(error_code_name(e.code()));
    if (code != nullptr) {
      PyObject_SetAttrString(exc, "code", code);
      Py_DECREF(code);
    }
    PyErr_SetObject(type, exc);
    Py_DECREF(exc);
  }
}

nb::dict build_info() {
  nb::dict d;
  d["version"] = MOE_EP_VERSION;
  d["cuda"] = MOE_EP_PY_WITH_CUDA != 0;
  d["nccl"] = MOE_EP_PY_WITH_NCCL != 0;
  nb::list backends;
  for (const BackendInfo& b : registered_backends()) {
    nb::dict e;
    e["name"] = b.name;
    e["description"] = b.description;
    e["device"] = b.device == DeviceType::kCPU ? "cpu" : "cuda";
    e["min_compute_capability"] = b.min_compute_capability;
    e["max_compute_capability"] = b.max_compute_capability;
    nb::list recipes;
    for (Recipe r : b.recipes) recipes.append(nb::str(recipe_name(r).data(), recipe_name(r).size()));
    e["recipes"] = recipes;
    backends.append(e);
  }
  d["backends"] = backends;
  nb::list transports;
  for (const TransportInfo& t : registered_transports()) {
    nb::dict e;
    e["name"] = t.name;
    e["status"] = t.status;
    transports.append(e);
  }
  d["transports"] = transports;
  d["workspace_formula"] = workspace_formula();
  return d;
}

}  // namespace
}  // namespace moe_ep::python

NB_MODULE(_core, m) {
  using namespace moe_ep;
  using namespace moe_ep::python;
  m.doc() = "moe_ep C++ library binding (use the moe_ep package, not this module)";
  g_unsupported_error = PyErr_NewExceptionWithDoc(
      "moe_ep.UnsupportedError", "A valid request this build, device or backend cannot do.",
      PyExc_NotImplementedError, nullptr);
  g_device_error = PyErr_NewExceptionWithDoc(
      "moe_ep.DeviceError", "A CUDA/NCCL call failed or a device-side error flag was raised.",
      PyExc_RuntimeError, nullptr);
  m.attr("UnsupportedError") = nb::handle(g_unsupported_error);
  m.attr("DeviceError") = nb::handle(g_device_error);
  nb::register_exception_translator(translate_error);

  // The version alone, without build_info(): that reports the transports' status, which opens
  // libnccl.so.2, and a process that imports torch afterwards must get torch's own NCCL.
  m.attr("__version__") = MOE_EP_VERSION;
  m.def("info", &build_info, "Build facts: version, cuda, nccl, backends, transports (the NCCL "
        "transport's status opens libnccl.so.2: call it after importing torch).");
  m.def(
      "workspace_bytes",
      [](int64_t world_size, int64_t num_experts, int64_t max_tokens_per_rank, int64_t hidden_size,
         int64_t intermediate_size, int64_t top_k, bool on_device) {
        const WorkspaceShape shape{world_size, num_experts, max_tokens_per_rank,
                                   hidden_size, intermediate_size, top_k};
        return on_device ? device_workspace_layout(shape).total_bytes
                         : workspace_layout(shape).total_bytes;
      },
      nb::arg("world_size"), nb::arg("num_experts"), nb::arg("max_tokens_per_rank"),
      nb::arg("hidden_size"), nb::arg("intermediate_size"), nb::arg("top_k"),
      nb::arg("on_device") = false,
      "Bytes of the symmetric workspace of (R, E, T, H, I, K): the host layout, or with "
      "on_device the CUDA layout (include/moe_ep/workspace.h).");
  m.def(
      "_imports_through_dlpack_exchange_api", [](nb::handle tensor) { return imports_through_exchange_api(tensor); },
      nb::arg("tensor"),
      "Whether `tensor` is imported through the DLPack C exchange API (no Python code per tensor) "
      "rather than through __dlpack__.");
  bind_runtime(m);
  bind_layer(m);
  bind_router(m);
  bind_checkpoint(m);
}
