#include "cli/checkpoint_problem.h"

#include <algorithm>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <random>

#include <fmt/format.h>

#include "core/check.h"
#include "moe_ep/checkpoint.h"
#include "moe_ep/formats.h"
#include "moe_ep/quant.h"
#include "moe_ep/router.h"

namespace moe_ep::cli {
namespace {

// A ProblemSetup points at a Preset; a checkpoint layer gets one of its own, kept (with the
// loaded layer until its weights are taken) for the life of the process.
struct CheckpointPreset {
  std::string name, description;
  testing::Preset preset{};
  std::unique_ptr<CheckpointLayer> layer;
  CheckpointRouter router;  // kept when the layer's weights are taken
  std::string model_type;   // config.json's, for the router's scoring function
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
  if (!t.defined()) return {};  // a bf16 pack has no scales
  std::vector<T> out(static_cast<size_t>(t.nbytes()) / sizeof(T));  // bf16 weights as bytes
  if (!out.empty()) std::memcpy(out.data(), t.data, static_cast<size_t>(t.nbytes()));
  return out;
}

}  // namespace

std::vector<std::string> checkpoint_layout_choices() {
  std::vector<std::string> names = {"auto"};
  for (const CheckpointLayoutInfo& l : known_checkpoint_layouts()) names.push_back(l.name);
  return names;
}

std::string checkpoint_layout_list() {
  std::string s;
  for (const CheckpointLayoutInfo& l : known_checkpoint_layouts()) s += (s.empty() ? "" : ", ") + l.name;
  return s;
}

LayerLoadOptions CheckpointLayoutOptions::load_options(int num_threads) const {
  LayerLoadOptions load;
  load.layout = layout;
  load.tensor_pattern = tensor_pattern;
  load.proj_names = proj_names;
  load.num_threads = num_threads;
  load.shared_expert = shared_expert;
  return load;
}

std::string CheckpointLayoutOptions::describe() const {
  return "layout " + layout + (tensor_pattern.empty() ? "" : ", tensor pattern " + tensor_pattern);
}

void add_checkpoint_layout_options(CLI::App& cmd, CheckpointLayoutOptions& o, const std::string& prefix,
                                   const std::string& group) {
  cmd.add_option("--layout", o.layout, prefix + "the expert tensors' layout: auto, " + checkpoint_layout_list() +
                                           " (docs/checkpoints.md)")
      ->check(CLI::IsMember(checkpoint_layout_choices()))->capture_default_str()->group(group);
  cmd.add_option("--tensor-pattern", o.tensor_pattern,
                 prefix + "name of the expert weight tensors with {L}, {proj} and (per expert) {e}, e.g. "
                          "model.layers.{L}.block_sparse_moe.experts.{e}.{proj}.weight")
      ->group(group);
  cmd.add_option("--proj-names", o.proj_names, prefix + "the {proj} names: gate,up,down (per expert) or w13,w2 (fused)")
      ->delimiter(',')->group(group);
  cmd.add_flag("--no-shared-expert{false}", o.shared_expert,
               prefix + "load without the checkpoint's shared expert (one the reader cannot dequantize)")
      ->group(group);
}

void add_checkpoint_run_options(CLI::App& cmd, CheckpointRunOptions& o) {
  o.command = &cmd;
  const std::string group = "Checkpoint (instead of synthetic weights)";
  cmd.add_option("--checkpoint", o.path,
                 "safetensors checkpoint (a directory with config.json and model.safetensors or an "
                 "index of shards, or one .safetensors file): run one of its MoE layers")
      ->group(group);
  cmd.add_option("--layer", o.layer, "--checkpoint: the layer to run (default: the first MoE layer)")
      ->check(integer_at_least(0))->group(group);
  add_checkpoint_layout_options(cmd, o.layout, "--checkpoint: ", group);
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
  for (const char* flag : {"--layer", "--layout", "--tensor-pattern", "--proj-names", "--top-k",
                           "--no-shared-expert"})
    MOE_EP_CHECK(o.command->count(flag) == 0, "{} is a checkpoint flag; it needs --checkpoint DIR",
                 flag);
}

void refuse_checkpoint_expert_parallel(const CheckpointRunOptions& o, bool expert_parallel) {
  MOE_EP_CHECK_CODE(!o.given() || !expert_parallel, ErrorCode::kUnsupported,
                    "--checkpoint runs one layer on one rank; it cannot be combined with --ranks, "
                    "--layers, --eplb-redundant, --shared-expert or GPU ranks yet (`run --router` "
                    "routes with the checkpoint's own router)");
}

ProblemSetup plan_checkpoint_problem(const ProblemOptions& problem, const CheckpointRunOptions& o,
                                     int64_t max_num_tokens, int world_size) {
  MOE_EP_ASSERT(o.given());
  auto ck = Checkpoint::open(o.path);
  const auto& config = ck->config();
  const LayerLoadOptions load = o.layout.load_options(problem.threads);
  int64_t layer_idx = o.layer;
  if (layer_idx < 0) {
    const std::vector<int64_t> layers = find_moe_layers(*ck, load);
    MOE_EP_CHECK(!layers.empty(), "--checkpoint {}: no MoE layer found ({}); give --tensor-pattern", o.path,
                 o.layout.describe());
    layer_idx = layers.front();
  }
  const int64_t top_k = o.top_k > 0 ? o.top_k : (config ? config->num_experts_per_tok : 0);
  MOE_EP_CHECK(top_k > 0, "--checkpoint {} has no config.json: give --top-k", o.path);
  std::unique_ptr<CheckpointLayer> layer = load_checkpoint_layer(ck, layer_idx, load);

  const bool backend_given = o.command && o.command->count("--backend") > 0;
  ProblemOptions options = problem;
  // bf16 experts (unquantized checkpoints) are quantized by the layer to --backend's recipe.
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
                {"router", layer->router.present()},
                {"hash_layer", layer->router.hash_layer()},
                {"shared_intermediate", layer->shared_intermediate_size},
                {"shared_source", layer->shared_source},
                {"notes", notes}};
  entry.router = layer->router;
  entry.model_type = config ? config->model_type : "";
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

std::string route_with_checkpoint_router(const ProblemSetup& setup, testing::HostInputs& in,
                                         uint64_t seed) {
  CheckpointPreset* entry = find_entry(setup);
  MOE_EP_ASSERT(entry != nullptr);
  const CheckpointRouter& r = entry->router;
  const int64_t T = in.num_tokens, K = setup.desc.top_k, E = r.num_experts, H = r.hidden_size;
  const std::string reason = r.unsupported_reason(K, entry->model_type);
  MOE_EP_CHECK_CODE(reason.empty(), ErrorCode::kUnsupported, "--router with --checkpoint {}: {}; run "
                    "without --router (the generated routing)", entry->info["path"].get<std::string>(),
                    reason);
  MOE_EP_CHECK_CODE(setup.desc.fleet.num_experts == E, ErrorCode::kUnsupported,
                    "--router with --checkpoint: the layer holds {} of the router's {} experts; the "
                    "router's ids index all of them", setup.desc.fleet.num_experts, E);
  MOE_EP_ASSERT(in.hidden_size == H && in.top_k == K);
  std::vector<float> logits(static_cast<size_t>(T * E));
  for (int64_t t = 0; t < T; ++t)
    for (int64_t e = 0; e < E; ++e) {
      float acc = 0.0f;
      for (int64_t h = 0; h < H; ++h) acc += bf16_to_float(in.x[t * H + h]) * r.weight[e * H + h];
      logits[t * E + e] = acc;
    }
  std::vector<int32_t> tokens;
  RouterArgs args;
  args.layer_idx = 0;  // CheckpointRouter::config: num_hash_layers 1 for a hash layer
  args.logits = TensorView::contiguous(logits.data(), DType::kF32, {T, E});
  if (!r.bias.empty())
    args.bias = TensorView::contiguous(const_cast<float*>(r.bias.data()), DType::kF32, {E});
  if (r.hash_layer()) {
    std::mt19937_64 rng(seed * 0x9E3779B97F4A7C15ull + 41);
    tokens.resize(static_cast<size_t>(T));
    for (int32_t& id : tokens) id = static_cast<int32_t>(rng() % static_cast<uint64_t>(r.vocab_size));
    args.token_ids = TensorView::contiguous(tokens.data(), DType::kI32, {T});
    args.hash_table = TensorView::contiguous(const_cast<int32_t*>(r.hash_table.data()), DType::kI32,
                                             {r.vocab_size, r.hash_top_k});
  }
  args.topk_ids = TensorView::contiguous(in.topk_ids.data(), DType::kI32, {T, K});
  args.topk_weights = TensorView::contiguous(in.topk_weights.data(), DType::kF32, {T, K});
  route_deepseek_v4(r.config(K), args);
  const std::string what =
      r.hash_layer()
          ? fmt::format("hash table '{}' [{}, {}] at random token ids, weights sqrt(softplus) of '{}'",
                        r.hash_table_name, r.vocab_size, r.hash_top_k, r.weight_name)
          : fmt::format("sqrt(softplus) of '{}'{}, top {}", r.weight_name,
                        r.bias.empty() ? std::string() : fmt::format(" with bias '{}'", r.bias_name), K);
  const std::string line = fmt::format("checkpoint router: {}, routed_scaling_factor {}", what,
                                       r.routed_scaling_factor);
  entry->info["routing"] = line;
  return line;
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
             j["router"].get<bool>() ? (j["hash_layer"].get<bool>() ? ", router with hash table" : ", router present") : "",
             j["shared_intermediate"].get<int64_t>() > 0
                 ? fmt::format(", shared expert Is = {} from {} (run inside the layer)",
                               j["shared_intermediate"].get<int64_t>(), j["shared_source"].get<std::string>())
                 : std::string());
  if (j.contains("routing")) fmt::print("  routing: {}\n", j["routing"].get<std::string>());
}

void add_checkpoint_json(const ProblemSetup& setup, Json& json) {
  if (const CheckpointPreset* entry = find_entry(setup)) json["checkpoint"] = entry->info;
}

}  // namespace moe_ep::cli
