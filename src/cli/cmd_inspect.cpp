// `moe_ep inspect CHECKPOINT`: what a safetensors checkpoint holds for this library: the MoE
// shapes of config.json (and the keys it ignored), the MoE layers found, each layer's weight
// format, layout, router, shared expert and bytes, its load throughput, and the FP8-window
// statistics of docs/spec.md §5 (rows inside / outside, widest exponent span, a histogram of
// per-row block-exponent spans) that tell whether the GPU's folded MXFP4 -> FP8 path applies to
// the model. Finding no MoE layer is a failure (exit 1) that lists the expert-like tensors the
// checkpoint holds and the layouts this reader knows.
#include <algorithm>
#include <cctype>
#include <cstdint>
#include <map>
#include <chrono>
#include <memory>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "cli/checkpoint_problem.h"
#include "cli/cli_common.h"
#include "cli/commands.h"
#include "core/check.h"
#include "moe_ep/checkpoint.h"

namespace moe_ep::cli {
namespace {

struct InspectOptions {
  std::string path;
  bool json = false;
  std::vector<int64_t> layers;  // empty: every MoE layer found
  CheckpointLayoutOptions layout;
  int threads = 0;
  bool stats = true;
};

// Kinds of expert-like tensors shown when no MoE layer is found.
constexpr size_t kMaxListedGroups = 40;

Json config_json(const ModelConfig& c) {
  Json j;
  j["source"] = c.source;
  j["model_type"] = c.model_type;
  j["E"] = c.n_routed_experts;
  j["H"] = c.hidden_size;
  j["I"] = c.moe_intermediate_size;
  j["K"] = c.num_experts_per_tok;
  j["num_hidden_layers"] = c.num_hidden_layers;
  j["first_k_dense_replace"] = c.first_k_dense_replace;
  j["n_shared_experts"] = c.n_shared_experts;
  j["routed_scaling_factor"] = c.routed_scaling_factor;
  j["swiglu_limit"] = c.swiglu_limit ? Json(*c.swiglu_limit) : Json(nullptr);
  j["quant_method"] = c.quant_method;
  j["quant_algo"] = c.quant_algo;
  j["weight_block_size"] = {c.fp8_block_n, c.fp8_block_k};
  j["scoring_func"] = c.scoring_func;
  j["num_hash_layers"] = c.num_hash_layers ? Json(*c.num_hash_layers) : Json(nullptr);
  j["mlp_layer_types"] = c.mlp_layer_types;
  Json ignored = Json::array();
  for (const ModelConfig::IgnoredKey& k : c.ignored)
    ignored.push_back({{"key", k.key}, {"value", k.value}, {"reason", k.reason}});
  j["ignored_keys"] = ignored;
  return j;
}

std::string router_summary(const CheckpointRouter& r) {
  if (!r.present()) return "-";
  if (r.hash_layer()) return "hash";
  return r.bias.empty() ? "gate" : "gate+bias";
}

Json router_json(const CheckpointRouter& r) {
  Json j;
  j["weight"] = r.present() ? Json(r.weight_name) : Json(nullptr);
  j["bias"] = r.bias.empty() ? Json(nullptr) : Json(r.bias_name);
  j["hash_table"] = r.hash_layer() ? Json({{"name", r.hash_table_name}, {"shape", {r.vocab_size, r.hash_top_k}}})
                                   : Json(nullptr);
  j["routed_scaling_factor"] = r.routed_scaling_factor;
  j["scoring_func"] = r.scoring_func;
  return j;
}

Json layer_json(const CheckpointLayer& l, const Fp8WindowReport* w) {
  Json j;
  j["layer"] = l.layer_idx;
  j["format"] = weight_format_name(l.format);
  j["layout"] = l.layout;
  j["tensor_pattern"] = l.tensor_pattern;
  j["E"] = l.total_experts;
  j["H"] = l.hidden_size;
  j["I"] = l.intermediate_size;
  j["weight_bytes"] = l.pack_bytes();
  j["checkpoint_bytes"] = l.stats.checkpoint_bytes;
  j["load_ms"] = json_number(l.stats.seconds * 1e3);
  j["load_gbps"] = json_number(l.stats.gbps());
  j["router"] = l.router.present();
  j["router_bias"] = !l.router.bias.empty();
  j["router_detail"] = router_json(l.router);
  j["shared_intermediate"] = l.shared_intermediate_size;
  j["shared_source"] = l.shared_source;
  j["notes"] = l.notes;
  if (w) {
    j["fp8_window"] = {{"rows", w->rows},
                       {"rows_inside", w->rows_inside},
                       {"rows_outside", w->rows - w->rows_inside},
                       {"w13_rows_inside", w->w13_rows_inside},
                       {"w13_rows", w->w13_rows},
                       {"w2_rows_inside", w->w2_rows_inside},
                       {"w2_rows", w->w2_rows},
                       {"experts", w->experts},
                       {"experts_inside", w->experts_inside},
                       {"max_row_span", w->max_row_span},
                       {"span_histogram", w->span_histogram}};
  } else {
    j["fp8_window"] = nullptr;
  }
  return j;
}

// Expert-like tensors grouped by name with each number replaced by N, dtype and shape: one line
// per kind ("model.layers.1.ffn.experts.0.w1.weight I8 [4096, 2048], and 767 more like it").
struct TensorGroup {
  std::string pattern;
  const CheckpointTensor* first = nullptr;
  int64_t count = 0;
};

std::vector<TensorGroup> group_tensors(const std::vector<const CheckpointTensor*>& tensors) {
  std::vector<TensorGroup> groups;
  std::map<std::string, size_t> index;
  for (const CheckpointTensor* t : tensors) {
    std::string key;
    for (size_t i = 0; i < t->name.size(); ++i) {
      if (std::isdigit(static_cast<unsigned char>(t->name[i]))) {
        while (i + 1 < t->name.size() && std::isdigit(static_cast<unsigned char>(t->name[i + 1]))) ++i;
        key += 'N';
      } else {
        key += t->name[i];
      }
    }
    const std::string full = key + " " + t->dtype + " " + t->shape_str();
    const auto [it, inserted] = index.emplace(full, groups.size());
    if (inserted) groups.push_back({key, t, 0});
    ++groups[it->second].count;
  }
  return groups;
}

// No MoE layer found: what the checkpoint holds that looks like experts, and what this reader
// knows; exit 1.
int report_no_moe_layer(const InspectOptions& o, const Checkpoint& ck) {
  const std::vector<TensorGroup> groups = group_tensors(expert_like_tensors(ck, SIZE_MAX));
  const std::vector<CheckpointLayoutInfo> layouts = known_checkpoint_layouts();
  const std::string what = fmt::format(
      "no MoE layer found in {} ({})", o.path, o.layout.describe());
  const size_t shown = std::min(groups.size(), kMaxListedGroups);
  if (o.json) {
    Json tensors = Json::array(), known = Json::array();
    for (size_t i = 0; i < shown; ++i)
      tensors.push_back({{"name", groups[i].first->name}, {"dtype", groups[i].first->dtype},
                         {"shape", groups[i].first->shape}, {"like", groups[i].pattern},
                         {"count", groups[i].count}});
    for (const CheckpointLayoutInfo& l : layouts)
      known.push_back({{"name", l.name}, {"pattern", l.pattern}, {"proj_names", l.proj_names}, {"origin", l.origin}});
    Json j;
    j["command"] = "inspect";
    j["version"] = MOE_EP_VERSION;
    j["checkpoint"] = o.path;
    j["moe_layers"] = Json::array();
    j["error"] = what;
    j["expert_like_tensors"] = tensors;
    j["expert_like_kinds_left_out"] = groups.size() - shown;
    j["known_layouts"] = known;
    fmt::print("{}\n", j.dump());
    return kExitFailed;
  }
  fmt::print(stderr, "moe_ep inspect: error: {}\n", what);
  if (groups.empty()) {
    fmt::print(stderr, "  no tensor name contains \"expert\" (or ends in _blocks)\n");
  } else {
    fmt::print(stderr, "  expert-like tensors it holds (one of each kind):\n");
    for (size_t i = 0; i < shown; ++i)
      fmt::print(stderr, "    {} {} {}{}\n", groups[i].first->name, groups[i].first->dtype,
                 groups[i].first->shape_str(),
                 groups[i].count > 1 ? fmt::format(", and {} more like {}", groups[i].count - 1, groups[i].pattern)
                                     : std::string());
    if (groups.size() > shown) fmt::print(stderr, "    ... and {} more kinds\n", groups.size() - shown);
  }
  fmt::print(stderr, "  layouts this reader knows (--layout; or --tensor-pattern with {{L}}, {{e}}, {{proj}} "
             "and --proj-names):\n");
  for (const CheckpointLayoutInfo& l : layouts)
    fmt::print(stderr, "    {:<18} {} ({{proj}} = {}): {}\n", l.name, l.pattern, fmt::join(l.proj_names, ", "),
               l.origin);
  return kExitFailed;
}

void add_histogram(std::vector<int64_t>& total, const std::vector<int64_t>& h) {
  if (total.size() < h.size()) total.resize(h.size(), 0);
  for (size_t i = 0; i < h.size(); ++i) total[i] += h[i];
}

int inspect_command(const InspectOptions& o) {
  const auto start = std::chrono::steady_clock::now();
  auto ck = Checkpoint::open(o.path);
  const LayerLoadOptions load = o.layout.load_options(o.threads);
  const std::vector<int64_t> found = find_moe_layers(*ck, load);
  if (found.empty() && o.layers.empty()) return report_no_moe_layer(o, *ck);
  const std::vector<int64_t> layers = o.layers.empty() ? found : o.layers;
  const auto& config = ck->config();

  if (!o.json) {
    fmt::print("moe_ep inspect: {}\n", o.path);
    fmt::print("  files: {}, {} tensors, {:.1f} MB of tensor data\n", ck->files().size(),
               ck->tensor_names().size(), ck->total_tensor_bytes() / 1e6);
    if (config)
      fmt::print("  config ({}): {} E={} H={} I={} K={}, {} layers (first {} dense), "
                 "routed_scaling_factor {}, n_shared_experts {}, quantization_config {}{}\n",
                 config->source, config->model_type.empty() ? "model" : config->model_type,
                 config->n_routed_experts, config->hidden_size, config->moe_intermediate_size,
                 config->num_experts_per_tok, config->num_hidden_layers,
                 config->first_k_dense_replace, config->routed_scaling_factor,
                 config->n_shared_experts, config->quant_method.empty() ? "-" : config->quant_method,
                 config->quant_algo.empty() ? "" : " " + config->quant_algo);
    else
      fmt::print("  config: no config.json; shapes come from the tensors\n");
    if (config)
      for (const ModelConfig::IgnoredKey& k : config->ignored)
        fmt::print("  config key ignored: {} = {} ({})\n", k.key, k.value, k.reason);
    fmt::print("  MoE layers found: {}{}\n", found.size(),
               found.empty() ? std::string(" (none by the layouts; --layers names them)")
                             : fmt::format(" ({})", fmt::join(found, ", ")));
    if (!layers.empty())
      fmt::print("  {:>5} {:>6} {:>18} {:>4} {:>5} {:>5} {:>9} {:>6} {:>10} {:>8} {:>6}  {:>17} {:>7} {:>8} {:>11}\n",
                 "layer", "format", "layout", "E", "H", "I", "router", "shared", "MB", "load_ms", "GB/s",
                 "rows_inside/rows", "outside", "max_span", "experts_in");
  }

  Json layer_list = Json::array();
  std::vector<int64_t> histogram;
  int64_t total_bytes = 0, total_rows = 0, total_inside = 0;
  double total_seconds = 0;
  for (int64_t idx : layers) {
    const std::unique_ptr<CheckpointLayer> l = load_checkpoint_layer(ck, idx, load);
    std::unique_ptr<Fp8WindowReport> w;
    if (o.stats && l->format == WeightFormat::kMXFP4)
      w = std::make_unique<Fp8WindowReport>(analyze_fp8_window(*l, o.threads));
    total_bytes += l->stats.checkpoint_bytes;
    total_seconds += l->stats.seconds;
    if (w) {
      add_histogram(histogram, w->span_histogram);
      total_rows += w->rows;
      total_inside += w->rows_inside;
    }
    if (o.json) {
      layer_list.push_back(layer_json(*l, w.get()));
      continue;
    }
    fmt::print("  {:>5} {:>6} {:>18} {:>4} {:>5} {:>5} {:>9} {:>6} {:>10.2f} {:>8.1f} {:>6.2f}  {:>17} {:>7} {:>8} {:>11}\n",
               idx, weight_format_name(l->format), l->layout, l->total_experts, l->hidden_size,
               l->intermediate_size, router_summary(l->router),
               l->shared_intermediate_size > 0 ? fmt::format("{}", l->shared_intermediate_size) : std::string("-"),
               l->stats.checkpoint_bytes / 1e6, l->stats.seconds * 1e3,
               l->stats.gbps(),
               w ? fmt::format("{}/{}", w->rows_inside, w->rows) : std::string("n/a"),
               w ? fmt::format("{}", w->rows - w->rows_inside) : std::string("-"),
               w ? fmt::format("{}", w->max_row_span) : std::string("-"),
               w ? fmt::format("{}/{}", w->experts_inside, w->experts) : std::string("-"));
    for (size_t n = 1; n < l->notes.size(); ++n) fmt::print("        note: {}\n", l->notes[n]);
  }
  const double gbps = total_seconds > 0 ? total_bytes / total_seconds * 1e-9 : 0.0;
  const double wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  if (o.json) {
    Json j;
    j["command"] = "inspect";
    j["version"] = MOE_EP_VERSION;
    j["checkpoint"] = o.path;
    Json files = Json::array();
    for (const auto& f : ck->files())
      files.push_back({{"path", f->path()}, {"bytes", f->file_size()}, {"tensors", f->tensors().size()}});
    j["files"] = files;
    j["tensors"] = ck->tensor_names().size();
    j["tensor_bytes"] = ck->total_tensor_bytes();
    j["config"] = config ? config_json(*config) : Json(nullptr);
    j["moe_layers"] = found;
    j["layers"] = layer_list;
    j["span_histogram"] = histogram;
    j["fp8_window_max_span"] = Fp8WindowReport::kMaxSpan;
    j["load_bytes"] = total_bytes;
    j["load_gbps"] = json_number(gbps);
    j["wall_s"] = json_number(wall_s);
    fmt::print("{}\n", j.dump());
    return kExitOk;
  }
  if (!layers.empty())
    fmt::print("  loaded {:.1f} MB of checkpoint tensors in {:.1f} ms: {:.2f} GB/s ({} threads; "
               "wall {:.2f} s with the statistics)\n",
               total_bytes / 1e6, total_seconds * 1e3, gbps,
               o.threads > 0 ? fmt::format("{}", o.threads) : std::string("all"), wall_s);
  if (!histogram.empty()) {
    fmt::print("  per-row block-exponent span (max - min E8M0 over non-zero blocks), rows over "
               "{} layers; spans > {} are outside the FP8 window ({}/{} rows inside):\n",
               layers.size(), Fp8WindowReport::kMaxSpan, total_inside, total_rows);
    const int64_t peak = *std::max_element(histogram.begin(), histogram.end());
    for (size_t s = 0; s < histogram.size(); ++s) {
      if (histogram[s] == 0) continue;
      const int bar = peak > 0 ? static_cast<int>(40.0 * histogram[s] / peak + 0.5) : 0;
      fmt::print("    {:>3}{} {:>12}  {}\n", s, static_cast<int>(s) > Fp8WindowReport::kMaxSpan ? "*" : " ",
                 histogram[s], std::string(std::max(bar, 1), '#'));
    }
  }
  return kExitOk;
}

}  // namespace

Command add_inspect_command(CLI::App& app) {
  auto o = std::make_shared<InspectOptions>();
  CLI::App* cmd = app.add_subcommand(
      "inspect", "Describe a safetensors checkpoint: MoE layers, shapes, weight format, bytes, load "
                 "throughput, and the FP8-window statistics of its MXFP4 expert weights.");
  cmd->add_option("checkpoint", o->path, "checkpoint directory or .safetensors file")->required();
  cmd->add_flag("--json", o->json, "print exactly one JSON object on stdout");
  cmd->add_option("--layers", o->layers, "comma-separated layers (default: every MoE layer found)")
      ->delimiter(',')->check(integer_at_least(0));
  add_checkpoint_layout_options(*cmd, o->layout, "", "Checkpoint layout");
  cmd->add_option("--threads", o->threads, "loader threads (default: all)")->check(integer_at_least(1));
  add_on_off_flag(*cmd, "--stats", "--no-stats", o->stats, "FP8-window statistics (default on)");
  return {cmd, [o] { return run_guarded("inspect", [o] { return inspect_command(*o); }); }};
}

}  // namespace moe_ep::cli
