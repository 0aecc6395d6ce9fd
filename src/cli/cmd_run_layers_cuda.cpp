// `moe_ep run --device cuda --layers N [--router [--hash-layers H]] [--eplb-redundant M]
// [--shared-expert]` on one GPU (world size 1):
//
//   1. the synthetic problem of cmd_run_ep.cpp with R = 1: L logical experts, E = L + M physical
//      ones (the M replicas planned from layer 0's logical load, identical weights), per layer the
//      router's ids and weights on synthetic logits (or the generated routing);
//   2. N CUDA layers on one runtime, sharing its one scratch (config entry scratch_bytes); per layer
//      the device routing stage (cuda/sm90_routing.h: router or hash table, EPLB remap, load
//      counters) and the layer, whose shared expert (MoeDesc::shared_intermediate_size) runs on
//      a second stream beside its routed experts and is added in its combine; back to back on one
//      stream; layer l + 1 takes layer l's y as x; timed as one CUDA graph of all N layers; the
//      shared expert alone (moe_ep/shared_expert.h on the GPU) timed as a stage of its own, and (bench)
//      the same chain rebuilt without it, so its added cost per layer is measured beside the
//      routed experts it overlaps;
//   3. checks: the device ids, weights and load counters bitwise equal to the CPU router and CPU
//      Eplb; each layer's y against the CPU layer (L logical experts, plus the CPU SharedExpert)
//      on that layer's device input, by the recipe's threshold; the y after the timed replays bitwise equal to the first.
#include <algorithm>
#include <cmath>
#include <memory>

#include <fmt/format.h>

#include "cli/batch.h"
#include "cli/cli_common.h"
#include "cli/device_driver.h"
#include "cli/output_check.h"
#include "cli/problem.h"
#include "cli/roofline.h"
#include "cli/run_ep.h"
#include "cli/synthetic_routing.h"
#include "core/check.h"
#include "moe_ep/eplb.h"
#include "moe_ep/layer.h"
#include "moe_ep/router.h"
#include "moe_ep/runtime.h"
#include "moe_ep/shared_expert.h"
#include "testing/tolerances.h"
#ifdef MOE_EP_WITH_CUDA
#include "cli/device_routing.h"
#endif

namespace moe_ep::cli {

bool wants_cuda_layers_run(const RunOptions& o) {
  const bool cuda = o.problem.device.rfind("cuda", 0) == 0;
  return cuda && o.ranks == 1 && !o.nccl && !o.simulate_ranks_on_one_gpu && o.ep_rank < 0 &&
         (o.layers > 1 || o.eplb_redundant > 0 || o.router || o.shared_expert);
}

#ifndef MOE_EP_WITH_CUDA
int run_cuda_layers(const RunOptions&) {
  MOE_EP_FAIL(ErrorCode::kUnsupported, "this build has no CUDA backend; --device cuda needs it");
}
#else

int run_cuda_layers(const RunOptions& o) {
  MOE_EP_CHECK(o.hash_layers == 0 || o.router, "--hash-layers {} needs --router", o.hash_layers);
  ProblemSetup setup = plan_problem(o.problem, o.tokens, 1);  // L logical experts
  if (o.shared_expert) setup.desc.shared_intermediate_size = setup.desc.intermediate_size;
  const int N = o.layers;
  const int64_t T = o.tokens, L = setup.desc.fleet.num_experts, E = L + o.eplb_redundant;
  const int64_t K = setup.desc.top_k, H = setup.desc.fleet.hidden_size;
  MoeDesc desc = setup.desc;
  desc.fleet.num_experts = E;
  validate_desc(desc, 1);
  const uint64_t seed = o.problem.seed;
  const testing::HostInputs inputs = generate_inputs(setup, o.problem, T, 0);

  // ---- routing on the host (the reference of the device stage) ----
  const RouterConfig rc{L, K, setup.preset->routed_scaling_factor, o.hash_layers};
  const SyntheticRouting routes = make_synthetic_routing(seed, rc, o.router, o.eplb_redundant, N, {inputs});
  const EplbPlacement& placement = routes.placement;
  const std::vector<int64_t>& replicated = routes.replicated;
  const testing::HostWeights logical_weights = generate_weights(setup, seed);
  const std::vector<int32_t> p2l = placement.physical_to_logical();
  const testing::HostWeights physical_weights = gather_slots(logical_weights, p2l);
  const int64_t I = setup.desc.intermediate_size;
  std::vector<SharedExpertWeights> shared_w;
  if (o.shared_expert)
    for (int l = 0; l < N; ++l) shared_w.push_back(synthetic_shared_expert(seed, l, H, I));
  // Layer l's weights: the physical slots, and its shared expert with --shared-expert.
  auto layer_pack = [&](const testing::HostWeights& routed, int l) {
    return o.shared_expert ? shared_w[l].attach(routed.pack()) : routed.pack();
  };

  // ---- the GPU chain ----
  const bool routing_stage = o.router || o.eplb_redundant > 0;
  std::vector<std::vector<uint16_t>> y_first(N);
  std::string routing_mismatch;  // the device stage's ids / weights against the reference
  std::vector<int64_t> dev_counters, counters_after_timing;
  std::vector<double> times_us, routing_times_us, shared_times_us, routed_only_times_us;
  double copy_bandwidth = NAN;
  int64_t shared_weight_bytes = 0;
  std::string shared_kernels;  // what runs the shared expert alone at T
  int64_t scratch_bytes = 0, plan_bytes = 0;
  bool rerun_equal = false;
  uint32_t routing_flags = 0;
  SelectedConfig config;
  std::string notes;
  {
    auto driver = make_driver(setup.device.device);
    Bootstrap boot;
    boot.device = setup.device.device;
    auto runtime = Runtime::acquire(boot);
    std::vector<std::unique_ptr<Layer>> layers;
    for (int l = 0; l < N; ++l) layers.push_back(Layer::create(runtime, desc, layer_pack(physical_weights, l), setup.overrides));
    config = layers[0]->info().config;
    notes = layers[0]->info().notes;
    const int dev = setup.device.device.index;
    // The plan's bytes, and the scratch the layers share: the last layer holds the runtime's
    // current buffer, the largest.
    for (const ConfigEntry& e : layers.back()->info().config.entries) {
      if (e.key == "workspace_bytes") plan_bytes = std::stoll(e.value);
      if (e.key == "scratch_bytes") scratch_bytes = std::stoll(e.value);
    }

    DeviceRouting routing(*driver, routes, o.eplb_redundant, dev);
    std::vector<std::unique_ptr<SharedExpert>> shared;  // each layer's, alone on the GPU
    for (int l = 0; l < static_cast<int>(shared_w.size()); ++l)
      shared.push_back(SharedExpert::create(H, I, setup.desc.activation_clamp, shared_w[l].w13_view(),
                                            shared_w[l].w2_view(), setup.device.device, T));
    if (!shared.empty()) {
      shared_weight_bytes = shared[0]->weight_bytes();
      shared_kernels = shared[0]->kernels(T);
    }
    void* d_x = upload_vector(*driver, inputs.x);
    std::vector<void*> y(N);
    for (int l = 0; l < N; ++l) y[l] = driver->allocate(T * H * 2);
    auto chain = [&](void* stream) {
      for (int l = 0; l < N; ++l) {
        routing.route(l, 0, stream);
        ForwardArgs a;
        a.x = TensorView::contiguous(l == 0 ? d_x : y[l - 1], DType::kBF16, {T, H}, driver->device());
        a.topk_ids = TensorView::contiguous(routing.ids(l, 0), DType::kI32, {T, K}, driver->device());
        a.topk_weights = TensorView::contiguous(routing.weights(l, 0), DType::kF32, {T, K}, driver->device());
        a.y = TensorView::contiguous(y[l], DType::kBF16, {T, H}, driver->device());
        a.stream = stream;
        layers[l]->forward(a);
      }
    };
    for (int l = 0; l < N; ++l) driver->fill(y[l], 0xFF, T * H * 2);  // NaN poison
    routing.poison();
    routing.set_recording(true);
    chain(driver->stream());
    driver->synchronize();
    for (auto& layer : layers) layer->check_error_flags();
    routing_flags = routing.read_error_flags();
    routing.set_recording(false);  // the graph below replays with the flag off
    dev_counters = routing.counters();
    routing_mismatch = routing.compare();
    for (int l = 0; l < N; ++l) y_first[l] = download_vector<uint16_t>(*driver, y[l], T * H);
    const int iters = o.iters > 0 ? o.iters : 20;
    const int warmup = o.warmup >= 0 ? o.warmup : 3;
    times_us = driver->time_forward(chain, warmup, iters, !o.eager);
    rerun_equal = download_vector<uint16_t>(*driver, y[N - 1], T * H) == y_first[N - 1];
    if (routing_stage)
      routing_times_us = driver->time_forward(
          [&](void* s) {
            for (int l = 0; l < N; ++l) routing.route(l, 0, s);
          },
          warmup, iters, !o.eager);
    if (o.shared_expert) {
      void* scratch_out = driver->allocate(T * H * 2);  // forward, not add_to: replays do not drift
      shared_times_us = driver->time_forward(
          [&](void* s) {
            for (int l = 0; l < N; ++l)
              shared[l]->forward(TensorView::contiguous(l == 0 ? d_x : y[l - 1], DType::kBF16, {T, H}, driver->device()),
                                 TensorView::contiguous(scratch_out, DType::kBF16, {T, H}, driver->device()), s);
          },
          warmup, iters, !o.eager);
    }
    for (auto& layer : layers) layer->check_error_flags();
    if (o.shared_expert && o.time_without_shared) {
      // The same layers without the shared expert, one set at a time on the device: the chain's
      // time without it is what its side stream adds to.
      layers.clear();
      MoeDesc routed_desc = desc;
      routed_desc.shared_intermediate_size = 0;
      for (int l = 0; l < N; ++l)
        layers.push_back(Layer::create(runtime, routed_desc, physical_weights.pack(), setup.overrides));
      routed_only_times_us = driver->time_forward(chain, warmup, iters, !o.eager);
      for (auto& layer : layers) layer->check_error_flags();
    }
    if (routing_stage || o.shared_expert) copy_bandwidth = driver->measure_copy_bandwidth();
    counters_after_timing = routing.counters();
  }  // layers, runtime and device buffers released: the CPU reference acquires its own runtime

  // ---- checks ----
  const bool routing_equal = routing_mismatch.empty();
  const bool counters_equal = o.eplb_redundant == 0 || (dev_counters == routes.counters &&
                                                        counters_after_timing == dev_counters);
  const std::vector<int64_t> rows = sample_rows(T, o.check_rows);
  const double threshold = testing::device_rel_err_threshold(setup.desc.recipe, setup.desc.numerics.exact_accumulation);
  std::vector<double> rel(N, NAN);
  bool layers_ok = true, sanity_ok = true;
  std::string sanity;
  if (o.check) {
    for (int l = 0; l < N; ++l) {
      testing::HostInputs in = inputs;
      if (l > 0) in.x = y_first[l - 1];
      in.topk_ids = routes.at(l, 0).logical;
      in.topk_weights = routes.at(l, 0).weights;
      const std::vector<uint16_t> ref =
          cpu_reference_rows(setup, layer_pack(logical_weights, l), in, rows, o.problem.threads);
      rel[l] = rel_err_rows(y_first[l], ref, H, rows);
      layers_ok = layers_ok && rel[l] <= threshold;
      std::string detail;
      SanityRule rule;
      rule.shared_expert = o.shared_expert;
      rule.outputs_zero = setup.desc.activation_clamp == 0.0f;
      rule.reference = ref;  // a chained layer's input may be too small to survive Q8
      rule.reference_rows = rows;
      const bool ok = sanity_check(y_first[l], in, &detail, rule);
      if (!ok && sanity_ok) sanity = fmt::format("layer {}: {}", l, detail);
      if (ok && l + 1 == N && sanity_ok) sanity = detail;
      sanity_ok = sanity_ok && ok;
    }
  }
  const bool passed = (!o.check || (layers_ok && sanity_ok)) && routing_equal && counters_equal &&
                      rerun_equal && routing_flags == 0;
  const double total = median(times_us);
  const double routing = routing_times_us.empty() ? NAN : median(routing_times_us);
  const double shared_us = shared_times_us.empty() ? NAN : median(shared_times_us) / N;
  const double routed_only_us = routed_only_times_us.empty() ? NAN : median(routed_only_times_us) / N;
  const double shared_added_us = total / N - routed_only_us;
  // Floors: bytes a stage must move once / the measured copy bandwidth.
  const double routing_floor_us = (T * L * 4.0 + T * K * 8.0 + (o.router ? L * 4.0 : 0.0)) / copy_bandwidth * 1e6;
  // The shared expert's: its weight bytes, or its FLOPs at the bf16 dense rate where they take longer.
  const double shared_flops = 2.0 * static_cast<double>(T) * H * 3.0 * I;
  const double shared_byte_floor_us = shared_weight_bytes / copy_bandwidth * 1e6;
  const double shared_compute_floor_us = shared_flops / kH200Bf16FlopPerS * 1e6;
  const bool shared_compute_bound = shared_compute_floor_us > shared_byte_floor_us;
  const double shared_floor_us = std::max(shared_byte_floor_us, shared_compute_floor_us);
  const char* shared_floor_kind = shared_compute_bound ? "bf16 FLOPs at 780 TFLOP/s" : "weight bytes";
  const double shared_tflops = shared_flops / (shared_us * 1e-6) / 1e12;
  const double max_rel = *std::max_element(rel.begin(), rel.end());

  if (o.json) {
    Json j;
    j["command"] = "run";
    j["version"] = MOE_EP_VERSION;
    j.update(problem_json(setup, o.problem));
    j["L"] = L;
    j["E"] = E;
    j["tokens"] = T;
    j["layers"] = N;
    j["workspace_bytes"] = scratch_bytes;
    j["workspace_plan_bytes_per_layer"] = plan_bytes;
    j["workspace_shared_by_layers"] = true;
    j["router"] = o.router ? Json{{"kind", "deepseek-v4"}, {"on", "device"},
                                  {"routed_scaling_factor", rc.routed_scaling_factor},
                                  {"num_hash_layers", rc.num_hash_layers}}
                           : Json(nullptr);
    j["eplb"] = o.eplb_redundant > 0 ? Json{{"redundant", o.eplb_redundant},
                                            {"replicated_logical", replicated},
                                            {"physical_load", dev_counters},
                                            {"counters_equal_cpu", counters_equal}}
                                     : Json(nullptr);
    j["time_us"] = json_number(total);
    j["time_per_layer_us"] = json_number(total / N);
    j["routing_stage_us_per_layer"] = json_number(routing / N);
    j["routing_stage_floor_us"] = json_number(routing_floor_us);
    j["shared_expert_us_per_layer"] = json_number(shared_us);
    j["shared_expert_weight_bytes"] = shared_weight_bytes;
    j["shared_expert_floor_us"] = json_number(shared_floor_us);
    j["shared_expert_floor_kind"] = o.shared_expert ? Json(shared_floor_kind) : Json(nullptr);
    j["shared_expert_kernels"] = o.shared_expert ? Json(shared_kernels) : Json(nullptr);
    j["shared_expert_in_layer"] = o.shared_expert ? Json("second stream beside the routed experts, added in the combine")
                                                  : Json(nullptr);
    j["shared_expert_tflops"] = json_number(shared_tflops);
    j["routed_only_time_per_layer_us"] = json_number(routed_only_us);
    j["shared_expert_added_us_per_layer"] = json_number(shared_added_us);
    j["copy_bandwidth_bytes_per_s"] = json_number(copy_bandwidth);
    j["timing"] = fmt::format("{} of the {}-layer chain, median of {}", o.eager ? "eager forwards" : "cuda graph replays", N, times_us.size());
    j["routing_bitwise_equal_cpu"] = routing_equal;
    j["routing_mismatch"] = routing_mismatch;
    j["routing_error_flags"] = routing_flags;
    Json rj = Json::array();
    for (double r : rel) rj.push_back(json_number(r));
    j["rel_err_per_layer"] = rj;
    j["threshold"] = json_number(threshold);
    j["rerun_bitwise_equal"] = rerun_equal;
    j["config"] = config_json(config);
    j["layer_notes"] = notes;
    j["check"] = o.check;
    j["checked_rows"] = o.check ? static_cast<int64_t>(rows.size()) : 0;
    j["sanity"] = sanity;
    j["check_passed"] = passed;
    fmt::print("{}\n", j.dump());
  } else {
    fmt::print("moe_ep run: preset {} (H={} I={} L={} logical / E={} physical experts, K={}), backend {} on "
               "{} ({}), {} layer(s) back to back on one stream\n",
               setup.preset->name, H, setup.desc.intermediate_size, L, E, K, setup.desc.traits().name,
               setup.device.device.str(), setup.device.name, N);
    fmt::print("  tokens {}, seed {}{}\n", T, seed,
               o.router ? fmt::format(", DeepSeek V4 router on the device on synthetic logits ({} hash "
                                      "layer(s))", o.hash_layers)
                        : std::string(o.eplb_redundant ? ", generated routing remapped on the device" : ""));
    fmt::print("  workspace: {} bytes ({:.2f} MiB) shared by the {} layer(s) (each plan needs {} bytes)\n",
               scratch_bytes, scratch_bytes / 1048576.0, N, plan_bytes);
    if (o.eplb_redundant > 0)
      fmt::print("  eplb: {} redundant experts replicating logical {}; device load counters {} the cpu's{}\n",
                 o.eplb_redundant, Json(replicated).dump(), counters_equal ? "equal" : "DIFFER FROM",
                 counters_after_timing == dev_counters ? " (unchanged by the replays with recording off)" : "");
    fmt::print("  forward: {:.1f} us for {} layers, {:.1f} us per layer ({}, median of {})\n", total, N,
               total / N, o.eager ? "eager" : "one cuda graph", times_us.size());
    if (routing_stage)
      fmt::print("  routing stage: {:.2f} us per layer (its own graph of {} launches; byte floor {:.2f} us at "
                 "{:.0f} GB/s)\n", routing / N, N, routing_floor_us, copy_bandwidth / 1e9);
    if (o.shared_expert)
      fmt::print("  shared expert (bf16, Is = {}, {}; inside each layer on a second stream, added in its combine): "
                 "alone {:.2f} us per layer, floor {:.2f} us ({}; {:.2f}x), {:.1f} TFLOP/s\n", I,
                 shared_kernels, shared_us, shared_floor_us,
                 shared_floor_kind, shared_us / shared_floor_us, shared_tflops);
    if (!routed_only_times_us.empty())
      fmt::print("  shared expert in the chain: +{:.2f} us per layer over the same layers without it ({:.1f} us), "
                 "{:.2f}x its floor\n", shared_added_us, routed_only_us, shared_added_us / shared_floor_us);
    fmt::print("  routing: device ids / weights {} the cpu router{}\n", routing_equal ? "bitwise equal to" : "DIFFER FROM",
               routing_equal ? "" : " (" + routing_mismatch + ")");
    fmt::print("  rerun: y {} the first forward's bitwise\n", rerun_equal ? "equals" : "DIFFERS FROM");
    if (o.check)
      fmt::print("  check: each layer vs the cpu layer{} on its device input, {} rows: max rel_err {:.3e} "
                 "(threshold {:g}); sanity: {}\n", o.shared_expert ? " + cpu SharedExpert" : "", rows.size(), max_rel, threshold, sanity);
    fmt::print("  result: {}\n", passed ? "PASSED" : "FAILED");
  }
  if (!passed) {
    fmt::print(stderr, "moe_ep run: check FAILED (layers {}, routing {}, counters {}, rerun {}, flags 0x{:x})\n",
               layers_ok, routing_equal, counters_equal, rerun_equal, routing_flags);
    return kExitFailed;
  }
  return kExitOk;
}

#endif  // MOE_EP_WITH_CUDA

}  // namespace moe_ep::cli
