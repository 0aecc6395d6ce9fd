// moe_ep._load_checkpoint_layer: one MoE layer of a safetensors checkpoint
// (include/moe_ep/checkpoint.h) as numpy arrays over the loaded layer's buffers (read-only; they
// keep the layer and the file mapping alive), with its router tables and config facts;
// python/moe_ep/checkpoint.py builds the Layer and the router from them.
#include <cmath>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "core/check.h"
#include "moe_ep/checkpoint.h"
#include "python/bindings.h"

namespace nb = nanobind;

namespace moe_ep::python {
namespace {

// A read-only numpy array over `data` (element type T), owned by the capsule of `layer`.
template <class T>
nb::object array(const std::shared_ptr<const CheckpointLayer>& layer, const void* data,
                 std::vector<size_t> shape) {
  if (data == nullptr) return nb::none();
  auto* keep = new std::shared_ptr<const CheckpointLayer>(layer);
  nb::capsule owner(keep, [](void* p) noexcept { delete static_cast<std::shared_ptr<const CheckpointLayer>*>(p); });
  return nb::cast(nb::ndarray<nb::numpy, const T>(data, shape.size(), shape.data(), owner));
}

std::vector<size_t> dims(const TensorView& t) {
  std::vector<size_t> d;
  for (int32_t i = 0; i < t.ndim; ++i) d.push_back(static_cast<size_t>(t.shape[i]));
  return d;
}

// A pack tensor as numpy: packed e2m1 and scales as uint8, bf16 as uint16 (viewed as bfloat16 by
// the package), globals as float32.
nb::object pack_array(const std::shared_ptr<const CheckpointLayer>& layer, const TensorView& t) {
  if (!t.defined()) return nb::none();
  switch (t.dtype) {
    case DType::kBF16: return array<uint16_t>(layer, t.data, dims(t));
    case DType::kF32: return array<float>(layer, t.data, dims(t));
    default: return array<uint8_t>(layer, t.data, dims(t));
  }
}

nb::dict load_layer(const std::string& path, std::optional<int64_t> layer_idx, const std::string& layout,
                    const std::string& tensor_pattern, const std::vector<std::string>& proj_names,
                    bool shared_expert, int64_t first_expert, int64_t num_experts, int num_threads) {
  std::shared_ptr<const CheckpointLayer> layer;
  std::shared_ptr<const Checkpoint> ck;
  LayerLoadOptions o;
  o.layout = layout;
  o.tensor_pattern = tensor_pattern;
  o.proj_names = proj_names;
  o.shared_expert = shared_expert;
  o.first_expert = first_expert;
  o.num_experts = num_experts;
  o.num_threads = num_threads;
  std::vector<int64_t> found;
  {
    nb::gil_scoped_release release;
    ck = Checkpoint::open(path);
    found = find_moe_layers(*ck, o);
    int64_t idx = layer_idx.value_or(-1);
    if (idx < 0) {
      MOE_EP_CHECK(!found.empty(), "checkpoint '{}': no MoE layer found (layout {}{}); give layout= "
                   "or tensor_pattern= (moe_ep inspect lists the expert-like tensors it holds)",
                   path, layout, tensor_pattern.empty() ? "" : ", tensor pattern " + tensor_pattern);
      idx = found.front();
    }
    layer = load_checkpoint_layer(ck, idx, o);
  }
  const CheckpointLayer& l = *layer;
  const WeightPack p = l.pack();
  nb::dict d;
  d["layer"] = l.layer_idx;
  d["moe_layers"] = found;
  d["format"] = std::string(weight_format_name(l.format));
  d["layout"] = l.layout;
  d["tensor_pattern"] = l.tensor_pattern;
  d["num_experts"] = l.num_experts;
  d["total_experts"] = l.total_experts;
  d["first_expert"] = l.first_expert;
  d["hidden_size"] = l.hidden_size;
  d["intermediate_size"] = l.intermediate_size;
  d["notes"] = l.notes;
  d["checkpoint_bytes"] = l.stats.checkpoint_bytes;
  d["load_seconds"] = l.stats.seconds;
  d["w13"] = pack_array(layer, p.w13);
  d["w13_scale"] = pack_array(layer, p.w13_scale);
  d["w13_global"] = pack_array(layer, p.w13_global);
  d["w2"] = pack_array(layer, p.w2);
  d["w2_scale"] = pack_array(layer, p.w2_scale);
  d["w2_global"] = pack_array(layer, p.w2_global);
  const auto H = static_cast<size_t>(l.hidden_size), Is = static_cast<size_t>(l.shared_intermediate_size);
  d["shared_intermediate_size"] = l.shared_intermediate_size;
  d["shared_source"] = l.shared_source;
  d["shared_w13"] = l.shared_w13.empty() ? nb::none() : array<uint16_t>(layer, l.shared_w13.data(), {2 * Is, H});
  d["shared_w2"] = l.shared_w2.empty() ? nb::none() : array<uint16_t>(layer, l.shared_w2.data(), {H, Is});

  const CheckpointRouter& r = l.router;
  const auto E = static_cast<size_t>(r.num_experts);
  nb::dict router;
  router["weight"] = r.weight.empty() ? nb::none() : array<float>(layer, r.weight.data(), {E, H});
  router["bias"] = r.bias.empty() ? nb::none() : array<float>(layer, r.bias.data(), {E});
  router["hash_table"] = r.hash_table.empty() ? nb::none()
                                              : array<int32_t>(layer, r.hash_table.data(),
                                                               {static_cast<size_t>(r.vocab_size),
                                                                static_cast<size_t>(r.hash_top_k)});
  router["routed_scaling_factor"] = r.routed_scaling_factor;
  router["scoring_func"] = r.scoring_func;
  router["weight_name"] = r.weight_name;
  router["bias_name"] = r.bias_name;
  router["hash_table_name"] = r.hash_table_name;
  d["router"] = router;

  const auto& c = ck->config();
  nb::dict config;
  if (c) {
    config["source"] = c->source;
    config["model_type"] = c->model_type;
    config["num_experts_per_tok"] = c->num_experts_per_tok;
    config["routed_scaling_factor"] = c->routed_scaling_factor;
    config["swiglu_limit"] = c->swiglu_limit ? nb::cast(*c->swiglu_limit) : nb::none();
    nb::list ignored;
    for (const ModelConfig::IgnoredKey& k : c->ignored) {
      nb::dict e;
      e["key"] = k.key;
      e["value"] = k.value;
      e["reason"] = k.reason;
      ignored.append(e);
    }
    config["ignored_keys"] = ignored;
    // Why the library's router does not compute this layer's router ("" when it does).
    router["unsupported_reason"] = r.unsupported_reason(c->num_experts_per_tok, c->model_type);
  } else {
    router["unsupported_reason"] = r.present() ? std::string("the checkpoint has no config.json (scoring_func, "
                                                             "routed_scaling_factor)")
                                               : r.unsupported_reason(0, "");
  }
  d["config"] = c ? nb::object(config) : nb::none();
  return d;
}

}  // namespace

void bind_checkpoint(nb::module_& m) {
  m.def("_load_checkpoint_layer", &load_layer, nb::arg("path"), nb::arg("layer").none(),
        nb::arg("layout") = "auto", nb::arg("tensor_pattern") = "",
        nb::arg("proj_names") = std::vector<std::string>{}, nb::arg("shared_expert") = true,
        nb::arg("first_expert") = 0, nb::arg("num_experts") = -1, nb::arg("num_threads") = 0,
        "One MoE layer of a safetensors checkpoint as read-only numpy arrays with its router "
        "tables and config facts (use moe_ep.load_layer).");
  m.def(
      "_known_checkpoint_layouts",
      [] {
        nb::list out;
        for (const CheckpointLayoutInfo& l : known_checkpoint_layouts()) {
          nb::dict e;
          e["name"] = l.name;
          e["pattern"] = l.pattern;
          e["proj_names"] = l.proj_names;
          e["origin"] = l.origin;
          out.append(e);
        }
        return out;
      },
      "The checkpoint layouts the loader recognizes.");
}

}  // namespace moe_ep::python
