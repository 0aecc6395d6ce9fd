// `moe_ep run --ranks R --device cuda`: expert parallelism on GPUs.
//
//   --simulate-ranks-on-one-gpu   R simulated ranks on the one --device GPU (moe_ep/simulated_group.h):
//                                 every rank its own workspace and local experts, the NCCL path's
//                                 dispatch/combine kernels with the simulation's peer policy;
//                                 --router / --eplb-redundant M route every rank's tokens through
//                                 the device routing stage first (cli/device_routing.h: E = L + M
//                                 physical experts, ids, weights and load counters checked bit for
//                                 bit against the CPU router and Eplb), inside the timed graph;
//   otherwise (or --nccl)         one process per GPU: this process starts itself R times
//                                 (cli/rank_launcher.h) with --ep-rank r --device cuda:r and a
//                                 unique-id file rendezvous, and collects each rank's JSON;
//   --ep-rank r (hidden)          one such rank: an NCCL runtime (comm = unique-id-file), the
//                                 rank's E/R experts, its own T tokens (input stream r).
// Every mode checks the ranks' y against the CPU single-rank layer on the same tokens (float64
// relative error within the recipe's threshold: the GPU and the CPU sum fp32 products in
// different orders), the sanity of every row, and that the timed reruns reproduce y bitwise.
// --shared-expert gives the layer a synthetic bf16 shared expert (Is = I; every rank holds it and
// runs it over its own tokens); the CPU reference layer has the same one.
#include <algorithm>
#include <cmath>
#include <memory>

#include <fmt/format.h>

#include "cli/batch.h"
#include "cli/output_check.h"
#include "cli/problem.h"
#include "cli/rank_launcher.h"
#include "cli/run_ep.h"
#include "cli/synthetic_routing.h"
#include "cli/device_routing.h"
#include "core/check.h"
#include "moe_ep/layer.h"
#include "moe_ep/runtime.h"
#include "moe_ep/simulated_group.h"
#include "testing/tolerances.h"

namespace moe_ep::cli {
namespace {

[[maybe_unused]] testing::HostInputs concat(const std::vector<testing::HostInputs>& parts) {
  testing::HostInputs g = parts.at(0);
  g.num_tokens = 0;
  g.x.clear();
  g.topk_ids.clear();
  g.topk_weights.clear();
  for (const auto& p : parts) {
    g.num_tokens += p.num_tokens;
    g.x.insert(g.x.end(), p.x.begin(), p.x.end());
    g.topk_ids.insert(g.topk_ids.end(), p.topk_ids.begin(), p.topk_ids.end());
    g.topk_weights.insert(g.topk_weights.end(), p.topk_weights.begin(), p.topk_weights.end());
  }
  return g;
}

struct EpCheck {
  double rel_err = NAN, threshold = NAN;
  int64_t checked_rows = 0;
  bool sanity_ok = false, passed = false;
  std::string sanity, reference;
};

// The run's problem: the preset's, plus the shared expert with --shared-expert.
[[maybe_unused]] ProblemSetup plan_ep_problem(const RunOptions& o) {
  // With EPLB the ranks split E = L + redundant experts (checked by run_simulated), not L.
  ProblemSetup s = plan_problem(o.problem, o.tokens, o.eplb_redundant > 0 ? 1 : o.ranks);
  s.world_size = o.ranks;
  if (o.shared_expert) s.desc.shared_intermediate_size = s.desc.intermediate_size;
  return s;
}

// The problem's synthetic weights (all its logical experts), and its shared expert when it has one.
[[maybe_unused]] testing::HostWeights ep_weights(const ProblemSetup& s, const RunOptions& o) {
  testing::HostWeights w = generate_weights(s, o.problem.seed);
  if (s.desc.shared_intermediate_size > 0)
    w.shared = synthetic_shared_expert(o.problem.seed, 0, s.desc.fleet.hidden_size, s.desc.shared_intermediate_size);
  return w;
}

// y of `inputs` (one rank's or the global batch) against the CPU single-rank layer with all the
// experts of `w` (and its shared expert, when the problem has one).
[[maybe_unused]] EpCheck check_against_cpu(const ProblemSetup& s, const RunOptions& o, const WeightPack& w,
                          const testing::HostInputs& in, const std::vector<uint16_t>& y, bool rerun_equal) {
  EpCheck c;
  ProblemSetup one = s;
  one.world_size = 1;
  one.desc.fleet.max_tokens_per_rank = std::max<int64_t>(in.num_tokens, 1);
  const std::vector<int64_t> rows = sample_rows(in.num_tokens, o.check_rows);
  c.checked_rows = static_cast<int64_t>(rows.size());
  const std::vector<uint16_t> ref = cpu_reference_rows(one, w, in, rows, o.problem.threads);
  c.rel_err = rows.empty() ? 0.0 : rel_err_rows(y, ref, s.desc.fleet.hidden_size, rows);
  c.threshold = testing::device_rel_err_threshold(s.desc.recipe, s.desc.numerics.exact_accumulation);
  SanityRule rule;
  rule.shared_expert = s.desc.shared_intermediate_size > 0;
  rule.outputs_zero = s.desc.activation_clamp == 0.0f;
  c.sanity_ok = sanity_check(y, in, &c.sanity, rule);
  c.passed = c.rel_err <= c.threshold && c.sanity_ok && rerun_equal;
  c.reference = fmt::format("cpu single-rank layer (all {} experts{}) forward_rows on {} of {} rows; "
                            "relative error (float64) <= {:g}", s.desc.fleet.num_experts,
                            s.desc.shared_intermediate_size > 0 ? ", the shared expert" : "", rows.size(),
                            in.num_tokens, c.threshold);
  return c;
}

[[maybe_unused]] Json device_workspace_json(const DeviceWorkspaceLayout& l) {
  Json j;
  j["formula"] = device_workspace_formula();
  j["shape"] = l.shape.str();
  j["bytes"] = l.total_bytes;
  j["slot_rows"] = l.slot_rows;
  Json regions = Json::array();
  for (const WorkspaceRegion& r : l.regions)
    regions.push_back({{"name", r.name}, {"offset", r.offset}, {"bytes", r.bytes}});
  j["regions"] = regions;
  return j;
}

[[maybe_unused]] void fill_check_json(Json& j, const EpCheck& c, const RunOptions& o) {
  j["check"] = o.check;
  j["reference"] = o.check ? Json(c.reference) : Json(nullptr);
  j["checked_rows"] = c.checked_rows;
  j["rel_err"] = o.check ? json_number(c.rel_err) : Json(nullptr);
  j["threshold"] = o.check ? json_number(c.threshold) : Json(nullptr);
  j["bitwise_required"] = false;
  j["sanity_ok"] = o.check ? Json(c.sanity_ok) : Json(nullptr);
  j["sanity"] = c.sanity;
  j["check_passed"] = o.check ? Json(c.passed) : Json(nullptr);
}

[[maybe_unused]] int finish(const Json& j, const RunOptions& o, bool passed, const std::string& summary) {
  if (o.json)
    fmt::print("{}\n", j.dump());
  else
    fmt::print("{}", summary);
  if (!passed) {
    fmt::print(stderr, "moe_ep run: check FAILED: {}\n", j.value("failure", std::string("see above")));
    return kExitFailed;
  }
  return kExitOk;
}

#ifdef MOE_EP_WITH_CUDA

int run_simulated(const RunOptions& o) {
  const int R = o.ranks;
  const ProblemSetup s = plan_ep_problem(o);  // L logical experts
  MOE_EP_CHECK_CODE(s.device.device.type == DeviceType::kCUDA, ErrorCode::kUnsupported,
                    "--simulate-ranks-on-one-gpu needs --device cuda[:N]; got {}", o.problem.device);
  MOE_EP_CHECK(o.hash_layers == 0 || o.router, "--hash-layers {} needs --router", o.hash_layers);
  const int64_t L = s.desc.fleet.num_experts, E = L + o.eplb_redundant, K = s.desc.top_k;
  MOE_EP_CHECK(E % R == 0,
               "--eplb-redundant {} with --ranks {}: the {} logical + {} redundant = {} physical experts "
               "must split evenly over the ranks (E % R == 0)", o.eplb_redundant, R, L, o.eplb_redundant, E);
  MoeDesc desc = s.desc;  // the ranks' problem: E physical experts
  desc.fleet.num_experts = E;
  validate_desc(desc, R);
  std::vector<testing::HostInputs> inputs;
  for (int r = 0; r < R; ++r) inputs.push_back(generate_inputs(s, o.problem, o.tokens, r));
  // Routing: every rank's own tokens through the device routing stage (router and / or EPLB
  // remap, when asked for), checked bit for bit against the CPU router and Eplb.
  const RouterConfig rc{L, K, s.preset->routed_scaling_factor, o.hash_layers};
  const SyntheticRouting routes = make_synthetic_routing(o.problem.seed, rc, o.router, o.eplb_redundant, 1, inputs);
  const bool routing_stage = o.router || o.eplb_redundant > 0;
  const testing::HostWeights logical = ep_weights(s, o);
  const testing::HostWeights physical = gather_slots(logical, routes.placement.physical_to_logical());
  const WeightPack all = physical.pack();
  const int64_t E_loc = E / R, H = s.desc.fleet.hidden_size;

  SimulatedGroupOptions go;
  go.world_size = R;
  go.device = s.device.device;
  go.desc = desc;
  go.overrides = s.overrides;
  go.timeout_ms = o.timeout_ms;
  std::vector<WeightPack> packs;
  for (int r = 0; r < R; ++r) packs.push_back(slice_pack(all, r * E_loc, E_loc));
  auto driver = make_driver(s.device.device);
  const std::unique_ptr<SimulatedEpGroup> group = SimulatedEpGroup::create(go, packs);
  DeviceRouting routing(*driver, routes, o.eplb_redundant, s.device.device.index);
  std::vector<DeviceBatch> batches;
  std::vector<ForwardArgs> args;
  for (int r = 0; r < R; ++r) {
    batches.push_back(upload_batch(*driver, inputs[r]));
    ForwardArgs a = batches.back().args;
    a.topk_ids = TensorView::contiguous(routing.ids(0, r), DType::kI32, {o.tokens, K}, driver->device());
    a.topk_weights = TensorView::contiguous(routing.weights(0, r), DType::kF32, {o.tokens, K}, driver->device());
    args.push_back(a);
  }
  auto forward = [&](void* stream) {
    for (int r = 0; r < R; ++r) routing.route(0, r, stream);
    for (ForwardArgs& a : args) a.stream = stream;
    group->forward(args, stream);
  };
  auto y_all = [&] {
    std::vector<uint16_t> y;
    for (const DeviceBatch& b : batches) {
      const std::vector<uint16_t> part = download_y(*driver, b);
      y.insert(y.end(), part.begin(), part.end());
    }
    return y;
  };
  for (const DeviceBatch& b : batches) poison_y(*driver, b);
  routing.poison();
  routing.set_recording(true);
  forward(driver->stream());
  driver->synchronize();
  const uint32_t flags = group->read_error_flags();
  const uint32_t routing_flags = routing.read_error_flags();
  routing.set_recording(false);  // the timed replays leave the counters alone
  const std::vector<int64_t> counters = routing.counters();
  const std::string routing_mismatch = routing.compare();
  const std::vector<uint16_t> y = y_all();
  const int iters = o.iters > 0 ? o.iters : 20, warmup = o.warmup >= 0 ? o.warmup : 3;
  for (const DeviceBatch& b : batches) poison_y(*driver, b);
  const std::vector<double> times = driver->time_forward(forward, warmup, iters, !o.eager);
  const EpStepTimes steps = group->forward_timed(args, driver->stream());
  group->read_error_flags();
  const bool rerun_equal = y_all() == y;
  const bool routing_equal = routing_mismatch.empty() && routing_flags == 0;
  const bool counters_equal = o.eplb_redundant == 0 || (counters == routes.counters && routing.counters() == counters);
  testing::HostInputs global = concat(inputs);  // the logical routing: the reference has the L experts
  global.topk_ids.clear();
  global.topk_weights.clear();
  for (int r = 0; r < R; ++r) {
    global.topk_ids.insert(global.topk_ids.end(), routes.at(0, r).logical.begin(), routes.at(0, r).logical.end());
    global.topk_weights.insert(global.topk_weights.end(), routes.at(0, r).weights.begin(), routes.at(0, r).weights.end());
  }
  EpCheck c;
  if (o.check) c = check_against_cpu(s, o, logical.pack(), global, y, rerun_equal);
  const bool passed = flags == 0 && rerun_equal && routing_equal && counters_equal && (!o.check || c.passed);

  Json j;
  j["command"] = "run";
  j["version"] = MOE_EP_VERSION;
  j.update(problem_json(s, o.problem));
  j["mode"] = "simulate-ranks-on-one-gpu";
  j["tokens"] = o.tokens;
  j["tokens_per_rank"] = o.tokens;
  j["layers"] = 1;
  j["shared_expert"] = o.shared_expert ? Json{{"intermediate_size", s.desc.shared_intermediate_size}} : Json(nullptr);
  j["L"] = L;
  j["E"] = E;
  j["router"] = o.router ? Json{{"kind", "deepseek-v4"}, {"on", "device"},
                                {"routed_scaling_factor", rc.routed_scaling_factor},
                                {"num_hash_layers", rc.num_hash_layers}}
                         : Json(nullptr);
  j["eplb"] = o.eplb_redundant > 0 ? Json{{"redundant", o.eplb_redundant},
                                          {"replicated_logical", routes.replicated},
                                          {"physical_load", counters},
                                          {"counters_equal_cpu", counters_equal}}
                                   : Json(nullptr);
  j["routing_stage"] = routing_stage ? Json("device, every rank's tokens, inside the timed graph") : Json(nullptr);
  j["routing_bitwise_equal_cpu"] = routing_equal;
  j["routing_mismatch"] = routing_mismatch;
  j["time_us"] = json_number(median(times));
  j["timing"] = fmt::format("{} of the {} ranks' forward{} on one GPU, median of {} after {} warm-up",
                            o.eager ? "eager launches" : "cuda graph replays", R,
                            routing_stage ? " with their routing stages" : "", iters, warmup);
  j["steps_us"] = {{"quantize", steps.quantize_us}, {"dispatch", steps.dispatch_us},
                   {"local_experts", steps.local_experts_us}, {"combine", steps.combine_us},
                   {"reduce", steps.reduce_us}};
  j["workspace_bytes"] = group->layout().total_bytes;
  j["workspace"] = device_workspace_json(group->layout());
  j["device_error_flags"] = flags;
  j["rerun_bitwise_equal"] = rerun_equal;
  j["layer_notes"] = group->notes();
  fill_check_json(j, c, o);
  if (!passed)
    j["failure"] = fmt::format("error flags 0x{:x}, rerun bitwise equal {}, rel_err {} (threshold {}), "
                               "sanity: {}; routing {} (flags 0x{:x}), counters equal {}", flags, rerun_equal,
                               c.rel_err, c.threshold, c.sanity, routing_mismatch.empty() ? "equal" : routing_mismatch,
                               routing_flags, counters_equal);
  const std::string summary = fmt::format(
      "moe_ep run: preset {} (H={} I={} L={} logical / E={} physical experts, K={}), backend {}, {} ranks "
      "simulated on {} ({})\n"
      "  tokens {} per rank, max_tokens_per_rank {}, device workspace {} bytes per rank{}{}\n"
      "  forward: {:.1f} us for all ranks ({}); steps (eager, us): quantize {:.1f}, dispatch "
      "{:.1f}, local experts {:.1f}, combine {:.1f}, reduce {:.1f}\n{}"
      "  rerun: y {} the first forward's bitwise\n  check: {}\n         rel_err {:.3e} (threshold "
      "{:g}); sanity: {}\n  result: {}\n",
      s.preset->name, H, s.desc.intermediate_size, L, E, s.desc.top_k, s.desc.traits().name, R,
      s.device.device.str(), s.device.name, o.tokens, s.desc.fleet.max_tokens_per_rank, group->layout().total_bytes,
      o.router ? fmt::format("; DeepSeek V4 router on the device ({} hash layer(s))", o.hash_layers) : "",
      o.shared_expert ? fmt::format("; shared expert Is = {}", s.desc.shared_intermediate_size) : "",
      median(times), j["timing"].get<std::string>(), steps.quantize_us,
      steps.dispatch_us, steps.local_experts_us, steps.combine_us, steps.reduce_us,
      routing_stage ? fmt::format("  routing stage: device ids / weights {} the cpu router and Eplb{}{}\n",
                                  routing_equal ? "bitwise equal to" : "DIFFER FROM (" + routing_mismatch + ")",
                                  o.eplb_redundant > 0 ? fmt::format("; {} redundant experts replicating {}",
                                                                     o.eplb_redundant, Json(routes.replicated).dump())
                                                       : std::string(),
                                  o.eplb_redundant > 0 ? (counters_equal ? "; load counters equal" : "; load counters DIFFER")
                                                       : "")
                    : std::string(),
      rerun_equal ? "equals" : "DIFFERS FROM", o.check ? c.reference : "off", c.rel_err, c.threshold,
      c.sanity, passed ? "PASSED" : "FAILED");
  return finish(j, o, passed, summary);
}

// One NCCL rank of a process-per-GPU world (started by launch_ranks).
int run_nccl_rank(const RunOptions& o) {
  const int R = o.ranks, r = o.ep_rank;
  MOE_EP_CHECK(r >= 0 && r < R, "--ep-rank {} is outside [0, --ranks {})", r, R);
  MOE_EP_CHECK(!o.ep_rendezvous.empty(), "--ep-rank needs --ep-rendezvous (the unique-id file)");
  const ProblemSetup s = plan_ep_problem(o);
  const testing::HostWeights weights = ep_weights(s, o);
  const WeightPack all = weights.pack();
  const testing::HostInputs in = generate_inputs(s, o.problem, o.tokens, r);
  const int64_t E_loc = s.desc.fleet.num_experts / R;

  std::vector<uint16_t> y;
  std::vector<double> times;
  bool rerun_equal = false;
  int64_t workspace_bytes = 0;
  std::string notes;
  {
    auto driver = make_driver(s.device.device);
    Bootstrap b;
    b.world_size = R;
    b.rank = r;
    b.device = s.device.device;
    b.comm = CommSource::kUniqueIdFile;
    b.rendezvous = o.ep_rendezvous;
    b.timeout_ms = o.timeout_ms;
    auto rt = Runtime::acquire(b);
    auto layer = Layer::create(rt, s.desc, slice_pack(all, r * E_loc, E_loc), s.overrides);
    workspace_bytes = rt->workspace()->bytes();
    notes = layer->info().notes;
    DeviceBatch batch = upload_batch(*driver, in);
    poison_y(*driver, batch);
    layer->forward(batch.args);
    driver->synchronize();
    layer->check_error_flags();
    y = download_y(*driver, batch);
    const int iters = o.iters > 0 ? o.iters : 20, warmup = o.warmup >= 0 ? o.warmup : 3;
    poison_y(*driver, batch);
    times = driver->time_forward([&](void* stream) {
      batch.args.stream = stream;
      layer->forward(batch.args);
    }, warmup, iters, !o.eager);
    layer->check_error_flags();
    rerun_equal = download_y(*driver, batch) == y;
  }  // the layer, then the runtime, are released here: the CPU reference needs its own world
  EpCheck c;
  if (o.check) c = check_against_cpu(s, o, all, in, y, rerun_equal);
  const bool passed = rerun_equal && (!o.check || c.passed);
  Json j;
  j["command"] = "run";
  j.update(problem_json(s, o.problem));
  j["mode"] = "nccl-rank";
  j["shared_expert"] = o.shared_expert ? Json{{"intermediate_size", s.desc.shared_intermediate_size}} : Json(nullptr);
  j["rank"] = r;
  j["tokens"] = o.tokens;
  j["time_us"] = json_number(median(times));
  j["workspace_bytes"] = workspace_bytes;
  j["rerun_bitwise_equal"] = rerun_equal;
  j["layer_notes"] = notes;
  fill_check_json(j, c, o);
  fmt::print("{}\n", j.dump());
  return passed ? kExitOk : kExitFailed;
}

std::vector<std::string> rank_args(const RunOptions& o, int r, const std::string& rendezvous) {
  const ProblemOptions& p = o.problem;
  std::vector<std::string> a = {"run", "--preset", p.preset, "--backend", p.backend, "--weights",
                                p.weights, "--seed", std::to_string(p.seed), "--tokens",
                                std::to_string(o.tokens), "--holes", fmt::format("{}", p.holes),
                                "--ranks", std::to_string(o.ranks), "--device", fmt::format("cuda:{}", r),
                                "--check-rows", std::to_string(o.check_rows), "--timeout-ms",
                                std::to_string(o.timeout_ms), "--ep-rank", std::to_string(r),
                                "--ep-rendezvous", rendezvous, "--json"};
  if (p.max_tokens_per_rank > 0) a.insert(a.end(), {"--max-tokens-per-rank", std::to_string(p.max_tokens_per_rank)});
  if (p.threads > 0) a.insert(a.end(), {"--threads", std::to_string(p.threads)});
  if (o.iters > 0) a.insert(a.end(), {"--iters", std::to_string(o.iters)});
  if (o.warmup >= 0) a.insert(a.end(), {"--warmup", std::to_string(o.warmup)});
  if (!o.check) a.push_back("--no-check");
  if (o.shared_expert) a.push_back("--shared-expert");
  if (o.eager) a.push_back("--eager");
  return a;
}

int launch_ranks(const RunOptions& o) {
  require_gpus_for_ranks(o.ranks, "moe_ep run");
  const std::string nccl = transport_status("nccl");
  MOE_EP_CHECK_CODE(nccl.rfind("nccl ", 0) == 0, ErrorCode::kUnsupported,
                    "moe_ep run --ranks {} --device cuda needs NCCL: {}", o.ranks, nccl);
  const RankProcesses folder = make_rank_folder();
  std::vector<std::vector<std::string>> argv;
  for (int r = 0; r < o.ranks; ++r) argv.push_back(rank_args(o, r, folder.rendezvous));
  // Each rank bounds every wait by --timeout-ms; the launcher allows them that plus set-up.
  const std::vector<Json> ranks = run_rank_processes(folder, argv, 2 * o.timeout_ms + 600000);
  bool passed = true;
  double worst_err = 0, slowest = 0;
  for (const Json& j : ranks) {
    passed = passed && j.value("exit_status", 1) == 0 &&
             (!o.check || j.value("check_passed", false)) && j.value("rerun_bitwise_equal", false);
    if (j["rel_err"].is_number()) worst_err = std::max(worst_err, j["rel_err"].get<double>());
    if (j["time_us"].is_number()) slowest = std::max(slowest, j["time_us"].get<double>());
  }
  Json j = ranks[0];
  j["mode"] = "nccl-process-per-gpu";
  j.erase("rank");
  j["device"] = fmt::format("cuda:0..{}", o.ranks - 1);
  j["time_us"] = json_number(slowest);
  j["timing"] = "the slowest rank's median forward (cuda graph replays unless --eager)";
  j["rel_err"] = json_number(worst_err);
  j["check_passed"] = o.check ? Json(passed) : Json(nullptr);
  j["per_rank"] = ranks;
  if (!passed) j["failure"] = "a rank failed its check (see per_rank)";
  std::string summary = fmt::format("moe_ep run: {} NCCL ranks, one process per GPU, preset {} backend {}, "
                                    "{} tokens per rank\n", o.ranks, o.problem.preset,
                                    o.problem.backend, o.tokens);
  for (const Json& r : ranks)
    summary += fmt::format("  rank {}: {:.1f} us, rel_err {}, check {}\n", r.value("rank", -1),
                           r["time_us"].is_number() ? r["time_us"].get<double>() : NAN,
                           r["rel_err"].dump(), r["check_passed"].dump());
  summary += fmt::format("  result: {}\n", passed ? "PASSED" : "FAILED");
  return finish(j, o, passed, summary);
}

#endif  // MOE_EP_WITH_CUDA

}  // namespace

bool wants_cuda_expert_parallel_run(const RunOptions& o) {
  const bool cuda = o.problem.device.rfind("cuda", 0) == 0;
  return o.ep_rank >= 0 || o.simulate_ranks_on_one_gpu || (cuda && (o.ranks > 1 || o.nccl));
}

int run_cuda_expert_parallel(const RunOptions& o) {
  MOE_EP_CHECK_CODE(o.layers == 1, ErrorCode::kUnsupported,
                    "--layers {} on GPU ranks: the CUDA expert-parallel path (--ranks > 1, --nccl, "
                    "--simulate-ranks-on-one-gpu) runs one layer; chains of layers run on one GPU "
                    "(--device cuda --ranks 1) or on simulated CPU ranks (--device cpu)", o.layers);
  MOE_EP_CHECK_CODE(o.simulate_ranks_on_one_gpu || (o.eplb_redundant == 0 && !o.router), ErrorCode::kUnsupported,
                    "--eplb-redundant / --router on GPU ranks run with --simulate-ranks-on-one-gpu (or on one "
                    "GPU, --ranks 1, or on simulated CPU ranks); NCCL ranks take the generated routing");
  MOE_EP_CHECK(!(o.simulate_ranks_on_one_gpu && o.nccl),
               "--simulate-ranks-on-one-gpu and --nccl exclude each other");
#ifdef MOE_EP_WITH_CUDA
  if (o.ep_rank >= 0) return run_nccl_rank(o);
  if (o.simulate_ranks_on_one_gpu) return run_simulated(o);
  return launch_ranks(o);
#else
  MOE_EP_FAIL(ErrorCode::kUnsupported, "this build has no CUDA backend; --ranks on GPUs needs it");
#endif
}

}  // namespace moe_ep::cli
