// `moe_ep run`: one forward of a synthetic problem, timed, and checked against the CPU
// reference backend.
//
//   --device cuda: y of the device layer vs the CPU backend's forward_rows on up to
//                  --check-rows rows, rel err against the recipe's threshold (testing/tolerances.h).
//   --device cpu:  y of the multi-threaded forward vs a second CPU layer with 1 thread running
//                  forward_rows on the sampled rows, bitwise (the CPU backend promises results
//                  independent of thread count and row subset).
//   Both:          sanity of every row (finite, holes-only tokens zero, others nonzero), and a
//                  bitwise comparison of the first y with the y after the timed reruns.
#include <chrono>
#include <cmath>
#include <memory>

#include <fmt/format.h>

#include "cli/batch.h"
#include "cli/checkpoint_problem.h"
#include "cli/cli_common.h"
#include "cli/commands.h"
#include "cli/output_check.h"
#include "cli/problem.h"
#include "cli/run_ep.h"
#include "cli/run_options.h"
#include "core/check.h"
#include "moe_ep/formats.h"
#include "moe_ep/layer.h"
#include "moe_ep/runtime.h"
#include "testing/tolerances.h"

namespace moe_ep::cli {
namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

// What one rank's forward produced.
struct ForwardResult {
  std::vector<uint16_t> y;          // after the first (checked) forward
  std::vector<double> times_us;
  std::string timing;               // how times_us was measured
  bool rerun_bitwise_equal = false; // y after the timed reruns == the first y
  double load_ms = 0.0;
  std::string layer_notes;
  SelectedConfig config;
};

struct CheckResult {
  bool enabled = false;
  std::string reference;
  int64_t checked_rows = 0;
  double rel_err = NAN;
  double threshold = NAN;
  bool bitwise_required = false;
  bool reference_ok = false;
  bool sanity_ok = false;
  std::string sanity;
  bool passed = false;
};

// FNV-1a (64 bit) of y's bf16 bytes, little-endian: two runs or two builds gave bitwise the same
// y when their digests match.
std::string y_digest(const std::vector<uint16_t>& y) {
  uint64_t h = 14695981039346656037ull;
  for (uint16_t v : y)
    for (int b = 0; b < 2; ++b) {
      h ^= (v >> (8 * b)) & 0xFFu;
      h *= 1099511628211ull;
    }
  return fmt::format("{:016x}", h);
}

ForwardResult run_forward(const ProblemSetup& s, const RunOptions& o, const testing::HostWeights& weights,
                          const testing::HostInputs& inputs) {
  ForwardResult r;
  const bool cuda = s.device.device.type == DeviceType::kCUDA;
  auto driver = make_driver(s.device.device);
  Bootstrap boot;
  boot.device = s.device.device;
  auto runtime = Runtime::acquire(boot);

  const auto load_start = Clock::now();
  std::unique_ptr<Layer> layer;
  layer = Layer::create(runtime, s.desc, weights.pack(), s.overrides);
  r.load_ms = ms_since(load_start);
  r.layer_notes = layer->info().notes;
  r.config = layer->info().config;

  DeviceBatch batch = upload_batch(*driver, inputs);
  poison_y(*driver, batch);
  layer->forward(batch.args);
  driver->synchronize();
  layer->check_error_flags();
  r.y = download_y(*driver, batch);

  const int iters = o.iters > 0 ? o.iters : (cuda ? 20 : 1);
  const int warmup = o.warmup >= 0 ? o.warmup : (cuda ? 3 : 0);
  const bool capture = cuda && !o.eager;
  poison_y(*driver, batch);
  r.times_us = driver->time_forward([&](void*) { layer->forward(batch.args); }, warmup, iters, capture);
  layer->check_error_flags();
  r.timing = capture ? fmt::format("cuda graph replays, median of {} after {} warm-up", iters, warmup)
                     : fmt::format("{} forwards, median of {} after {} warm-up",
                                   cuda ? "eager cuda" : "wall-clock", iters, warmup);
  const std::vector<uint16_t> y_rerun = download_y(*driver, batch);
  r.rerun_bitwise_equal = y_rerun == r.y;
  return r;  // layer, then runtime released here: the reference may acquire its own runtime
}

CheckResult check_output(const ProblemSetup& s, const RunOptions& o, const testing::HostWeights& weights,
                         const testing::HostInputs& inputs, const ForwardResult& fwd) {
  CheckResult c;
  c.enabled = true;
  const int64_t H = s.desc.fleet.hidden_size;
  const std::vector<int64_t> rows = sample_rows(inputs.num_tokens, o.check_rows);
  c.checked_rows = static_cast<int64_t>(rows.size());
  const bool cpu = s.device.device.type == DeviceType::kCPU;
  const std::vector<uint16_t> ref =
      cpu_reference_rows(s, weights.pack(), inputs, rows, cpu ? 1 : o.problem.threads);
  c.rel_err = rel_err_rows(fwd.y, ref, H, rows);
  if (cpu) {
    c.bitwise_required = true;
    c.threshold = 0.0;
    c.reference = fmt::format("cpu backend forward_rows with 1 thread on {} of {} rows; bitwise "
                              "equality with the {} forward required",
                              rows.size(), inputs.num_tokens,
                              o.problem.threads > 0 ? fmt::format("{}-thread", o.problem.threads)
                                                    : std::string("default-thread"));
    c.reference_ok = bitwise_equal_rows(fwd.y, ref, H, rows);
  } else {
    c.threshold = testing::device_rel_err_threshold(s.desc.recipe, s.desc.numerics.exact_accumulation);
    c.reference = fmt::format("cpu backend forward_rows on {} of {} rows; relative error "
                              "||y-ref||/||ref|| (float64) <= {:g}",
                              rows.size(), inputs.num_tokens, c.threshold);
    c.reference_ok = c.rel_err <= c.threshold;  // false for NaN
  }
  SanityRule rule;
  rule.shared_expert = s.desc.shared_intermediate_size > 0;
  rule.outputs_zero = s.desc.activation_clamp == 0.0f;
  rule.reference = ref;
  rule.reference_rows = rows;
  c.sanity_ok = sanity_check(fwd.y, inputs, &c.sanity, rule);
  c.passed = c.reference_ok && c.sanity_ok && fwd.rerun_bitwise_equal;
  return c;
}

void print_summary(const ProblemSetup& s, const RunOptions& o, const testing::HostInputs& in,
                   double generate_ms, const ForwardResult& f, const CheckResult& c) {
  fmt::print("moe_ep run: preset {} (H={} I={} E={} K={} clamp={}{}), backend {} on {} ({}, {})\n",
             s.preset->name, s.desc.fleet.hidden_size, s.desc.intermediate_size, s.desc.fleet.num_experts,
             s.desc.top_k, s.desc.activation_clamp.value_or(INFINITY),
             s.desc.shared_intermediate_size > 0 ? fmt::format(" Is={}", s.desc.shared_intermediate_size) : "",
             s.desc.traits().name,
             s.device.device.str(), s.implementation, s.device.name);
  fmt::print("  tokens {} ({} valid slots, {} experts hit), ranks {}, max_tokens_per_rank {}, "
             "{} weights, seed {}\n",
             in.num_tokens, in.num_valid_slots(), testing::count_unique_experts(in), s.world_size,
             s.desc.fleet.max_tokens_per_rank, weight_format_name(s.weight_format), o.problem.seed);
  fmt::print("  weights generated in {:.1f} ms, layer loaded in {:.1f} ms\n", generate_ms, f.load_ms);
  if (!f.layer_notes.empty()) {
    std::string notes = f.layer_notes;
    for (size_t p = notes.find('\n'); p != std::string::npos; p = notes.find('\n', p + 1))
      notes.replace(p, 1, "\n         ");
    fmt::print("  layer: {}\n", notes);
  }
  fmt::print("  selected config ({}):\n{}", s.implementation, indent(f.config.str(), "  "));
  fmt::print("  forward: {:.1f} us ({})\n", median(f.times_us), f.timing);
  fmt::print("  rerun: y {} the first forward's bitwise\n", f.rerun_bitwise_equal ? "equals" : "DIFFERS FROM");
  fmt::print("  y digest: {} (FNV-1a of the first forward's bf16 bytes)\n", y_digest(f.y));
  if (!c.enabled) {
    fmt::print("  check: off\n");
    return;
  }
  fmt::print("  check: {}\n", c.reference);
  fmt::print("         rel_err {:.3e} (threshold {:g}){}; sanity: {}\n", c.rel_err, c.threshold,
             c.bitwise_required ? (c.reference_ok ? ", bitwise equal" : ", NOT bitwise equal") : "",
             c.sanity);
  fmt::print("  result: {}\n", c.passed ? "PASSED" : "FAILED");
}

Json result_json(const ProblemSetup& s, const RunOptions& o, const testing::HostInputs& in,
                 double generate_ms, const ForwardResult& f, const CheckResult& c) {
  Json j;
  j["command"] = "run";
  j["version"] = MOE_EP_VERSION;
  j.update(problem_json(s, o.problem));
  j["tokens"] = in.num_tokens;
  j["layers"] = o.layers;
  j["valid_slots"] = in.num_valid_slots();
  j["unique_experts"] = testing::count_unique_experts(in);
  j["weight_bytes"] = expert_weight_bytes(s.weight_format, s.desc.fleet.hidden_size, s.desc.intermediate_size) *
                      s.desc.fleet.num_experts;
  j["generate_ms"] = json_number(generate_ms);
  j["load_ms"] = json_number(f.load_ms);
  j["time_us"] = json_number(median(f.times_us));
  Json times = Json::array();
  for (double t : f.times_us) times.push_back(json_number(t));
  j["times_us"] = times;
  j["timing"] = f.timing;
  j["rerun_bitwise_equal"] = f.rerun_bitwise_equal;
  j["y_digest"] = y_digest(f.y);
  j["layer_notes"] = f.layer_notes;
  j["config"] = config_json(f.config);
  j["check"] = c.enabled;
  j["reference"] = c.enabled ? Json(c.reference) : Json(nullptr);
  j["checked_rows"] = c.checked_rows;
  j["rel_err"] = c.enabled ? json_number(c.rel_err) : Json(nullptr);
  j["threshold"] = c.enabled ? json_number(c.threshold) : Json(nullptr);
  j["bitwise_required"] = c.bitwise_required;
  j["sanity_ok"] = c.enabled ? Json(c.sanity_ok) : Json(nullptr);
  j["sanity"] = c.sanity;
  j["check_passed"] = c.enabled ? Json(c.passed) : Json(nullptr);
  return j;
}

// Flag combinations that parse but mean a mistake; refused before anything is planned.
void check_run_flags(const RunOptions& o, const CheckpointRunOptions& ck) {
  check_checkpoint_flags(ck);
  MOE_EP_CHECK(o.hash_layers == 0 || o.router, "--hash-layers {} needs --router", o.hash_layers);
  MOE_EP_CHECK(o.hash_layers <= o.layers, "--hash-layers {} is above --layers {}; expected at most "
               "the number of layers", o.hash_layers, o.layers);
}

int run_command(const RunOptions& options, const CheckpointRunOptions& ck) {
  check_run_flags(options, ck);
  RunOptions o = options;
  o.problem.budget = {o.ranks, o.layers, o.eplb_redundant};
  // A checkpoint's layer routes with its own router on the host, in the one-layer path below
  // (on --device cuda too: the ids and weights are uploaded like generated ones).
  RunOptions path = o;
  if (ck.given()) {
    MOE_EP_CHECK(o.hash_layers == 0, "--hash-layers {} with --checkpoint: the checkpoint's tid2eid "
                 "tables decide which layers route by hash; drop --hash-layers", o.hash_layers);
    path.router = false;
  }
  refuse_checkpoint_expert_parallel(ck, wants_cuda_expert_parallel_run(path) || wants_expert_parallel_run(path));
  if (wants_cuda_expert_parallel_run(path)) return run_cuda_expert_parallel(o);  // cmd_run_ep_cuda.cpp
  if (wants_cuda_layers_run(path)) return run_cuda_layers(o);  // cli/cmd_run_layers_cuda.cpp
  if (wants_expert_parallel_run(path)) return run_expert_parallel(o);  // cli/cmd_run_ep.cpp
  const ProblemSetup setup = ck.given() ? plan_checkpoint_problem(o.problem, ck, o.tokens, o.ranks)
                                        : plan_problem(o.problem, o.tokens, o.ranks);
  testing::HostInputs inputs = generate_inputs(setup, o.problem, o.tokens);
  if (ck.given() && o.router) route_with_checkpoint_router(setup, inputs, o.problem.seed);
  const auto generate_start = Clock::now();
  const testing::HostWeights weights =
      ck.given() ? checkpoint_weights(setup) : generate_weights(setup, o.problem.seed);
  const double generate_ms = ms_since(generate_start);

  ForwardResult fwd = run_forward(setup, o, weights, inputs);
  if (o.corrupt_row >= 0) {
    MOE_EP_CHECK(o.corrupt_row < o.tokens, "--corrupt-row {} is outside [0, T = {})", o.corrupt_row,
                 o.tokens);
    // One element moved by ~1/8 of the row's scale: the smallest kind of bug the check must see.
    uint16_t& v = fwd.y[o.corrupt_row * setup.desc.fleet.hidden_size];
    v = float_to_bf16(bf16_to_float(v) * 1.125f + 0.125f);
  }
  CheckResult check;
  if (o.check) check = check_output(setup, o, weights, inputs, fwd);

  if (o.json) {
    Json j = result_json(setup, o, inputs, generate_ms, fwd, check);
    add_checkpoint_json(setup, j);
    fmt::print("{}\n", j.dump());
  } else {
    print_summary(setup, o, inputs, generate_ms, fwd, check);
    print_checkpoint_summary(setup);
  }
  if (o.check && !check.passed) {
    fmt::print(stderr, "moe_ep run: check FAILED: rel_err {} (threshold {}), {}, sanity: {}, rerun "
               "bitwise equal: {}\n", check.rel_err, check.threshold,
               check.reference_ok ? "reference ok" : "reference mismatch", check.sanity,
               fwd.rerun_bitwise_equal);
    return kExitFailed;
  }
  return kExitOk;
}

}  // namespace

Command add_run_command(CLI::App& app) {
  auto o = std::make_shared<RunOptions>();
  auto ck = std::make_shared<CheckpointRunOptions>();
  o->problem.holes = 0.05;  // padding-like -1 slots, so the default check covers them
  CLI::App* cmd = app.add_subcommand(
      "run", "Run one forward of a synthetic problem, timed, and check it against the CPU "
             "reference backend (default: tiny preset, auto device, check on).");
  add_problem_options(*cmd, o->problem, "default tiny");
  cmd->add_option("--tokens,-T", o->tokens, "tokens T per rank")->check(integer_at_least(0))
      ->capture_default_str();
  add_on_off_flag(*cmd, "--check", "--no-check", o->check, "compare with the CPU reference (default on)");
  cmd->add_flag("--json", o->json, "print exactly one JSON object on stdout");
  cmd->add_option("--iters", o->iters, "timed forwards (default: 20 on CUDA, 1 on the CPU)")
      ->check(integer_in_range(1, kMaxIterations));
  cmd->add_option("--warmup", o->warmup, "untimed forwards before timing (default: 3 on CUDA, 0 on the CPU)")
      ->check(integer_in_range(0, kMaxIterations));
  cmd->add_flag("--eager", o->eager, "CUDA: time eager forwards instead of CUDA graph replays");
  cmd->add_option("--check-rows", o->check_rows, "rows compared with the reference (sampled evenly)")
      ->check(integer_at_least(1))->capture_default_str();
  cmd->add_option("--ranks", o->ranks, "EP ranks: simulated in-process ranks on the CPU; with --device cuda one process per GPU (or --simulate-ranks-on-one-gpu)")
      ->check(integer_at_least(1))->capture_default_str();
  cmd->add_option("--layers", o->layers, "layers run back to back on the shared workspace")
      ->check(integer_at_least(1))->capture_default_str();
  cmd->add_option("--eplb-redundant", o->eplb_redundant, "redundant physical experts (EPLB)")
      ->check(integer_at_least(0))->capture_default_str();
  cmd->add_flag("--router", o->router, "run the DeepSeek V4 router on synthetic logits first (with "
                "--checkpoint: the checkpoint's own router or hash table on the layer's input)");
  cmd->add_flag("--shared-expert", o->shared_expert, "give every layer a synthetic bf16 shared expert "
                "(Is = the preset's I), which the layer adds to y in its combine");
  cmd->add_option("--hash-layers", o->hash_layers, "--router: the first N layers route by a synthetic "
                  "[vocab, K] hash table indexed by synthetic token ids")
      ->check(integer_at_least(0))->capture_default_str();
  cmd->add_option("--timeout-ms", o->timeout_ms, "expert parallelism: bound on every wait for a peer")
      ->check(integer_at_least(1))->capture_default_str();
  cmd->add_flag("--simulate-ranks-on-one-gpu", o->simulate_ranks_on_one_gpu,
                "--device cuda: run the --ranks ranks as simulated ranks on that one GPU");
  cmd->add_flag("--nccl", o->nccl, "--device cuda: one process per GPU through NCCL (the default "
                "for --ranks > 1), also for --ranks 1");
  cmd->add_option("--ep-rank", o->ep_rank, "rank of a launched NCCL world (internal)")
      ->check(integer_at_least(0))->group("");
  cmd->add_option("--ep-rendezvous", o->ep_rendezvous, "unique-id file of that world (internal)")
      ->group("");
  cmd->add_option("--corrupt-row", o->corrupt_row, "perturb one row of y before the check (tests)")
      ->check(integer_at_least(0))->group("");
  add_checkpoint_run_options(*cmd, *ck);
  return {cmd, [o, ck] { return run_guarded("run", [o, ck] { return run_command(*o, *ck); }); }};
}

}  // namespace moe_ep::cli
