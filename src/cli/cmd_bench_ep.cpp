// `moe_ep bench --ranks R --device cuda` (cli/bench_ep.h).
//
// Each T gets its own world with max_tokens_per_rank = T (unless --max-tokens-per-rank is
// given): the receive buffers and the local experts' rows scale with R * max_tokens_per_rank *
// K, so a decode-sized world is what a deployment would run at T = 1.
//
// Bytes counted (payload, one direction): dispatch = every valid slot's activation row (codes,
// scales, nvfp4 global) + its weight and expert id, plus R*R counts; combine = every valid slot's
// o_k row (2H bytes). GB/s = bytes / kernel time (CUDA events around the launch; on one GPU all
// ranks' traffic is HBM traffic of that GPU, not NVLink).
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>

#include <fmt/format.h>

#include "cli/batch.h"
#include "cli/bench_ep.h"
#include "cli/rank_launcher.h"
#include "core/check.h"
#include "moe_ep/layer.h"
#include "moe_ep/quant.h"
#include "moe_ep/runtime.h"
#include "moe_ep/simulated_group.h"

namespace moe_ep::cli {
namespace {

struct Row {
  int64_t tokens = 0, valid_slots = 0;
  double time_us = NAN, dispatch_us = NAN, combine_us = NAN, local_us = NAN, quantize_us = NAN,
         reduce_us = NAN;
  int64_t dispatch_bytes = 0, combine_bytes = 0;
  double gbps(int64_t bytes, double us) const { return bytes / (us * 1e-6) / 1e9; }
};

[[maybe_unused]] ProblemOptions options_for(const BenchEpOptions& o, int64_t T) {
  ProblemOptions p = o.problem;
  if (p.max_tokens_per_rank <= 0) p.max_tokens_per_rank = std::max<int64_t>(T, 1);
  return p;
}

#ifdef MOE_EP_WITH_CUDA

std::vector<Row> bench_simulated(const BenchEpOptions& o, const ProblemSetup& first, std::string* notes) {
  const int R = o.ranks;
  const testing::HostWeights weights = generate_weights(first, o.problem.seed);
  const int64_t E_loc = first.desc.fleet.num_experts / R, H = first.desc.fleet.hidden_size;
  const RecipeTraits& recipe = first.desc.traits();
  const int64_t row_bytes = recipe.code_bytes(H) + recipe.scale_count(H) + (recipe.global_scales ? 4 : 0) + 8;
  std::vector<WeightPack> packs;
  for (int r = 0; r < R; ++r) packs.push_back(slice_pack(weights.pack(), r * E_loc, E_loc));
  auto driver = make_driver(first.device.device);
  const int iters = o.iters > 0 ? o.iters : 20, warmup = o.warmup >= 0 ? o.warmup : 3;
  std::vector<Row> rows;
  for (int64_t T : o.tokens) {
    const ProblemOptions po = options_for(o, T);
    const ProblemSetup s = plan_problem(po, T, R);
    const SimulatedGroupOptions go{R, s.device.device, s.desc, s.overrides, o.timeout_ms};
    const std::unique_ptr<SimulatedEpGroup> group = SimulatedEpGroup::create(go, packs);
    if (notes->empty()) *notes = group->notes();
    std::vector<DeviceBatch> batches;
    std::vector<ForwardArgs> args;
    Row row;
    row.tokens = T;
    for (int r = 0; r < R; ++r) {
      const testing::HostInputs in = generate_inputs(s, po, T, r);
      row.valid_slots += in.num_valid_slots();
      batches.push_back(upload_batch(*driver, in));
      args.push_back(batches.back().args);
    }
    row.dispatch_bytes = row.valid_slots * row_bytes + 4LL * R * R;
    row.combine_bytes = row.valid_slots * 2 * H;
    const std::vector<double> times = driver->time_forward(
        [&](void* stream) {
          for (ForwardArgs& a : args) a.stream = stream;
          group->forward(args, stream);
        },
        warmup, iters, !o.eager);
    row.time_us = median(times);
    std::vector<double> d, c, l, q, red;
    for (int i = 0; i < iters; ++i) {
      const EpStepTimes st = group->forward_timed(args, driver->stream());
      d.push_back(st.dispatch_us);
      c.push_back(st.combine_us);
      l.push_back(st.local_experts_us);
      q.push_back(st.quantize_us);
      red.push_back(st.reduce_us);
    }
    row.dispatch_us = median(d);
    row.combine_us = median(c);
    row.local_us = median(l);
    row.quantize_us = median(q);
    row.reduce_us = median(red);
    group->read_error_flags();
    rows.push_back(row);
    if (!o.json)
      fmt::print("  {:>6} {:>7} {:>11.1f} {:>11.1f} {:>9.1f} {:>11.1f} {:>9.1f} {:>11.1f}\n", T,
                 row.valid_slots, row.time_us, row.dispatch_us, row.gbps(row.dispatch_bytes, row.dispatch_us),
                 row.combine_us, row.gbps(row.combine_bytes, row.combine_us), row.local_us);
  }
  return rows;
}

// A launched rank: one NCCL world per T (rendezvous file <prefix>.T<T>), its layer time.
int bench_rank(const BenchEpOptions& o) {
  const int R = o.ranks, r = o.ep_rank;
  MOE_EP_CHECK(r >= 0 && r < R, "--ep-rank {} is outside [0, --ranks {})", r, R);
  Json per_t = Json::array();
  const int iters = o.iters > 0 ? o.iters : 20, warmup = o.warmup >= 0 ? o.warmup : 3;
  for (int64_t T : o.tokens) {
    const ProblemOptions po = options_for(o, T);
    const ProblemSetup s = plan_problem(po, T, R);
    const testing::HostWeights weights = generate_weights(s, o.problem.seed);
    const int64_t E_loc = s.desc.fleet.num_experts / R;
    auto driver = make_driver(s.device.device);
    Bootstrap b;
    b.world_size = R;
    b.rank = r;
    b.device = s.device.device;
    b.comm = CommSource::kUniqueIdFile;
    b.rendezvous = fmt::format("{}.T{}", o.ep_rendezvous, T);
    b.timeout_ms = o.timeout_ms;
    auto rt = Runtime::acquire(b);
    auto layer = Layer::create(rt, s.desc, slice_pack(weights.pack(), r * E_loc, E_loc), s.overrides);
    const testing::HostInputs in = generate_inputs(s, po, T, r);
    DeviceBatch batch = upload_batch(*driver, in);
    const std::vector<double> times = driver->time_forward([&](void* stream) {
      batch.args.stream = stream;
      layer->forward(batch.args);
    }, warmup, iters, !o.eager);
    layer->check_error_flags();
    per_t.push_back({{"tokens", T}, {"valid_slots", in.num_valid_slots()}, {"time_us", json_number(median(times))}});
  }
  fmt::print("{}\n", Json{{"command", "bench"}, {"mode", "nccl-rank"}, {"rank", r}, {"rows", per_t}}.dump());
  return kExitOk;
}

std::vector<Row> bench_launched(const BenchEpOptions& o) {
  require_gpus_for_ranks(o.ranks, "moe_ep bench");
  const std::string nccl = transport_status("nccl");
  MOE_EP_CHECK_CODE(nccl.rfind("nccl ", 0) == 0, ErrorCode::kUnsupported,
                    "moe_ep bench --ranks {} --device cuda needs NCCL: {}", o.ranks, nccl);
  const RankProcesses folder = make_rank_folder();
  std::vector<std::vector<std::string>> argv;
  std::string tokens;
  for (int64_t t : o.tokens) tokens += fmt::format("{}{}", tokens.empty() ? "" : ",", t);
  for (int r = 0; r < o.ranks; ++r) {
    const ProblemOptions& p = o.problem;
    std::vector<std::string> a = {"bench", "--preset", p.preset, "--backend", p.backend, "--weights",
                                  p.weights, "--seed", std::to_string(p.seed), "--tokens", tokens,
                                  "--holes", fmt::format("{}", p.holes), "--ranks",
                                  std::to_string(o.ranks), "--device", fmt::format("cuda:{}", r),
                                  "--timeout-ms", std::to_string(o.timeout_ms), "--ep-rank",
                                  std::to_string(r), "--ep-rendezvous", folder.rendezvous};
    if (p.max_tokens_per_rank > 0) a.insert(a.end(), {"--max-tokens-per-rank", std::to_string(p.max_tokens_per_rank)});
    if (o.iters > 0) a.insert(a.end(), {"--iters", std::to_string(o.iters)});
    if (o.warmup >= 0) a.insert(a.end(), {"--warmup", std::to_string(o.warmup)});
    if (o.eager) a.push_back("--eager");
    argv.push_back(a);
  }
  const std::vector<Json> ranks = run_rank_processes(folder, argv, 2 * o.timeout_ms + 1200000);
  std::vector<Row> rows;
  for (size_t i = 0; i < o.tokens.size(); ++i) {
    Row row;
    row.tokens = o.tokens[i];
    row.time_us = 0;
    for (const Json& j : ranks) {
      const Json& ri = j["rows"][i];
      row.valid_slots += ri["valid_slots"].get<int64_t>();
      if (ri["time_us"].is_number()) row.time_us = std::max(row.time_us, ri["time_us"].get<double>());
    }
    rows.push_back(row);
    if (!o.json) fmt::print("  {:>6} {:>7} {:>11.1f}   (slowest rank)\n", row.tokens, row.valid_slots, row.time_us);
  }
  return rows;
}

#endif  // MOE_EP_WITH_CUDA

}  // namespace

bool wants_bench_expert_parallel(const BenchEpOptions& o) {
  return o.ep_rank >= 0 || o.simulate_ranks_on_one_gpu || o.ranks > 1;
}

int bench_expert_parallel(const BenchEpOptions& o) {
  MOE_EP_CHECK(!o.tokens.empty(), "--tokens is empty; expected a list such as 1,128,4096");
#ifdef MOE_EP_WITH_CUDA
  if (o.ep_rank >= 0) return bench_rank(o);
  const int64_t max_t = *std::max_element(o.tokens.begin(), o.tokens.end());
  const ProblemSetup first = plan_problem(options_for(o, max_t), max_t, o.ranks);
  MOE_EP_CHECK_CODE(first.device.device.type == DeviceType::kCUDA, ErrorCode::kUnsupported,
                    "moe_ep bench --ranks {}: expert-parallel benchmarks run on --device cuda; got "
                    "{} (`moe_ep run --ranks R --device cpu` checks the CPU ranks)", o.ranks,
                    first.device.device.str());
  const bool sim = o.simulate_ranks_on_one_gpu;
  if (!o.json) {
    fmt::print("moe_ep bench: preset {} (H={} I={} E={} K={}), backend {}, {} ranks {} ({}); "
               "max_tokens_per_rank = T per row\n", first.preset->name, first.desc.fleet.hidden_size,
               first.desc.intermediate_size, first.desc.fleet.num_experts, first.desc.top_k,
               first.desc.traits().name, o.ranks, sim ? "simulated on " + first.device.device.str()
                                                 : std::string("one process per GPU"), first.device.name);
    fmt::print("  {:>6} {:>7} {:>11} {:>11} {:>9} {:>11} {:>9} {:>11}\n", "T/rank", "slots", "layer_us",
               "dispatch_us", "disp_GB/s", "combine_us", "comb_GB/s", "experts_us");
  }
  std::string notes;
  const std::vector<Row> rows = sim ? bench_simulated(o, first, &notes) : bench_launched(o);
  if (!o.csv.empty()) {
    std::ofstream csv(o.csv);
    MOE_EP_CHECK(csv.good(), "--csv '{}' cannot be opened for writing", o.csv);
    csv << "preset,backend,ranks,mode,tokens_per_rank,valid_slots,time_us,quantize_us,dispatch_us,"
           "dispatch_bytes,dispatch_gbps,local_experts_us,combine_us,combine_bytes,combine_gbps,reduce_us\n";
    for (const Row& r : rows)
      csv << fmt::format("{},{},{},{},{},{},{:.3f},{:.3f},{:.3f},{},{:.2f},{:.3f},{:.3f},{},{:.2f},{:.3f}\n",
                         first.preset->name, first.desc.traits().name, o.ranks,
                         sim ? "simulate-ranks-on-one-gpu" : "nccl-process-per-gpu", r.tokens,
                         r.valid_slots, r.time_us, r.quantize_us, r.dispatch_us, r.dispatch_bytes,
                         r.gbps(r.dispatch_bytes, r.dispatch_us), r.local_us, r.combine_us,
                         r.combine_bytes, r.gbps(r.combine_bytes, r.combine_us), r.reduce_us);
    csv.close();  // flushes: a full disk shows here, not at open
    MOE_EP_CHECK_CODE(!csv.fail(), ErrorCode::kRuntime, "--csv '{}': writing failed ({})", o.csv,
                      std::strerror(errno));
  }
  if (o.json) {
    Json j;
    j["command"] = "bench";
    j.update(problem_json(first, o.problem));
    j["mode"] = sim ? "simulate-ranks-on-one-gpu" : "nccl-process-per-gpu";
    j["timing"] = o.eager ? "eager" : "cuda-graph-replay";
    j["bandwidth_bytes"] = "payload one direction: dispatch = valid slots x (row codes + scales + "
                           "global + weight + id) + R*R counts; combine = valid slots x 2H";
    Json arr = Json::array();
    for (const Row& r : rows)
      arr.push_back({{"tokens_per_rank", r.tokens}, {"valid_slots", r.valid_slots},
                     {"time_us", json_number(r.time_us)}, {"quantize_us", json_number(r.quantize_us)},
                     {"dispatch_us", json_number(r.dispatch_us)}, {"dispatch_bytes", r.dispatch_bytes},
                     {"dispatch_gbps", json_number(r.gbps(r.dispatch_bytes, r.dispatch_us))},
                     {"local_experts_us", json_number(r.local_us)},
                     {"combine_us", json_number(r.combine_us)}, {"combine_bytes", r.combine_bytes},
                     {"combine_gbps", json_number(r.gbps(r.combine_bytes, r.combine_us))},
                     {"reduce_us", json_number(r.reduce_us)}});
    j["rows"] = arr;
    j["notes"] = notes;
    fmt::print("{}\n", j.dump());
  } else if (!sim) {
    fmt::print("  (dispatch / combine kernel times are measured on the one-GPU simulation: "
               "--simulate-ranks-on-one-gpu)\n");
  }
  return kExitOk;
#else
  (void)o;
  MOE_EP_FAIL(ErrorCode::kUnsupported, "this build has no CUDA backend; bench --ranks needs it");
#endif
}

}  // namespace moe_ep::cli
