// `moe_ep bench`: median forward time over a sweep of T for one preset on one device, next to
// its roofline floor (roofline.h).
//
// --compare torch is accepted here but measured elsewhere: the PyTorch pipelines of the same
// layer run from the device test runner (scripts/device_*.sh) in the same device session, and
// their times are merged into bench/RESULTS.md there. This binary only marks the columns.
#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <ctime>
#include <cstring>
#include <chrono>
#include <filesystem>
#include <map>
#include <cmath>
#include <fstream>
#include <memory>

#include <fmt/format.h>

#include "cli/batch.h"
#include "cli/bench_ep.h"
#include "cli/bench_load.h"
#include "cli/checkpoint_problem.h"
#include "cli/plot_svg.h"
#include "cli/cli_common.h"
#include "cli/commands.h"
#include "cli/problem.h"
#include "cli/roofline.h"
#include "cli/run_ep.h"
#include "cli/run_options.h"
#include "core/check.h"
#include "moe_ep/layer.h"
#include "moe_ep/runtime.h"

namespace moe_ep::cli {
namespace {

struct BenchOptions {
  ProblemOptions problem;
  bool preset_given = false;
  std::vector<int64_t> tokens = {1, 8, 32, 128, 512, 2048, 8192};
  std::string tokens_text = "1,8,32,128,512,2048,8192";  // --tokens as typed, parsed into tokens
  std::string csv;
  std::string compare;  // "" or "torch"
  bool json = false;
  int iters = 0;        // 0: 50 on CUDA, 5 on the CPU
  int warmup = -1;      // -1: 5 on CUDA, 1 on the CPU
  bool eager = false;
  std::vector<std::string> variants;  // --variants: GEMM kernels to bench one after another
  std::string plot;                   // --plot FILE.svg
  std::vector<std::string> plot_with; // --plot-with: more CSV series
  bool load = false;     // --load: time the layer's weight loading instead of forwards
  int load_repeats = 3;
  double bandwidth_gbps = 0.0;  // 0: measure
  double compute_tflops = 0.0;  // 0: measure
  // expert parallelism (cli/cmd_bench_ep.cpp)
  bool tokens_given = false;
  int ranks = 1;
  bool simulate_ranks_on_one_gpu = false;
  int64_t timeout_ms = 600000;
  int ep_rank = -1;
  std::string ep_rendezvous;
  // the layer chain on one GPU (cli/cmd_run_layers_cuda.cpp)
  int layers = 1;
  bool router = false, shared_expert = false;
  int64_t hash_layers = 0, eplb_redundant = 0;
};

// --layers / --router / --eplb-redundant / --shared-expert on one GPU: for each T, the N-layer
// chain of `moe_ep run` (one CUDA graph, per-layer time, stage times and floors), check off.
int bench_layer_chain(const BenchOptions& o) {
  int rc = kExitOk;
  for (int64_t t : o.tokens) {
    RunOptions r;
    r.problem = o.problem;
    if (r.problem.device == "auto" && resolve_device("auto").device.type == DeviceType::kCUDA)
      r.problem.device = "cuda";
    r.tokens = t;
    r.check = false;
    r.json = o.json;
    r.iters = o.iters > 0 ? o.iters : 50;
    r.warmup = o.warmup >= 0 ? o.warmup : 5;
    r.eager = o.eager;
    r.layers = o.layers;
    r.router = o.router;
    r.hash_layers = o.hash_layers;
    r.eplb_redundant = o.eplb_redundant;
    r.shared_expert = o.shared_expert;
    r.time_without_shared = o.shared_expert;
    MOE_EP_CHECK_CODE(wants_cuda_layers_run(r), ErrorCode::kUnsupported,
                      "bench --layers / --router / --eplb-redundant / --shared-expert runs on one GPU "
                      "(--device cuda, --ranks 1); got --device {} --ranks {}", o.problem.device, o.ranks);
    rc = std::max(rc, run_cuda_layers(r));
  }
  return rc;
}

struct BenchRow {
  std::string variant;  // the GEMM kernel override ("auto": the selected config)
  int64_t tokens = 0, valid_slots = 0, unique_experts = 0;
  double time_us = 0.0, min_us = 0.0;
  Roofline floor;
};

const char* kCsvHeader =
    "gpu,date,commit,preset,backend,implementation,device,weight_format,tokens,valid_slots,unique_experts,"
    "time_us,min_us,weight_bytes,flops,memory_floor_us,compute_floor_us,floor_us,"
    "fraction_of_floor,tflops,bandwidth_gbps,compute_tflops,compute_rate_kind,variant";

// RFC 4180 quoting for free-text fields.
std::string csv_field(const std::string& text) {
  if (text.find_first_of(",\"\n") == std::string::npos) return text;
  std::string quoted = "\"";
  for (char c : text) quoted += c == '"' ? std::string("\"\"") : std::string(1, c);
  return quoted + "\"";
}

int bench_command(BenchOptions o, const CheckpointRunOptions& ck) {
  o.tokens = parse_int_list(o.tokens_text, "--tokens", 0);
  check_checkpoint_flags(ck);
  MOE_EP_CHECK(o.plot_with.empty() || !o.plot.empty(), "--plot-with needs --plot FILE.svg (the "
               "series are added to that plot)");
  MOE_EP_CHECK(o.hash_layers == 0 || o.router, "--hash-layers {} needs --router", o.hash_layers);
  MOE_EP_CHECK(o.hash_layers <= o.layers, "--hash-layers {} is above --layers {}; expected at most "
               "the number of layers", o.hash_layers, o.layers);
  o.problem.budget = {o.ranks, o.layers, o.eplb_redundant};
  // Without --preset: the model-sized layer on a GPU, the demo layer on the CPU.
  if (!o.preset_given)
    o.problem.preset = resolve_device(o.problem.device).device.type == DeviceType::kCUDA
                           ? "deepseek-v4-flash" : "tiny";
  if (o.load) return bench_load(o.problem, ck, o.load_repeats, o.json);  // cli/bench_load.cpp
  BenchEpOptions ep{o.problem, o.tokens_given ? o.tokens : std::vector<int64_t>{1, 128, 4096},
                    o.ranks, o.simulate_ranks_on_one_gpu, o.iters, o.warmup, o.eager, o.json,
                    o.csv, o.timeout_ms, o.ep_rank, o.ep_rendezvous};
  refuse_checkpoint_expert_parallel(ck, wants_bench_expert_parallel(ep));
  if (o.layers > 1 || o.router || o.eplb_redundant > 0 || o.shared_expert) return bench_layer_chain(o);
  if (wants_bench_expert_parallel(ep)) return bench_expert_parallel(ep);  // cmd_bench_ep.cpp
  const int64_t max_t = *std::max_element(o.tokens.begin(), o.tokens.end());
  const ProblemSetup s = ck.given() ? plan_checkpoint_problem(o.problem, ck, max_t, 1)
                                    : plan_problem(o.problem, max_t, 1);
  const bool cuda = s.device.device.type == DeviceType::kCUDA;
  const int iters = o.iters > 0 ? o.iters : (cuda ? 50 : 5);
  const int warmup = o.warmup >= 0 ? o.warmup : (cuda ? 5 : 1);

  const testing::HostWeights weights =
      ck.given() ? checkpoint_weights(s) : generate_weights(s, o.problem.seed);
  auto driver = make_driver(s.device.device);
  Bootstrap boot;
  boot.device = s.device.device;
  auto runtime = Runtime::acquire(boot);
  if (o.variants.empty()) o.variants.push_back(o.problem.kernel.empty() ? "auto" : o.problem.kernel);

  RooflineRates rates;
  rates.bandwidth_bytes_per_s =
      o.bandwidth_gbps > 0 ? o.bandwidth_gbps * 1e9 : driver->measure_copy_bandwidth();
  rates.compute_flop_per_s =
      o.compute_tflops > 0 ? o.compute_tflops * 1e12 : driver->measure_compute_rate();
  const std::string rate_kind = o.compute_tflops > 0 ? "given" : driver->compute_rate_kind();
  const int64_t expert_bytes =
      expert_weight_bytes(s.weight_format, s.desc.fleet.hidden_size, s.desc.intermediate_size);

  if (!o.json) {
    fmt::print("moe_ep bench: preset {} (H={} I={} E={} K={}), backend {} on {} ({}), {} weights\n",
               s.preset->name, s.desc.fleet.hidden_size, s.desc.intermediate_size, s.desc.fleet.num_experts,
               s.desc.top_k, s.desc.traits().name, s.device.device.str(), s.device.name,
               weight_format_name(s.weight_format));
    fmt::print("  floor = max(unique expert weight bytes{} / {:.1f} GB/s, FLOPs / {:.2f} TFLOP/s "
               "[{}]); {} per T, median of {} after {} warm-up\n",
               s.desc.shared_intermediate_size > 0 ? " + the shared expert's" : "",
               rates.bandwidth_bytes_per_s / 1e9, rates.compute_flop_per_s / 1e12, rate_kind,
               cuda && !o.eager ? "cuda graph replays" : "forwards", iters, warmup);
    print_checkpoint_summary(s);
  }
  std::vector<BenchRow> rows;
  for (const std::string& variant : o.variants) {
  KernelOverrides overrides = s.overrides;
  overrides.gemm = parse_gemm_kernel(variant, "--variants");
  std::unique_ptr<Layer> layer;
  try {
    layer = Layer::create(runtime, s.desc, weights.pack(), overrides);
  } catch (const Error& e) {
    if (o.variants.size() == 1) throw;
    fmt::print(stderr, "moe_ep bench: variant {} refused: {}\n", variant, e.message());
    continue;
  }
  if (!o.json) {
    if (o.variants.size() > 1) fmt::print("  variant {}:\n", variant);
    fmt::print("  {:>6} {:>7} {:>5} {:>12} {:>12} {:>9} {:>9}\n", "T", "slots", "exp", "time_us",
               "floor_us", "of_floor", "TFLOP/s");
  }
  for (int64_t T : o.tokens) {
    const testing::HostInputs in = generate_inputs(s, o.problem, T, T);
    DeviceBatch batch = upload_batch(*driver, in);
    poison_y(*driver, batch);
    const std::vector<double> times = driver->time_forward(
        [&](void*) { layer->forward(batch.args); }, warmup, iters, cuda && !o.eager);
    layer->check_error_flags();
    BenchRow r;
    r.variant = variant;
    r.tokens = T;
    r.valid_slots = in.num_valid_slots();
    r.unique_experts = testing::count_unique_experts(in);
    r.time_us = median(times);
    r.min_us = *std::min_element(times.begin(), times.end());
    r.floor = roofline(r.unique_experts, expert_bytes, r.valid_slots, s.desc.fleet.hidden_size,
                       s.desc.intermediate_size, rates, T, s.desc.shared_intermediate_size);
    rows.push_back(r);
    if (!o.json)
      fmt::print("  {:>6} {:>7} {:>5} {:>12.1f} {:>12.1f} {:>8.1f}% {:>9.3f}\n", T, r.valid_slots,
                 r.unique_experts, r.time_us, r.floor.floor_us, 100.0 * r.floor.floor_us / r.time_us,
                 r.floor.flops / r.time_us * 1e-6);
  }
  }
  if (!o.plot.empty()) {
    std::vector<PlotSeries> series;
    std::map<double, double> floor_us;
    for (const BenchRow& r : rows) {
      auto it = std::find_if(series.begin(), series.end(), [&](const PlotSeries& x) { return x.label == r.variant; });
      if (it == series.end()) it = series.insert(series.end(), PlotSeries{r.variant, {}});
      it->points.push_back({static_cast<double>(r.tokens), r.time_us});
      floor_us[static_cast<double>(r.tokens)] = r.floor.floor_us;
    }
    for (const std::string& f : o.plot_with)
      for (PlotSeries& x : read_plot_csv(f)) {
        if (std::any_of(series.begin(), series.end(), [&](const PlotSeries& y) { return y.label == x.label; }))
          x.label = std::filesystem::path(f).stem().string() + ":" + x.label;
        series.push_back(std::move(x));
      }
    write_plot_svg(o.plot, fmt::format("moe_ep bench: {} on {} ({})", s.preset->name, s.device.name,
                                       weight_format_name(s.weight_format)),
                   series, floor_us);
    if (!o.json) fmt::print("  plot: {}\n", o.plot);
  }
  if (!o.compare.empty())
    fmt::print(stderr, "moe_ep bench: --compare {}: the PyTorch pipelines run from the device test "
               "runner (scripts/device_*.sh), not from this binary; no torch columns here\n",
               o.compare);

  if (!o.csv.empty()) {
    std::ofstream csv(o.csv);
    MOE_EP_CHECK(csv.good(), "--csv '{}' cannot be opened for writing", o.csv);
    csv << kCsvHeader << "\n";
    // Every row names the device, the UTC date and the commit, so it can join bench/results/.
    const char* commit_env = std::getenv("MOE_EP_COMMIT");
    const std::string commit = commit_env != nullptr && *commit_env != '\0' ? commit_env : MOE_EP_GIT_COMMIT;
    const std::time_t now = std::time(nullptr);
    std::tm utc{};
    gmtime_r(&now, &utc);
    char date[16];
    std::strftime(date, sizeof date, "%Y-%m-%d", &utc);
    const std::string stamp = fmt::format("{},{},{}", csv_field(s.device.name), date, csv_field(commit));
    for (const BenchRow& r : rows)
      csv << stamp << "," << fmt::format("{},{},{},{},{},{},{},{},{:.3f},{:.3f},{},{:.6g},{:.3f},{:.3f},{:.3f},{:.5f},"
                         "{:.5f},{:.2f},{:.4f},{},{}\n",
                         s.preset->name, s.desc.traits().name, s.implementation, s.device.device.str(),
                         weight_format_name(s.weight_format), r.tokens, r.valid_slots,
                         r.unique_experts, r.time_us, r.min_us, r.floor.weight_bytes, r.floor.flops,
                         r.floor.memory_floor_us, r.floor.compute_floor_us, r.floor.floor_us,
                         r.floor.floor_us / r.time_us, r.floor.flops / r.time_us * 1e-6,
                         rates.bandwidth_bytes_per_s / 1e9, rates.compute_flop_per_s / 1e12,
                         csv_field(rate_kind), r.variant);
    csv.close();  // flushes: a full disk shows here, not at open
    MOE_EP_CHECK_CODE(!csv.fail(), ErrorCode::kRuntime, "--csv '{}': writing failed ({})", o.csv,
                      std::strerror(errno));
  }
  if (o.json) {
    Json j;
    j["command"] = "bench";
    j["version"] = MOE_EP_VERSION;
    j.update(problem_json(s, o.problem));
    j["iters"] = iters;
    j["warmup"] = warmup;
    j["timing"] = cuda && !o.eager ? "cuda-graph-replay" : (cuda ? "eager" : "wall-clock");
    j["bandwidth_gbps"] = json_number(rates.bandwidth_bytes_per_s / 1e9);
    j["compute_tflops"] = json_number(rates.compute_flop_per_s / 1e12);
    j["compute_rate_kind"] = rate_kind;
    Json arr = Json::array();
    for (const BenchRow& r : rows)
      arr.push_back({{"variant", r.variant}, {"tokens", r.tokens}, {"valid_slots", r.valid_slots},
                     {"unique_experts", r.unique_experts}, {"time_us", json_number(r.time_us)},
                     {"min_us", json_number(r.min_us)}, {"weight_bytes", r.floor.weight_bytes},
                     {"flops", r.floor.flops}, {"memory_floor_us", json_number(r.floor.memory_floor_us)},
                     {"compute_floor_us", json_number(r.floor.compute_floor_us)},
                     {"floor_us", json_number(r.floor.floor_us)},
                     {"fraction_of_floor", json_number(r.floor.floor_us / r.time_us)},
                     {"tflops", json_number(r.floor.flops / r.time_us * 1e-6)}});
    j["rows"] = arr;
    add_checkpoint_json(s, j);
    fmt::print("{}\n", j.dump());
  }
  return kExitOk;
}

}  // namespace

Command add_bench_command(CLI::App& app) {
  auto o = std::make_shared<BenchOptions>();
  auto ck = std::make_shared<CheckpointRunOptions>();
  CLI::App* cmd = app.add_subcommand(
      "bench", "Sweep T for one preset on one device: median forward time, roofline floor, "
               "fraction of the floor, TFLOP/s.");
  add_problem_options(*cmd, o->problem, "default deepseek-v4-flash on CUDA, tiny on the CPU");
  cmd->add_option("--tokens,-T", o->tokens_text, "comma-separated list of T")->capture_default_str();
  cmd->add_option("--csv", o->csv, "write the table as CSV to this file");
  cmd->add_option("--compare", o->compare,
                  "torch: PyTorch pipelines of the same layer (run by the device test runner)")
      ->check(CLI::IsMember({"torch"}));
  cmd->add_flag("--json", o->json, "print exactly one JSON object on stdout");
  cmd->add_option("--iters", o->iters, "timed forwards per T (default: 50 on CUDA, 5 on the CPU)")
      ->check(integer_in_range(1, kMaxIterations));
  cmd->add_option("--warmup", o->warmup, "untimed forwards per T (default: 5 on CUDA, 1 on the CPU)")
      ->check(integer_in_range(0, kMaxIterations));
  cmd->add_option("--variants", o->variants,
                  "GEMM kernels to bench one after another (auto,decode,mma,wgmma,wgmma-rs,decode-wgmma; default: "
                  "--kernel or auto)")
      ->delimiter(',')->check(CLI::IsMember({"auto", "decode", "mma", "wgmma", "wgmma-rs", "decode-wgmma"}));
  cmd->add_option("--plot", o->plot, "write time and fraction of floor against T as an SVG file");
  cmd->add_option("--plot-with", o->plot_with,
                  "CSV files to add to --plot (other bench --csv runs, bench/torch_peer.py --csv)")
      ->delimiter(',');
  cmd->add_flag("--load", o->load,
                "time loading instead: Layer::create from host weights, or with --checkpoint the "
                "file read + Layer::create, in GB/s of expert weight bytes");
  cmd->add_option("--load-repeats", o->load_repeats, "repeats of --load (the best is reported)")
      ->check(integer_in_range(1, kMaxIterations))->capture_default_str();
  cmd->add_flag("--eager", o->eager, "CUDA: time eager forwards instead of CUDA graph replays");
  cmd->add_option("--bandwidth-gbps", o->bandwidth_gbps, "memory bandwidth for the floor (default: measured)")
      ->check(number_at_least(0, true));
  cmd->add_option("--compute-tflops", o->compute_tflops, "compute rate for the floor (default: measured)")
      ->check(number_at_least(0, true));
  cmd->add_option("--ranks", o->ranks, "EP ranks on GPUs: one process per GPU, or "
                  "--simulate-ranks-on-one-gpu (default T sweep 1,128,4096 per rank)")
      ->check(integer_at_least(1))->capture_default_str();
  cmd->add_flag("--simulate-ranks-on-one-gpu", o->simulate_ranks_on_one_gpu,
                "run the --ranks ranks as simulated ranks on the one --device GPU");
  cmd->add_option("--timeout-ms", o->timeout_ms, "expert parallelism: bound on every wait for a peer")
      ->check(integer_at_least(1))->capture_default_str();
  cmd->add_option("--layers", o->layers, "--device cuda: time an N-layer chain as one CUDA graph (per-layer time)")
      ->check(integer_at_least(1));
  cmd->add_flag("--router", o->router, "--device cuda: the device DeepSeek V4 router before each layer");
  cmd->add_option("--hash-layers", o->hash_layers, "--router: the first N layers route by a hash table")
      ->check(integer_at_least(0));
  cmd->add_option("--eplb-redundant", o->eplb_redundant, "--device cuda: redundant physical experts (EPLB remap on the device)")
      ->check(integer_at_least(0));
  cmd->add_flag("--shared-expert", o->shared_expert, "--device cuda: a bf16 shared expert added to each layer's y; also times the layers without it (its added cost)");
  cmd->add_option("--ep-rank", o->ep_rank, "rank of a launched NCCL world (internal)")
      ->check(integer_at_least(0))->group("");
  cmd->add_option("--ep-rendezvous", o->ep_rendezvous, "unique-id file prefix (internal)")->group("");
  add_checkpoint_run_options(*cmd, *ck);
  return {cmd, [o, ck, cmd] {
            o->preset_given = cmd->count("--preset") > 0 || ck->given();
            o->tokens_given = cmd->count("--tokens") > 0;
            return run_guarded("bench", [o, ck] { return bench_command(*o, *ck); });
          }};
}

}  // namespace moe_ep::cli
