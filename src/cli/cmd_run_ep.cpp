// `moe_ep run --ranks R --layers N --eplb-redundant M --router` on simulated CPU ranks.
//
//   1. one synthetic problem: L = the preset's experts (logical), each rank r its own T tokens
//      (input stream r); with --router the ids and weights of layer l on rank r come from the
//      DeepSeek V4 router on synthetic logits (stream (l, r)), else every layer uses the
//      generated routing;
//   2. --eplb-redundant M: E = L + M physical experts, the M replicas planned from the logical
//      load of layer 0, every rank remapping its ids (load counters recorded in the first pass);
//   3. R threads, one simulated rank each, each with its E/R physical experts and N layers
//      (all with the same synthetic routed weights; with --shared-expert each layer its own bf16
//      shared expert, Is = I, which every rank holds) on the process's one workspace; layer l + 1
//      takes layer l's y as x, each row scaled by a power of two to a largest magnitude in [1, 2)
//      (scale_rows_to_unit_amax: the signal would otherwise fade to zero over the chain);
//   4. --check: the single-process CPU layer with the L logical experts runs the same N-layer
//      chain on the global batch (rank 0's tokens first); the ranks' final y must be equal to
//      it bit for bit (replicas carry identical weights, so EPLB must not change a bit).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <exception>
#include <memory>
#include <random>
#include <thread>

#include <fmt/format.h>

#include "cli/output_check.h"
#include "cli/problem.h"
#include "cli/run_ep.h"
#include "cli/synthetic_routing.h"
#include "cli/workspace_report.h"
#include "core/check.h"
#include "moe_ep/eplb.h"
#include "moe_ep/formats.h"
#include "moe_ep/layer.h"
#include "moe_ep/router.h"
#include "moe_ep/runtime.h"

namespace moe_ep::cli {
namespace {

using Clock = std::chrono::steady_clock;

double us_since(Clock::time_point start) {
  return std::chrono::duration<double, std::micro>(Clock::now() - start).count();
}

struct Plan {
  ProblemSetup setup;  // the logical problem (fleet.num_experts = L)
  MoeDesc desc;        // the problem of the ranks: the physical fleet (E = L + redundant)
  int R = 1, N = 1;
  int64_t T = 0, L = 0, E = 0;
  std::vector<testing::HostInputs> inputs;  // [rank]: x and the generated routing
  SyntheticRouting routing;                 // per (layer, rank): logical and physical ids
  std::vector<int32_t> physical_to_logical;  // [E]
  std::vector<SharedExpertWeights> shared;  // [layer], with --shared-expert
};

// Layer l's weights: the routed `pack` and layer l's shared expert, when there is one.
WeightPack layer_pack(const Plan& p, const WeightPack& pack, int l) {
  return p.shared.empty() ? pack : p.shared[l].attach(pack);
}

Plan make_plan(const RunOptions& o) {
  MOE_EP_CHECK(o.hash_layers == 0 || o.router, "--hash-layers {} needs --router", o.hash_layers);
  Plan p;
  ProblemOptions opts = o.problem;
  if (opts.device == "auto") opts.device = "cpu";
  p.setup = plan_problem(opts, o.tokens, 1);
  MOE_EP_CHECK_CODE(p.setup.device.device.type == DeviceType::kCPU, ErrorCode::kUnsupported,
                    "--device {}: --ranks > 1 with --layers / --eplb-redundant / --router runs on "
                    "simulated ranks on the CPU (--device cpu); on a GPU these run with --ranks 1 "
                    "(one GPU, cmd_run_layers_cuda)", o.problem.device);
  p.R = o.ranks;
  p.N = o.layers;
  p.T = o.tokens;
  p.L = p.setup.desc.fleet.num_experts;
  p.E = p.L + o.eplb_redundant;
  p.setup.world_size = p.R;
  if (o.shared_expert) p.setup.desc.shared_intermediate_size = p.setup.desc.intermediate_size;
  p.desc = p.setup.desc;
  p.desc.fleet.num_experts = p.E;
  MOE_EP_CHECK(p.E % p.R == 0,
               "--eplb-redundant {} with --ranks {}: the {} logical + {} redundant = {} physical "
               "experts must split evenly over the ranks (E % R == 0)",
               o.eplb_redundant, p.R, p.L, o.eplb_redundant, p.E);
  validate_desc(p.desc, p.R);

  const int64_t K = p.setup.desc.top_k;
  for (int r = 0; r < p.R; ++r) p.inputs.push_back(generate_inputs(p.setup, opts, p.T, r));
  if (o.shared_expert)
    for (int l = 0; l < p.N; ++l)
      p.shared.push_back(synthetic_shared_expert(o.problem.seed, l, p.desc.fleet.hidden_size,
                                                 p.desc.shared_intermediate_size));

  const RouterConfig rc{p.L, K, p.setup.preset->routed_scaling_factor, o.hash_layers};
  p.routing = make_synthetic_routing(o.problem.seed, rc, o.router, o.eplb_redundant, p.N, p.inputs);
  p.physical_to_logical = p.routing.placement.physical_to_logical();
  return p;
}

struct RankResult {
  std::vector<uint16_t> y;  // final layer, first pass
  std::vector<double> times_us;
  bool rerun_equal = false;
  bool workspace_clean = true;
  int64_t workspace_bytes = 0;
  std::string workspace_shape, notes;
  SelectedConfig config;
  std::exception_ptr error;
  ErrorCode code = ErrorCode::kInternal;
};

bool counts_clean(const Workspace& ws, int rank) {
  const auto& l = ws.layout();
  for (WorkspaceRegionId id : {WorkspaceRegionId::kRecvCounts, WorkspaceRegionId::kExpertCounts}) {
    const auto* b = reinterpret_cast<const uint8_t*>(ws.region(rank, id));
    if (std::any_of(b, b + l[id].bytes, [](uint8_t v) { return v != 0; })) return false;
  }
  return true;
}

void run_rank_body(const Plan& p, const RunOptions& o, const testing::HostWeights& logical, int r,
                   const std::shared_ptr<Runtime>& rt, RankResult& out) {
  const int64_t H = p.desc.fleet.hidden_size, K = p.setup.desc.top_k, E_loc = p.E / p.R;
  const std::span<const int32_t> slots(p.physical_to_logical.data() + r * E_loc, E_loc);
  const testing::HostWeights mine = gather_slots(logical, slots);
  std::vector<std::unique_ptr<Layer>> layers;
  for (int l = 0; l < p.N; ++l)
    layers.push_back(Layer::create(rt, p.desc, layer_pack(p, mine.pack(), l), p.setup.overrides));
  out.workspace_bytes = rt->workspace()->bytes();
  out.workspace_shape = rt->workspace()->shape().str();
  if (r == 0) out.notes = layers[0]->info().notes;
  if (r == 0) out.config = layers[0]->info().config;

  std::vector<std::vector<uint16_t>> y(p.N, std::vector<uint16_t>(p.T * H));
  std::vector<uint16_t> x_next;  // layer l's input for l > 0: layer l - 1's y, rescaled
  auto pass = [&] {
    for (auto& yl : y) std::fill(yl.begin(), yl.end(), uint16_t{0xFFFF});  // NaN poison
    for (int l = 0; l < p.N; ++l) {
      const RoutedBatch& route = p.routing.at(l, r);
      ForwardArgs a;
      if (l > 0) {
        x_next = y[l - 1];
        scale_rows_to_unit_amax(x_next, H);
      }
      const uint16_t* x = l == 0 ? p.inputs[r].x.data() : x_next.data();
      a.x = TensorView::contiguous(const_cast<uint16_t*>(x), DType::kBF16, {p.T, H});
      a.topk_ids = TensorView::contiguous(const_cast<int32_t*>(route.physical.data()), DType::kI32, {p.T, K});
      a.topk_weights = TensorView::contiguous(const_cast<float*>(route.weights.data()), DType::kF32, {p.T, K});
      a.y = TensorView::contiguous(y[l].data(), DType::kBF16, {p.T, H});
      layers[l]->forward(a);
      layers[l]->check_error_flags();
    }
  };
  pass();
  out.y = y.back();
  // Every rank is past its last forward between these barriers: the count regions must be zero.
  rt->barrier("check workspace clean");
  out.workspace_clean = counts_clean(*rt->workspace(), r);
  rt->barrier("checked workspace clean");
  const int iters = o.iters > 0 ? o.iters : 1;
  for (int i = 0; i < std::max(o.warmup, 0); ++i) pass();
  for (int i = 0; i < iters; ++i) {
    const auto start = Clock::now();
    pass();
    out.times_us.push_back(us_since(start));
  }
  out.rerun_equal = y.back() == out.y;
}

void run_rank(const Plan& p, const RunOptions& o, const testing::HostWeights& logical, int r,
              RankResult& out) {
  Bootstrap boot;
  boot.world_size = p.R;
  boot.rank = r;
  boot.comm = CommSource::kSimulated;
  boot.timeout_ms = o.timeout_ms;
  auto rt = Runtime::acquire(boot);
  try {
    run_rank_body(p, o, logical, r, rt, out);
  } catch (const std::exception& e) {
    // This rank leaves: its peers must not wait for it in their next collective step.
    rt->abort(e.what());
    throw;
  } catch (...) {
    rt->abort("an exception that is not a std::exception");
    throw;
  }
}

std::vector<RankResult> run_ranks(const Plan& p, const RunOptions& o, const testing::HostWeights& logical) {
  std::vector<RankResult> results(p.R);
  std::vector<std::thread> threads;
  for (int r = 0; r < p.R; ++r)
    threads.emplace_back([&, r] {
      try {
        run_rank(p, o, logical, r, results[r]);
      } catch (const Error& e) {
        results[r].error = std::current_exception();
        results[r].code = e.code();
      } catch (...) {
        results[r].error = std::current_exception();
      }
    });
  for (auto& t : threads) t.join();
  // Report the root cause: a rank's own error before the errors it caused on the others.
  for (int pass = 0; pass < 2; ++pass)
    for (const RankResult& res : results)
      if (res.error && (pass == 1 || (res.code != ErrorCode::kRuntime && res.code != ErrorCode::kTimeout)))
        std::rethrow_exception(res.error);
  return results;
}

struct Check {
  bool enabled = false, reference_ok = false, sanity_ok = true, passed = false;
  int64_t checked_rows = 0;
  std::string reference, sanity, first_mismatch;
};

// The global batch through N single-rank layers with the logical experts; compares the last
// layer's rows (sampled by --check-rows) with the ranks' y bit for bit.
Check check_against_single_rank(const Plan& p, const RunOptions& o, const testing::HostWeights& logical,
                                const std::vector<RankResult>& ranks) {
  Check c;
  c.enabled = true;
  const int64_t H = p.desc.fleet.hidden_size, K = p.setup.desc.top_k, G = p.T * p.R;
  MoeDesc single = p.setup.desc;
  single.fleet.max_tokens_per_rank = std::max<int64_t>(G, 1);
  auto rt = Runtime::acquire(Bootstrap{});
  std::vector<std::unique_ptr<Layer>> layers;  // one per layer with per-layer shared experts
  for (int l = 0; l < (p.shared.empty() ? 1 : p.N); ++l)
    layers.push_back(Layer::create(rt, single, layer_pack(p, logical.pack(), l), p.setup.overrides));
  std::vector<uint16_t> x(G * H), y(G * H);
  for (int r = 0; r < p.R; ++r) std::copy(p.inputs[r].x.begin(), p.inputs[r].x.end(), x.begin() + r * p.T * H);
  const std::vector<int64_t> rows = sample_rows(G, o.check_rows);
  for (int l = 0; l < p.N; ++l) {
    std::vector<int32_t> ids(G * K);
    std::vector<float> w(G * K);
    for (int r = 0; r < p.R; ++r) {
      const RoutedBatch& route = p.routing.at(l, r);
      std::copy(route.logical.begin(), route.logical.end(), ids.begin() + r * p.T * K);
      std::copy(route.weights.begin(), route.weights.end(), w.begin() + r * p.T * K);
    }
    ForwardArgs a;
    a.x = TensorView::contiguous(x.data(), DType::kBF16, {G, H});
    a.topk_ids = TensorView::contiguous(ids.data(), DType::kI32, {G, K});
    a.topk_weights = TensorView::contiguous(w.data(), DType::kF32, {G, K});
    a.y = TensorView::contiguous(y.data(), DType::kBF16, {G, H});
    std::fill(y.begin(), y.end(), uint16_t{0xFFFF});
    Layer& layer = *layers[p.shared.empty() ? 0 : l];
    if (l + 1 < p.N)
      layer.forward(a);
    else
      layer.forward_rows(a, rows);
    std::swap(x, y);
    if (l + 1 < p.N) scale_rows_to_unit_amax(x, H);  // as every rank does between its layers
  }
  const std::vector<uint16_t>& ref = x;  // the last layer's output
  c.checked_rows = static_cast<int64_t>(rows.size());
  c.reference_ok = true;
  for (int64_t g : rows) {
    const int r = static_cast<int>(g / p.T);
    const int64_t t = g % p.T;
    for (int64_t j = 0; j < H && c.reference_ok; ++j)
      if (ranks[r].y[t * H + j] != ref[g * H + j]) {
        c.reference_ok = false;
        c.first_mismatch = fmt::format("rank {} row {} column {}: 0x{:04x}, single-rank 0x{:04x}",
                                       r, t, j, ranks[r].y[t * H + j], ref[g * H + j]);
      }
  }
  for (int r = 0; r < p.R; ++r) {
    testing::HostInputs in = p.inputs[r];
    in.topk_ids = p.routing.at(p.N - 1, r).logical;
    std::string detail;
    SanityRule rule;
    rule.shared_expert = !p.shared.empty();
    rule.outputs_zero = p.setup.desc.activation_clamp == 0.0f;
    const bool ok = sanity_check(ranks[r].y, in, &detail, rule);
    if (!ok && c.sanity_ok) c.sanity = fmt::format("rank {}: {}", r, detail);
    c.sanity_ok = c.sanity_ok && ok;
    if (c.sanity.empty() && r + 1 == p.R) c.sanity = detail;
  }
  c.reference = fmt::format("single-process cpu layer with the {} logical experts{} on the global "
                            "batch ({} ranks x {} tokens), {} layer(s) chained; {} of {} rows of "
                            "the last layer compared bit for bit", p.L,
                            p.shared.empty() ? "" : " and the layer's shared expert", p.R, p.T, p.N,
                            rows.size(), G);
  c.passed = c.reference_ok && c.sanity_ok;
  return c;
}

double median_of(std::vector<double> v) {
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

Json eplb_json(const Plan& p) {
  Json j;
  j["logical_experts"] = p.L;
  j["physical_experts"] = p.E;
  j["redundant"] = p.E - p.L;
  j["replicated_logical"] = p.routing.replicated;
  const std::vector<int64_t> counters = p.routing.physical_load(0);
  j["physical_load_layer0"] = counters;
  const int64_t E_loc = p.E / p.R;
  Json per_rank = Json::array();
  int64_t max_rank = 0, total = 0;
  for (int r = 0; r < p.R; ++r) {
    int64_t s = 0;
    for (int64_t e = r * E_loc; e < (r + 1) * E_loc; ++e) s += counters[e];
    per_rank.push_back(s);
    max_rank = std::max(max_rank, s);
    total += s;
  }
  j["rank_load_layer0"] = per_rank;
  j["rank_imbalance"] = json_number(total ? static_cast<double>(max_rank) * p.R / total : NAN);
  return j;
}

int report(const Plan& p, const RunOptions& o, const std::vector<RankResult>& ranks, const Check& c) {
  const RankResult& r0 = ranks[0];
  bool rerun_equal = true, clean = true;
  for (const RankResult& r : ranks) {
    rerun_equal = rerun_equal && r.rerun_equal;
    clean = clean && r.workspace_clean;
  }
  const bool passed = (!c.enabled || c.passed) && rerun_equal && clean;
  const WorkspaceLayout layout = workspace_layout(
      {p.R, p.E, p.desc.fleet.max_tokens_per_rank, p.desc.fleet.hidden_size, p.setup.desc.intermediate_size,
       p.setup.desc.top_k});
  if (o.json) {
    Json j;
    j["command"] = "run";
    j["version"] = MOE_EP_VERSION;
    j.update(problem_json(p.setup, o.problem));
    j["E"] = p.E;
    j["tokens"] = p.T;
    j["tokens_per_rank"] = p.T;
    j["layers"] = p.N;
    j["workspace_bytes"] = r0.workspace_bytes;
    j["workspace_shape"] = r0.workspace_shape;
    j["workspace_formula_bytes"] = layout.total_bytes;
    j["workspace"] = workspace_json(layout);
    j["workspace_clean_after_each_forward"] = clean;
    j["router"] = o.router ? Json{{"kind", "deepseek-v4"},
                                  {"routed_scaling_factor", p.routing.config.routed_scaling_factor},
                                  {"selection_bias", true},
                                  {"num_hash_layers", p.routing.config.num_hash_layers},
                                  {"logits", "synthetic N(0, 1) per (layer, rank)"}}
                           : Json(nullptr);
    j["eplb"] = o.eplb_redundant > 0 ? eplb_json(p) : Json(nullptr);
    j["shared_expert"] = p.shared.empty() ? Json(nullptr)
                                          : Json{{"intermediate_size", p.desc.shared_intermediate_size},
                                                 {"weights", "synthetic bf16 per layer, held by every rank"}};
    j["time_us"] = json_number(median_of(r0.times_us));
    Json times = Json::array();
    for (double t : r0.times_us) times.push_back(json_number(t));
    j["times_us"] = times;
    j["timing"] = fmt::format("wall-clock of the {} layer(s) on rank 0, median of {}", p.N,
                              r0.times_us.size());
    j["rerun_bitwise_equal"] = rerun_equal;
    j["layer_notes"] = r0.notes;
    j["config"] = config_json(r0.config);
    j["check"] = c.enabled;
    j["reference"] = c.enabled ? Json(c.reference) : Json(nullptr);
    j["checked_rows"] = c.checked_rows;
    j["bitwise_required"] = true;
    j["first_mismatch"] = c.first_mismatch;
    j["sanity_ok"] = c.enabled ? Json(c.sanity_ok) : Json(nullptr);
    j["sanity"] = c.sanity;
    j["check_passed"] = c.enabled ? Json(c.passed) : Json(nullptr);
    fmt::print("{}\n", j.dump());
  } else {
    const auto& s = p.setup;
    fmt::print("moe_ep run: preset {} (H={} I={} L={} logical / E={} physical experts, K={}), "
               "backend {}, {} simulated ranks on the cpu\n",
               s.preset->name, p.desc.fleet.hidden_size, s.desc.intermediate_size, p.L, p.E,
               s.desc.top_k, s.desc.traits().name, p.R);
    fmt::print("  tokens {} per rank, {} layer(s) back to back, max_tokens_per_rank {}, seed {}{}{}\n",
               p.T, p.N, p.desc.fleet.max_tokens_per_rank, o.problem.seed,
               o.router ? fmt::format(", routing by the DeepSeek V4 router on synthetic logits ({} hash "
                                      "layer(s))", p.routing.config.num_hash_layers) : std::string(),
               p.shared.empty() ? std::string()
                                : fmt::format(", a bf16 shared expert (Is = {}) in every layer",
                                              p.desc.shared_intermediate_size));
    fmt::print("  workspace: {} bytes per rank ({:.2f} MiB) for {}, shared by the {} layer(s); "
               "clean after each forward: {}\n",
               r0.workspace_bytes, r0.workspace_bytes / 1048576.0, r0.workspace_shape, p.N,
               clean ? "yes" : "NO");
    if (o.eplb_redundant > 0) {
      const Json e = eplb_json(p);
      fmt::print("  eplb: {} redundant experts replicating logical {}; rank load of layer 0 {} "
                 "(max/mean {:.3f})\n",
                 p.E - p.L, e["replicated_logical"].dump(), e["rank_load_layer0"].dump(),
                 e["rank_imbalance"].is_null() ? NAN : e["rank_imbalance"].get<double>());
    }
    fmt::print("  forward: {:.1f} us for {} layer(s) (rank 0, median of {})\n",
               median_of(r0.times_us), p.N, r0.times_us.size());
    fmt::print("  rerun: y {} the first forward's bitwise\n", rerun_equal ? "equals" : "DIFFERS FROM");
    if (c.enabled) {
      fmt::print("  check: {}\n", c.reference);
      fmt::print("         {}; sanity: {}\n",
                 c.reference_ok ? "bitwise equal" : "NOT bitwise equal (" + c.first_mismatch + ")",
                 c.sanity);
    } else {
      fmt::print("  check: off\n");
    }
    fmt::print("  result: {}\n", passed ? "PASSED" : "FAILED");
  }
  if (!passed) {
    fmt::print(stderr, "moe_ep run: check FAILED: {}{}{}\n",
               c.enabled && !c.reference_ok ? "not bitwise equal to the single-rank layer (" + c.first_mismatch + ") " : "",
               rerun_equal ? "" : "rerun differs ", clean ? "" : "workspace not clean after a forward");
    return kExitFailed;
  }
  return kExitOk;
}

}  // namespace

bool wants_expert_parallel_run(const RunOptions& o) {
  return o.ranks > 1 || o.layers > 1 || o.eplb_redundant > 0 || o.router || o.shared_expert;
}

int run_expert_parallel(const RunOptions& o) {
  const Plan plan = make_plan(o);
  const testing::HostWeights logical = generate_weights(plan.setup, o.problem.seed);
  std::vector<RankResult> ranks = run_ranks(plan, o, logical);
  if (o.corrupt_row >= 0) {
    MOE_EP_CHECK(o.corrupt_row < o.tokens, "--corrupt-row {} is outside [0, T = {})", o.corrupt_row,
                 o.tokens);
    // One element of rank 0's y moved by ~1/8: the smallest kind of bug the check must see.
    uint16_t& v = ranks[0].y[o.corrupt_row * plan.desc.fleet.hidden_size];
    v = float_to_bf16(bf16_to_float(v) * 1.125f + 0.125f);
  }
  Check check;
  if (o.check) check = check_against_single_rank(plan, o, logical, ranks);
  return report(plan, o, ranks, check);
}

}  // namespace moe_ep::cli
