#include "cli/checkpoint_problem.h"

#include <algorithm>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>

#include <fmt/format.h>

#include "core/check.h"
#include "moe_ep/checkpoint.h"
#include "moe_ep/quant.h"

namespace moe_ep::cli {
namespace {

// A ProblemSetup points at a Preset; a checkpoint layer gets one of its own, kept (with the
// loaded layer until its weights are taken) for the life of the process.
struct CheckpointPreset {
  std::string name, description;
  testing::Preset preset{};
  std::unique_ptr<CheckpointLayer> layer;
  Json info;
};

std::deque<CheckpointPreset>& registry() {
  static std::deque<CheckpointPreset> entries;
  return entries;
}
std::mutex registry_mutex;

CheckpointPreset* find_entry(const ProblemSetup& setup) {
  std::lock_guard<std::mutex> lock(registry_mutex);
  for (CheckpointPreset& e : registry())
    if (&e.preset == setup.preset) return &e;
  return nullptr;
}

template <class T>
std::vector<T> copy_view(const TensorView& t) {
  std::vector<T> out(static_cast<size_t>(t.numel()));
  if (!out.empty()) std::memcpy(out.data(), t.data, static_cast<size_t>(t.nbytes()));
  return out;
}

}  // namespace

void add_checkpoint_run_options(CLI::App& cmd, CheckpointRunOptions& o) {
  o.command = &cmd;
  const std::string group = "Checkpoint (instead of synthetic weights)";
  cmd.add_option("--checkpoint", o.path,
                 "safetensors checkpoint (a directory with config.json and model.safetensors or an "
                 "index of shards, or one .safetensors file): run one of its MoE layers")
      ->group(group);
  cmd.add_option("--layer", o.layer, "--checkpoint: the layer to run (default: the first MoE layer)")
      ->check(integer_at_least(0))->group(group);
  cmd.add_option("--layout", o.layout, "--checkpoint: expert tensors per-expert, fused, or auto")
      ->check(CLI::IsMember({"auto", "per-expert", "fused"}))->capture_default_str()->group(group);
  cmd.add_option("--tensor-pattern", o.tensor_pattern,
                 "--checkpoint: name of the expert weight tensors with {L}, {proj} and (per expert) "
                 "{e}, e.g. model.layers.{L}.block_sparse_moe.experts.{e}.{proj}.weight")
      ->group(group);
  cmd.add_option("--proj-names", o.proj_names,
                 "--checkpoint: the {proj} names: gate,up,down (per expert) or w13,w2 (fused)")
      ->delimiter(',')->group(group);
  cmd.add_option("--top-k", o.top_k, "--checkpoint: K (default: num_experts_per_tok of config.json)")
      ->check(integer_at_least(1))->group(group);
}

void check_checkpoint_flags(const CheckpointRunOptions& o) {
  if (!o.command) return;
  if (o.given()) {
    MOE_EP_CHECK(o.command->count("--preset") == 0, "--preset with --checkpoint {}: the "
                 "checkpoint gives the shapes; drop --preset", o.path);
    return;
  }
  for (const char* flag : {"--layer", "--layout", "--tensor-pattern", "--proj-names", "--top-k"})
    MOE_EP_CHECK(o.command->count(flag) == 0, "{} is a checkpoint flag; it needs --checkpoint DIR",
                 flag);
}

void refuse_checkpoint_expert_parallel(const CheckpointRunOptions& o, bool expert_parallel) {
  MOE_EP_CHECK_CODE(!o.given() || !expert_parallel, ErrorCode::kUnsupported,
                    "--checkpoint runs one layer on one rank; it cannot be combined with --ranks, "
                    "--layers, --eplb-redundant, --router or GPU ranks yet");
}

ProblemSetup plan_checkpoint_problem(const ProblemOptions& problem, const CheckpointRunOptions& o,
                                     int64_t max_num_tokens, int world_size) {
  MOE_EP_ASSERT(o.given());
  auto ck = Checkpoint::open(o.path);
  const auto& config = ck->config();
  LayerLoadOptions load;
  load.layout = o.layout;
  load.tensor_pattern = o.tensor_pattern;
  load.proj_names = o.proj_names;
  load.num_threads = problem.threads;
  int64_t layer_idx = o.layer;
  if (layer_idx < 0) {
    const std::vector<int64_t> layers = find_moe_layers(*ck, load);
    MOE_EP_CHECK(!layers.empty(), "--checkpoint {}: no MoE layer found (layout {}{}); give "
                 "--tensor-pattern", o.path, o.layout,
                 o.tensor_pattern.empty() ? "" : ", pattern " + o.tensor_pattern);
    layer_idx = layers.front();
  }
  const int64_t top_k = o.top_k > 0 ? o.top_k : (config ? config->num_experts_per_tok : 0);
  MOE_EP_CHECK(top_k > 0, "--checkpoint {} has no config.json: give --top-k", o.path);
  std::unique_ptr<CheckpointLayer> layer = load_checkpoint_layer(ck, layer_idx, load);

  const bool backend_given = o.command && o.command->count("--backend") > 0;
  ProblemOptions options = problem;
  if (!backend_given) options.backend = layer->format == WeightFormat::kNVFP4 ? "nvfp4" : "mxfp4";
  const std::string format = std::string(weight_format_name(layer->format));
  MOE_EP_CHECK(problem.weights == "native" || problem.weights == format,
               "--weights {} with --checkpoint: the weights are the checkpoint's ({})",
               problem.weights, format);
  options.weights = format;

  // The layer's shapes as a preset of its own, planned by plan_problem's checks (family, weight
  // format, device, implementation, shapes); --activation-clamp beats config.json's swiglu_limit.
  std::lock_guard<std::mutex> lock(registry_mutex);
  CheckpointPreset& entry = registry().emplace_back();
  entry.name = fmt::format("checkpoint-layer-{}", layer_idx);
  entry.description = fmt::format("{} layer {}", o.path, layer_idx);
  const float clamp = config && config->swiglu_limit ? *config->swiglu_limit : INFINITY;
  entry.preset = {entry.name, entry.description, layer->hidden_size, layer->intermediate_size,
                  layer->num_experts, top_k, clamp,
                  static_cast<int>(config ? config->num_hidden_layers : 0),
                  config ? config->routed_scaling_factor : 1.0f, 256};
  ProblemSetup s;
  try {
    s = plan_problem(entry.preset, options, max_num_tokens, world_size);
    // The layer's shared expert runs inside the layer (MoeDesc::shared_intermediate_size).
    if (!layer->shared_w13.empty()) s.desc.shared_intermediate_size = layer->shared_intermediate_size;
    validate_desc(s.desc, world_size);
  } catch (...) {
    registry().pop_back();
    throw;
  }

  std::string notes;
  for (const std::string& n : layer->notes) notes += (notes.empty() ? "" : "\n") + n;
  entry.info = {{"path", o.path},
                {"layer", layer_idx},
                {"format", format},
                {"layout", layer->layout},
                {"tensor_pattern", layer->tensor_pattern},
                {"experts", layer->num_experts},
                {"checkpoint_bytes", layer->stats.checkpoint_bytes},
                {"load_ms", json_number(layer->stats.seconds * 1e3)},
                {"load_gbps", json_number(layer->stats.gbps())},
                {"load_threads", layer->stats.num_threads},
                {"router", !layer->router_weight.empty()},
                {"shared_intermediate", layer->shared_intermediate_size},
                {"notes", notes}};
  entry.layer = std::move(layer);
  return s;
}

testing::HostWeights checkpoint_weights(const ProblemSetup& setup) {
  CheckpointPreset* entry = find_entry(setup);
  MOE_EP_ASSERT(entry != nullptr && entry->layer != nullptr);
  const CheckpointLayer& layer = *entry->layer;
  const WeightPack p = layer.pack();
  testing::HostWeights w;
  w.format = layer.format;
  w.num_slots = layer.num_experts;
  w.hidden_size = layer.hidden_size;
  w.intermediate_size = layer.intermediate_size;
  w.w13 = copy_view<uint8_t>(p.w13);
  w.w13_scale = copy_view<uint8_t>(p.w13_scale);
  w.w2 = copy_view<uint8_t>(p.w2);
  w.w2_scale = copy_view<uint8_t>(p.w2_scale);
  if (layer.format == WeightFormat::kNVFP4) {
    w.w13_global = copy_view<float>(p.w13_global);
    w.w2_global = copy_view<float>(p.w2_global);
  }
  if (setup.desc.shared_intermediate_size > 0)
    w.shared = testing::SharedExpertWeights{layer.hidden_size, layer.shared_intermediate_size, layer.shared_w13,
                                            layer.shared_w2};
  entry->layer.reset();
  return w;
}

WeightPack checkpoint_pack(const ProblemSetup& setup) {
  CheckpointPreset* entry = find_entry(setup);
  MOE_EP_ASSERT(entry != nullptr && entry->layer != nullptr);
  return setup.desc.shared_intermediate_size > 0 ? entry->layer->with_shared_expert() : entry->layer->pack();
}

double checkpoint_load_seconds(const ProblemSetup& setup) {
  CheckpointPreset* entry = find_entry(setup);
  MOE_EP_ASSERT(entry != nullptr && entry->layer != nullptr);
  return entry->layer->stats.seconds;
}

void release_checkpoint(const ProblemSetup& setup) {
  if (CheckpointPreset* entry = find_entry(setup)) entry->layer.reset();
}

void print_checkpoint_summary(const ProblemSetup& setup) {
  const CheckpointPreset* entry = find_entry(setup);
  if (!entry) return;
  const Json& j = entry->info;
  fmt::print("  checkpoint: {} layer {}: {} {} ('{}'), {} experts; {:.1f} MB of checkpoint "
             "tensors loaded in {:.1f} ms ({:.2f} GB/s, {} threads){}{}\n",
             j["path"].get<std::string>(), j["layer"].get<int64_t>(), j["format"].get<std::string>(),
             j["layout"].get<std::string>(), j["tensor_pattern"].get<std::string>(),
             j["experts"].get<int64_t>(), j["checkpoint_bytes"].get<int64_t>() / 1e6,
             j["load_ms"].get<double>(), j["load_gbps"].get<double>(), j["load_threads"].get<int>(),
             j["router"].get<bool>() ? ", router present" : "",
             j["shared_intermediate"].get<int64_t>() > 0
                 ? fmt::format(", shared expert Is = {} (run inside the layer)", j["shared_intermediate"].get<int64_t>())
                 : std::string());
}

void add_checkpoint_json(const ProblemSetup& setup, Json& json) {
  if (const CheckpointPreset* entry = find_entry(setup)) json["checkpoint"] = entry->info;
}

}  // namespace moe_ep::cli
