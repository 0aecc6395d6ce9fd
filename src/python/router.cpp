// moe_ep._route_deepseek_v4 (the DeepSeek V4 router on host tensors) and moe_ep.RoutingStage
// (include/moe_ep/routing_stage.h: the router or hash table, the EPLB remap and the load counters
// on the stage's device; on CUDA one kernel on the stream, capturable in a CUDA graph).
// python/moe_ep/router.py allocates outputs and picks the path.
#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <memory>

#include "moe_ep/router.h"
#include "moe_ep/routing_stage.h"
#include "python/bindings.h"
#include "python/tensor_args.h"

namespace nb = nanobind;

namespace moe_ep::python {
namespace {

// A host integer array [n] or [rows, cols] read into int32 values, named in errors.
std::vector<int32_t> host_ints(nb::handle obj, const char* name, int ndim, int64_t* rows, int64_t* cols) {
  ImportedTensor t = import_required(obj, name);
  const TensorView& v = t.view;
  if (v.device.type != DeviceType::kCPU || v.ndim != ndim || !v.is_contiguous() ||
      (v.dtype != DType::kI32 && v.dtype != DType::kI64))
    throw nb::value_error(("moe_ep: " + std::string(name) + " must be a contiguous host int32 | int64 array of " +
                           std::to_string(ndim) + " dimensions; got " + std::string(dtype_name(v.dtype)) + " " +
                           v.shape_str() + " on " + v.device.str())
                              .c_str());
  std::vector<int32_t> out(v.numel());
  for (int64_t i = 0; i < v.numel(); ++i)
    out[i] = v.dtype == DType::kI32 ? v.ptr<const int32_t>()[i] : static_cast<int32_t>(v.ptr<const int64_t>()[i]);
  *rows = v.shape[0];
  if (cols) *cols = ndim == 2 ? v.shape[1] : 1;
  return out;
}

// The placement of `logical_to_physical` [L, R] (-1 padded) and `replica_count` [L].
EplbPlacement placement_of(nb::handle l2p, nb::handle counts) {
  EplbPlacement p;
  int64_t rows = 0, cols = 0, n = 0;
  p.logical_to_physical = host_ints(l2p, "logical_to_physical", 2, &rows, &cols);
  p.replica_count = host_ints(counts, "replica_count", 1, &n, nullptr);
  p.num_logical = rows;
  p.max_replicas = cols;
  int32_t top = -1;
  for (int32_t v : p.logical_to_physical) top = std::max(top, v);
  p.num_physical = top + 1;
  return p;  // checked by the library (check_eplb_placement)
}

struct PyRoutingStage {
  std::unique_ptr<RoutingStage> stage;
};

void route(PyRoutingStage& self, nb::handle topk_ids, nb::handle logits, nb::handle topk_weights,
           int64_t layer_idx, nb::handle bias, nb::handle token_ids, nb::handle hash_table,
           nb::handle logical_ids, std::optional<uintptr_t> stream) {
  RoutingArgs a;
  a.layer_idx = layer_idx;
  ImportedTensor ids = import_required(topk_ids, "topk_ids", true);
  std::optional<ImportedTensor> tl = import_tensor(logits, "logits");
  std::optional<ImportedTensor> tw = import_tensor(topk_weights, "topk_weights", true);
  std::optional<ImportedTensor> tb = import_tensor(bias, "bias");
  std::optional<ImportedTensor> tt = import_tensor(token_ids, "token_ids");
  std::optional<ImportedTensor> th = import_tensor(hash_table, "hash_table");
  std::optional<ImportedTensor> tg = import_tensor(logical_ids, "logical_ids");
  a.topk_ids = ids.view;
  if (tl) a.logits = tl->view;
  if (tw) a.topk_weights = tw->view;
  if (tb) a.bias = tb->view;
  if (tt) a.token_ids = tt->view;
  if (th) a.hash_table = th->view;
  if (tg) a.logical_ids = tg->view;
  const Device dev = self.stage->options().device;
  if (dev.type == DeviceType::kCUDA) a.stream = call_stream(stream, topk_ids, dev.index);
  nb::gil_scoped_release release;
  self.stage->route(a);
}

}  // namespace

void bind_router(nb::module_& m) {
  m.def(
      "_route_deepseek_v4",
      [](nb::handle logits, nb::handle topk_ids, nb::handle topk_weights, int64_t top_k,
         float routed_scaling_factor, int64_t num_hash_layers, int64_t layer_idx, nb::handle bias,
         nb::handle token_ids, nb::handle hash_table) {
        RouterConfig config;
        ImportedTensor tl = import_required(logits, "logits");
        config.num_experts = tl.view.ndim == 2 ? tl.view.shape[1] : 0;
        config.top_k = top_k;
        config.routed_scaling_factor = routed_scaling_factor;
        config.num_hash_layers = num_hash_layers;
        ImportedTensor ti = import_required(topk_ids, "topk_ids", true);
        ImportedTensor tw = import_required(topk_weights, "topk_weights", true);
        std::optional<ImportedTensor> tb = import_tensor(bias, "bias");
        std::optional<ImportedTensor> tt = import_tensor(token_ids, "token_ids");
        std::optional<ImportedTensor> th = import_tensor(hash_table, "hash_table");
        RouterArgs args;
        args.layer_idx = layer_idx;
        args.logits = tl.view;
        if (tb) args.bias = tb->view;
        if (tt) args.token_ids = tt->view;
        if (th) args.hash_table = th->view;
        args.topk_ids = ti.view;
        args.topk_weights = tw.view;
        nb::gil_scoped_release release;
        check_router_config(config);
        route_deepseek_v4(config, args);
      },
      nb::arg("logits"), nb::arg("topk_ids"), nb::arg("topk_weights"), nb::arg("top_k"),
      nb::arg("routed_scaling_factor"), nb::arg("num_hash_layers"), nb::arg("layer_idx"),
      nb::arg("bias").none(), nb::arg("token_ids").none(), nb::arg("hash_table").none(),
      "The DeepSeek V4 router on host tensors, into topk_ids / topk_weights (use "
      "moe_ep.route_deepseek_v4).");

  nb::class_<PyRoutingStage>(m, "RoutingStage",
                             "The routing stage before a layer: the DeepSeek V4 router (or a hash "
                             "layer's table) and / or the EPLB remap with load counters, on one "
                             "device. On CUDA: one kernel on the stream, no host sync, capturable "
                             "in a CUDA graph; bad device data sets -1 slots and a sticky flag "
                             "(check_error_flags). Results are bitwise those of "
                             "moe_ep.route_deepseek_v4 followed by the EPLB remap.")
      .def(
          "__init__",
          [](PyRoutingStage* self, const std::string& device, int64_t num_logical, int64_t top_k, bool router,
             float routed_scaling_factor, int64_t num_hash_layers, nb::handle logical_to_physical,
             nb::handle replica_count, int64_t max_replicas) {
            RoutingStageOptions o;
            o.device = parse_device(device);
            o.num_logical = num_logical;
            o.top_k = top_k;
            if (router) o.router = RouterConfig{num_logical, top_k, routed_scaling_factor, num_hash_layers};
            if (!logical_to_physical.is_none() || !replica_count.is_none())
              o.placement = placement_of(logical_to_physical, replica_count);
            o.max_replicas = max_replicas;
            new (self) PyRoutingStage{RoutingStage::create(o)};
          },
          nb::arg("device"), nb::arg("num_logical"), nb::arg("top_k"), nb::kw_only(), nb::arg("router") = true,
          nb::arg("routed_scaling_factor") = 1.0f, nb::arg("num_hash_layers") = 0,
          nb::arg("logical_to_physical") = nb::none(), nb::arg("replica_count") = nb::none(),
          nb::arg("max_replicas") = 0,
          "device 'cpu' | 'cuda[:N]'; router=False: remap only (route(logical_ids=...)); a placement "
          "is logical_to_physical int [L, R] (-1 padded) with replica_count int [L], host arrays.")
      .def("route", &route, nb::arg("topk_ids"), nb::arg("logits") = nb::none(), nb::kw_only(),
           nb::arg("topk_weights") = nb::none(), nb::arg("layer_idx") = 0, nb::arg("bias") = nb::none(),
           nb::arg("token_ids") = nb::none(), nb::arg("hash_table") = nb::none(),
           nb::arg("logical_ids") = nb::none(), nb::arg("stream") = nb::none(),
           "Writes topk_ids [T, K] (and topk_weights [T, K] with a router) from logits [T, L] (or "
           "logical_ids [T, K] for a remap-only stage). CUDA: on `stream` (a cudaStream_t as int), "
           "by default the tensors' framework's current stream.")
      .def("set_placement",
           [](PyRoutingStage& self, nb::handle l2p, nb::handle counts) {
             EplbPlacement p = placement_of(l2p, counts);
             nb::gil_scoped_release release;
             self.stage->set_placement(p);
           },
           nb::arg("logical_to_physical"), nb::arg("replica_count"),
           "A new placement of the same L and E, between calls (synchronizes the device); a "
           "captured graph follows it.")
      .def("set_recording", [](PyRoutingStage& self, bool on) { self.stage->set_recording(on); }, nb::arg("on"))
      .def("counter_values", [](PyRoutingStage& self) { return self.stage->counter_values(); })
      .def("reset_counters", [](PyRoutingStage& self) { self.stage->reset_counters(); })
      .def("read_error_flags", [](PyRoutingStage& self, bool clear) { return self.stage->read_error_flags(clear); },
           nb::arg("clear") = true)
      .def("check_error_flags", [](PyRoutingStage& self) { self.stage->check_error_flags(); })
      .def_prop_ro("device", [](PyRoutingStage& self) { return self.stage->options().device.str(); })
      .def_prop_ro("num_logical", [](PyRoutingStage& self) { return self.stage->options().num_logical; })
      .def_prop_ro("num_physical", [](PyRoutingStage& self) { return self.stage->num_physical(); })
      .def_prop_ro("top_k", [](PyRoutingStage& self) { return self.stage->options().top_k; })
      .def_prop_ro("has_router", [](PyRoutingStage& self) { return self.stage->has_router(); })
      .def_prop_ro("has_placement", [](PyRoutingStage& self) { return self.stage->has_placement(); });
}

}  // namespace moe_ep::python
