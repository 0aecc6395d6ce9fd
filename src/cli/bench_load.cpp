#include "cli/bench_load.h"

#include <algorithm>
#include <chrono>
#include <memory>
#include <vector>

#include <fmt/format.h>

#include "cli/cli_common.h"
#include "cli/device_driver.h"
#include "moe_ep/layer.h"
#include "moe_ep/runtime.h"

namespace moe_ep::cli {
namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

int64_t pack_bytes(const WeightPack& p) {
  int64_t n = 0;
  for (const TensorView* t : {&p.w13, &p.w13_scale, &p.w13_global, &p.w2, &p.w2_scale, &p.w2_global,
                              &p.shared_w13, &p.shared_w2})  // a checkpoint layer's shared expert too
    if (t->defined()) n += t->nbytes();
  return n;
}

struct LoadRow {
  double read_s = 0.0, create_s = 0.0;
  double total_s() const { return read_s + create_s; }
};

}  // namespace

int bench_load(const ProblemOptions& problem, const CheckpointRunOptions& ck, int repeats, bool json) {
  // Every repeat reads the checkpoint again (page-cached after the first); synthetic weights
  // are generated once.
  ProblemSetup s = ck.given() ? plan_checkpoint_problem(problem, ck, 1, 1) : plan_problem(problem, 1, 1);
  testing::HostWeights generated;
  if (!ck.given()) generated = generate_weights(s, problem.seed);
  Bootstrap boot;
  boot.device = s.device.device;
  auto runtime = Runtime::acquire(boot);
  auto driver = make_driver(s.device.device);

  int64_t bytes = 0;
  std::string implementation;
  std::vector<LoadRow> rows;
  for (int r = 0; r < repeats; ++r) {
    LoadRow row;
    if (ck.given() && r > 0) {
      const auto t0 = std::chrono::steady_clock::now();
      s = plan_checkpoint_problem(problem, ck, 1, 1);
      row.read_s = seconds_since(t0);
    } else if (ck.given()) {
      row.read_s = checkpoint_load_seconds(s);
    }
    const WeightPack pack = ck.given() ? checkpoint_pack(s) : generated.pack();
    bytes = pack_bytes(pack);
    const auto t1 = std::chrono::steady_clock::now();
    {
      std::unique_ptr<Layer> layer = Layer::create(runtime, s.desc, pack, s.overrides);
      driver->synchronize();
      row.create_s = seconds_since(t1);
      implementation = layer->info().implementation;
    }
    if (ck.given()) release_checkpoint(s);
    rows.push_back(row);
  }
  std::vector<double> totals;
  for (const LoadRow& r : rows) totals.push_back(r.total_s());
  const double best = *std::min_element(totals.begin(), totals.end());
  if (json) {
    Json j;
    j["command"] = "bench-load";
    j["version"] = MOE_EP_VERSION;
    j.update(problem_json(s, problem));
    j["implementation"] = implementation;
    j["weight_bytes"] = bytes;
    Json arr = Json::array();
    for (const LoadRow& r : rows)
      arr.push_back({{"read_ms", json_number(r.read_s * 1e3)}, {"create_ms", json_number(r.create_s * 1e3)},
                     {"total_ms", json_number(r.total_s() * 1e3)}, {"gbps", json_number(bytes / r.total_s() / 1e9)}});
    j["repeats"] = arr;
    j["best_gbps"] = json_number(bytes / best / 1e9);
    add_checkpoint_json(s, j);
    fmt::print("{}\n", j.dump());
    return kExitOk;
  }
  fmt::print("moe_ep bench --load: {} on {} ({}), {} ({:.1f} MB of {} expert weights), {}\n",
             ck.given() ? "checkpoint " + ck.path : "preset " + std::string(s.preset->name),
             s.device.device.str(), s.device.name, implementation, bytes / 1e6,
             weight_format_name(s.weight_format),
             ck.given() ? "read from the file (page cache after the first) + Layer::create"
                        : "Layer::create from host memory");
  fmt::print("  {:>6} {:>10} {:>10} {:>10} {:>8}\n", "repeat", "read_ms", "create_ms", "total_ms", "GB/s");
  for (size_t i = 0; i < rows.size(); ++i)
    fmt::print("  {:>6} {:>10.1f} {:>10.1f} {:>10.1f} {:>8.2f}\n", i, rows[i].read_s * 1e3,
               rows[i].create_s * 1e3, rows[i].total_s() * 1e3, bytes / rows[i].total_s() / 1e9);
  fmt::print("  best: {:.1f} ms, {:.2f} GB/s of expert weight bytes\n", best * 1e3, bytes / best / 1e9);
  return kExitOk;
}

}  // namespace moe_ep::cli
