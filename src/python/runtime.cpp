// moe_ep.Runtime: the process's runtime (include/moe_ep/runtime.h), shared by Python objects
// through its std::shared_ptr (layers keep theirs).
#include <memory>
#include <string>

#include <nanobind/nanobind.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/string_view.h>

#include "core/check.h"
#include "moe_ep/runtime.h"
#include "python/bindings.h"
#include "python/tensor_args.h"

namespace nb = nanobind;

namespace moe_ep::python {
namespace {

// comm: None (one process, or simulated when world_size > 1 is asked with "simulated"),
// "simulated", "unique-id-file" / "tcp-store" (with rendezvous), or an int: a caller-owned
// ncclComm_t (e.g. ProcessGroupNCCL's communicator pointer).
Bootstrap make_bootstrap(int world_size, int rank, const std::string& device, nb::handle comm,
                         const std::string& rendezvous, int64_t timeout_ms) {
  Bootstrap b;
  b.world_size = world_size;
  b.rank = rank;
  b.device = parse_device(device);
  b.rendezvous = rendezvous;
  b.timeout_ms = timeout_ms;
  if (comm.is_none()) {
    b.comm = CommSource::kSingleProcess;
  } else if (nb::isinstance<nb::int_>(comm)) {
    b.comm = CommSource::kNcclComm;
    b.nccl_comm = reinterpret_cast<void*>(nb::cast<uintptr_t>(comm));
  } else if (nb::isinstance<nb::str>(comm)) {
    const std::string name = nb::cast<std::string>(comm);
    if (name == "simulated") b.comm = CommSource::kSimulated;
    else if (name == "unique-id-file") b.comm = CommSource::kUniqueIdFile;
    else if (name == "tcp-store") b.comm = CommSource::kTcpStore;
    else
      MOE_EP_FAIL(ErrorCode::kInvalidArgument,
                  "comm = '{}' is not a communicator source; expected None, 'simulated', "
                  "'unique-id-file', 'tcp-store' or an ncclComm_t pointer (int)", name);
  } else {
    throw nb::type_error("moe_ep: comm must be None, a str or an int (ncclComm_t)");
  }
  return b;
}

}  // namespace

void bind_runtime(nb::module_& m) {
  nb::class_<Runtime>(m, "Runtime",
                      "The process's EP group, device, communicator and symmetric workspace, "
                      "shared by every layer (acquire once; reference-counted).")
      .def_static(
          "acquire",
          [](int world_size, int rank, const std::string& device, nb::handle comm,
             const std::string& rendezvous, int64_t timeout_ms) {
            return Runtime::acquire(
                make_bootstrap(world_size, rank, device, comm, rendezvous, timeout_ms));
          },
          nb::arg("world_size") = 1, nb::arg("rank") = 0, nb::arg("device") = "cpu",
          nb::arg("comm") = nb::none(), nb::arg("rendezvous") = "",
          nb::arg("timeout_ms") = 30000,
          "Acquire (or share) the runtime of this process. device: 'cpu', 'cuda' or 'cuda:N', "
          "always explicit. An equal second acquire returns the same runtime; a different world "
          "while one is alive raises RuntimeError.")
      .def_prop_ro("world_size", &Runtime::world_size)
      .def_prop_ro("rank", &Runtime::rank)
      .def_prop_ro("device", [](const Runtime& r) { return r.device().str(); })
      .def_prop_ro("parts", &Runtime::parts, "RuntimePart bits this runtime provides.")
      .def_prop_ro(
          "workspace_bytes",
          [](const Runtime& r) -> int64_t { return r.workspace() ? r.workspace()->bytes() : 0; },
          "Bytes of the symmetric workspace reserved so far (0 before the first reservation).")
      .def("barrier", &Runtime::barrier, nb::arg("phase"), nb::call_guard<nb::gil_scoped_release>())
      .def("__repr__", [](const Runtime& r) { return "moe_ep.Runtime(" + r.bootstrap().str() + ")"; });
}

}  // namespace moe_ep::python
