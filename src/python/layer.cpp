// moe_ep.Layer: one MoE layer (include/moe_ep/layer.h) built from a moe_ep.WeightPack, with a
// DLPack forward. A CUDA forward runs on the given stream, else on torch's current stream of
// the layer's device (when torch is imported), else on the legacy default stream.
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>

#include "core/check.h"
#include "moe_ep/layer.h"
#include "python/bindings.h"
#include "python/tensor_args.h"

namespace nb = nanobind;

namespace moe_ep::python {
namespace {

struct PyLayer {
  std::shared_ptr<Runtime> runtime;
  std::unique_ptr<Layer> layer;
  bool on_cuda = false;
  int device_index = 0;
  // The forward uses fp32(topk_weights * routed_scaling_factor), the router's own last step
  // (include/moe_ep/router.h), so a model whose router leaves the factor out passes it here.
  float routed_scaling_factor = 1.0f;
};

// MOE_EP_CHECK_INPUTS=1: every forward runs the check_finite checks (a debug mode).
bool check_inputs_by_default() {
  static const bool on = [] {
    const char* v = std::getenv("MOE_EP_CHECK_INPUTS");
    return v != nullptr && *v != '\0' && std::string(v) != "0";
  }();
  return on;
}

// The tensors of a moe_ep.WeightPack (attributes format, w13, w13_scale, w13_global, w2,
// w2_scale, w2_global), imported for one library call.
struct ImportedWeights {
  std::optional<ImportedTensor> t[6];
  WeightPack pack;
};

void import_weights(nb::handle w, ImportedWeights& out) {
  static const char* const kNames[6] = {"w13", "w13_scale", "w13_global",
                                        "w2",  "w2_scale",  "w2_global"};
  if (!nb::hasattr(w, "format") || !nb::hasattr(w, "w13"))
    throw nb::type_error("moe_ep: weights must be a moe_ep.WeightPack (WeightPack.mxfp4/.nvfp4/.bf16)");
  out.pack.format = parse_weight_format(nb::cast<std::string>(nb::str(w.attr("format"))));
  TensorView* views[6] = {&out.pack.w13, &out.pack.w13_scale, &out.pack.w13_global,
                          &out.pack.w2,  &out.pack.w2_scale,  &out.pack.w2_global};
  for (int i = 0; i < 6; ++i) {
    out.t[i] = import_tensor(nb::getattr(w, kNames[i], nb::none()), kNames[i]);
    if (out.t[i]) *views[i] = out.t[i]->view;
  }
}

nb::dict layer_info(const PyLayer& self) {
  const LayerInfo& li = self.layer->info();
  const MoeDesc& d = li.desc;
  nb::dict r;
  r["implementation"] = li.implementation;
  r["device"] = li.device.str();
  r["recipe"] = std::string(recipe_name(d.recipe));
  r["num_experts"] = d.fleet.num_experts;
  r["num_local_experts"] = li.num_local_experts;
  r["hidden_size"] = d.fleet.hidden_size;
  r["intermediate_size"] = d.intermediate_size;
  r["top_k"] = d.top_k;
  r["max_tokens_per_rank"] = d.fleet.max_tokens_per_rank;
  r["activation_clamp"] = d.activation_clamp ? nb::cast(*d.activation_clamp) : nb::none();
  r["quantize_input"] = d.quantize_input;
  r["routed_scaling_factor"] = self.routed_scaling_factor;
  r["fast_math"] = d.numerics.fast_math;
  r["exact_accumulation"] = d.numerics.exact_accumulation;
  r["world_size"] = self.runtime->world_size();
  r["rank"] = self.runtime->rank();
  r["workspace_bytes"] = self.runtime->workspace() ? self.runtime->workspace()->bytes() : 0;
  nb::dict config, plan;
  for (const ConfigEntry& e : li.config.entries) config[e.key.c_str()] = e.value;
  for (const ConfigEntry& e : li.config.plan) plan[e.key.c_str()] = e.value;
  r["config"] = config;
  r["plan"] = plan;
  r["notes"] = li.notes;
  r["desc"] = d.str();
  return r;
}

void layer_init(PyLayer* self, std::shared_ptr<Runtime> runtime, int64_t num_experts,
                int64_t hidden_size, int64_t intermediate_size, int64_t top_k,
                int64_t max_tokens_per_rank, nb::handle weights, const std::string& recipe,
                std::optional<float> activation_clamp, bool fast_math, bool exact_accumulation,
                const std::string& gemm, const std::string& tile,
                std::optional<int64_t> decode_max_tokens, std::optional<bool> fold_fp8,
                std::optional<int> decode_split_k,
                std::optional<bool> fuse_quantize_route, std::optional<bool> one_token_layer,
                int num_threads, int64_t cpu_batch_tokens, nb::handle shared_w13,
                nb::handle shared_w2, float routed_scaling_factor) {
  if (!runtime) throw nb::type_error("moe_ep: runtime is None; expected moe_ep.Runtime.acquire(...)");
  MOE_EP_CHECK(std::isfinite(routed_scaling_factor) && routed_scaling_factor > 0.0f,
               "routed_scaling_factor = {}; expected a finite value > 0", routed_scaling_factor);
  MoeDesc desc;
  desc.fleet = {num_experts, max_tokens_per_rank, hidden_size};
  desc.recipe = parse_recipe(recipe, "recipe");
  desc.intermediate_size = intermediate_size;
  desc.top_k = top_k;
  desc.activation_clamp = activation_clamp;
  desc.numerics.fast_math = fast_math;
  desc.numerics.exact_accumulation = exact_accumulation;
  KernelOverrides ov;
  ov.gemm = parse_gemm_kernel(gemm, "gemm");
  ov.tile = parse_tile_shape(tile, "tile");
  ov.decode_max_tokens = decode_max_tokens;
  ov.fold_fp8 = fold_fp8;
  ov.decode_split_k = decode_split_k;
  ov.fuse_quantize_route = fuse_quantize_route;
  ov.one_token_layer = one_token_layer;
  ov.num_threads = num_threads;
  ov.cpu_batch_tokens = cpu_batch_tokens;
  ImportedWeights w;
  import_weights(weights, w);
  // The shared expert: Is from whichever of its tensors is given (the layer names a missing one).
  const std::optional<ImportedTensor> s13 = import_tensor(shared_w13, "shared_w13");
  const std::optional<ImportedTensor> s2 = import_tensor(shared_w2, "shared_w2");
  if (s13) w.pack.shared_w13 = s13->view;
  if (s2) w.pack.shared_w2 = s2->view;
  if (s13 && s13->view.ndim == 2) {
    // An odd row count is no [2Is, H]: name the tensor, not the Is it would round to.
    MOE_EP_CHECK_PARAM(s13->view.shape[0] % 2 == 0, "shared_w13",
                       "shared_w13 has {} rows; expected [2Is, H]: an even number of rows (gate rows, then up rows)",
                       s13->view.shape[0]);
    desc.shared_intermediate_size = s13->view.shape[0] / 2;
  }
  else if (s2 && s2->view.ndim == 2)
    desc.shared_intermediate_size = s2->view.shape[1];
  std::unique_ptr<Layer> layer;
  {
    nb::gil_scoped_release release;
    layer = Layer::create(runtime, desc, w.pack, ov);
  }
  const Device dev = runtime->device();
  new (self) PyLayer{std::move(runtime), std::move(layer), dev.type == DeviceType::kCUDA, dev.index,
                     routed_scaling_factor};
}

nb::object layer_forward(PyLayer& self, nb::handle x, nb::handle topk_ids, nb::handle topk_weights,
                         nb::handle out, std::optional<uintptr_t> stream, bool check_finite) {
  ImportedTensor tx = import_required(x, "x");
  ImportedTensor tids = import_required(topk_ids, "topk_ids");
  ImportedTensor tw = import_required(topk_weights, "topk_weights");
  if (check_finite || check_inputs_by_default())  // names the first bad element (python/moe_ep/_checks.py)
    nb::module_::import_("moe_ep._checks").attr("check_forward_inputs")(x, topk_ids, topk_weights);
  // routed_scaling_factor: host weights are scaled here; device ones by their framework's
  // multiply on its current stream (capturable in a CUDA graph).
  std::vector<float> scaled_host;
  nb::object scaled_device;
  if (self.routed_scaling_factor != 1.0f) {
    const TensorView& v = tw.view;
    if (v.device.type == DeviceType::kCPU && v.dtype == DType::kF32 && v.is_contiguous()) {
      scaled_host.resize(static_cast<size_t>(v.numel()));
      const float* src = static_cast<const float*>(v.data);
      for (size_t i = 0; i < scaled_host.size(); ++i) scaled_host[i] = src[i] * self.routed_scaling_factor;
      tw.view.data = scaled_host.data();
    } else if (v.device.type != DeviceType::kCPU && v.dtype == DType::kF32) {
      scaled_device = nb::borrow(topk_weights) * nb::float_(self.routed_scaling_factor);
      tw = import_required(scaled_device, "topk_weights");
    }  // anything else: the library refuses it as it is
  }
  nb::object y = nb::borrow(out);
  if (y.is_none()) {
    // y has x's shape, dtype and device.
    y = nb::hasattr(x, "new_empty") ? x.attr("new_empty")(x.attr("shape"))
                                    : nb::module_::import_("numpy").attr("empty_like")(x);
  }
  ImportedTensor ty = import_required(y, "out", /*writable=*/true);
  ForwardArgs args;
  args.x = tx.view;
  args.topk_ids = tids.view;
  args.topk_weights = tw.view;
  args.y = ty.view;
  if (self.on_cuda) args.stream = call_stream(stream, x, self.device_index);
  {
    nb::gil_scoped_release release;
    self.layer->forward(args);
  }
  return y;
}

}  // namespace

void bind_layer(nb::module_& m) {
  nb::class_<PyLayer>(m, "Layer",
                      "One MoE layer: dispatch -> GEMM 1 -> clamped SwiGLU -> GEMM 2 -> combine "
                      "(docs/spec.md). Weights are copied/converted at construction.")
      .def("__init__", &layer_init, nb::arg("runtime"), nb::kw_only(), nb::arg("num_experts"),
           nb::arg("hidden_size"), nb::arg("intermediate_size"), nb::arg("top_k"),
           nb::arg("max_tokens_per_rank"), nb::arg("weights"), nb::arg("recipe") = "mxfp4",
           nb::arg("activation_clamp") = nb::none(), nb::arg("fast_math") = false,
           nb::arg("exact_accumulation") = false, nb::arg("gemm") = "auto",
           nb::arg("tile") = "auto", nb::arg("decode_max_tokens") = nb::none(),
           nb::arg("fold_fp8") = nb::none(),
           nb::arg("decode_split_k") = nb::none(), nb::arg("fuse_quantize_route") = nb::none(),
           nb::arg("one_token_layer") = nb::none(), nb::arg("num_threads") = 0,
           nb::arg("cpu_batch_tokens") = 0, nb::arg("shared_w13") = nb::none(),
           nb::arg("shared_w2") = nb::none(), nb::arg("routed_scaling_factor") = 1.0f,
           "Build a layer on `runtime` from a moe_ep.WeightPack. recipe: 'mxfp4' | 'nvfp4'; "
           "activation_clamp: None (+inf) or a finite value >= 0; gemm/tile/decode_max_tokens/"
           "fold_fp8/decode_split_k/fuse_quantize_route/one_token_layer/num_threads/cpu_batch_tokens "
           "pin kernel "
           "choices (KernelOverrides). "
           "shared_w13 bf16 [2Is, H] / shared_w2 bf16 [H, Is]: a shared expert every token passes, "
           "added to y in the layer's combine (on GPUs it runs beside the routed experts). "
           "routed_scaling_factor: the routed experts' weights are fp32(topk_weights * factor) "
           "(DeepSeek's routed_scaling_factor, for a router that leaves it out; the shared expert "
           "is not scaled).")
      .def("forward", &layer_forward, nb::arg("x"), nb::arg("topk_ids"), nb::arg("topk_weights"),
           nb::arg("out") = nb::none(), nb::arg("stream") = nb::none(), nb::arg("check_finite") = false,
           "y = layer(x bf16 [T, H], topk_ids int32|int64 [T, K] (-1 skips), topk_weights f32 "
           "[T, K]); written into `out` (bf16 [T, H]) when given, else a new array like x. "
           "Tensors: torch (CPU/CUDA) or numpy (CPU), contiguous, on the layer's device. CUDA: "
           "runs on `stream` (a cudaStream_t as int), by default torch's current stream. For speed "
           "the forward does not read values: NaN / Inf in x or topk_weights propagate and a "
           "repeated expert id in a row counts twice; check_finite=True (or MOE_EP_CHECK_INPUTS=1 "
           "for every forward) refuses them first with a ValueError naming the first bad element "
           "(it reads the tensors: a host sync, not capturable in a CUDA graph).")
      .def("info", &layer_info, "The descriptor, implementation, selected config and plan.")
      .def(
          "read_error_flags",
          [](PyLayer& s, bool clear) { return s.layer->read_error_flags(clear); },
          nb::arg("clear") = true, "Sticky device-side error bits (synchronizes with the device).")
      .def(
          "check_error_flags", [](PyLayer& s) { s.layer->check_error_flags(); },
          "Raises DeviceError naming each raised flag; clears them.")
      .def(
          "replace_expert_weights",
          [](PyLayer& s, int64_t physical_expert, nb::handle weights) {
            ImportedWeights w;
            import_weights(weights, w);
            nb::gil_scoped_release release;
            s.layer->replace_expert_weights(physical_expert, w.pack);
          },
          nb::arg("physical_expert"), nb::arg("weights"),
          "Replace one physical expert's weights in place (EPLB); a WeightPack of one expert.")
      .def(
          "_host_time_forward",
          [](PyLayer& s, nb::handle x, nb::handle ids, nb::handle w, nb::handle out, int iters) {
            // moe_ep.bench: host seconds of `iters` library forwards with the arguments imported
            // once (no Python per call); the baseline of the binding's call overhead.
            ImportedTensor tx = import_required(x, "x"), ti = import_required(ids, "topk_ids"),
                           tw = import_required(w, "topk_weights"), ty = import_required(out, "out", true);
            ForwardArgs args{.x = tx.view, .topk_ids = ti.view, .topk_weights = tw.view, .y = ty.view};
            if (s.on_cuda) args.stream = torch_current_stream(s.device_index);
            nb::gil_scoped_release release;
            const auto t0 = std::chrono::steady_clock::now();
            for (int i = 0; i < iters; ++i) s.layer->forward(args);
            return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
          },
          nb::arg("x"), nb::arg("topk_ids"), nb::arg("topk_weights"), nb::arg("out"), nb::arg("iters"))
      .def_prop_ro("runtime", [](const PyLayer& s) { return s.runtime; })
      .def_prop_ro("device", [](const PyLayer& s) { return s.layer->info().device.str(); });
}

}  // namespace moe_ep::python
