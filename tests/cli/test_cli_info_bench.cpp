// `moe_ep info` and `moe_ep bench` as a user runs them.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/cli_runner.h"

namespace moe_ep::test {
namespace {

TEST(CliInfo, JsonDescribesRecipesBackendsTransportsAndDevices) {
  const CliResult r = run_cli("info --json");
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  const nlohmann::json j = nlohmann::json::parse(r.out);
  std::set<std::string> recipes, backends, transports;
  for (const auto& b : j.at("recipes")) {
    recipes.insert(b.at("name").get<std::string>());
    EXPECT_FALSE(b.at("implementations").empty()) << b.dump();
    EXPECT_FALSE(b.at("weight_formats").empty()) << b.dump();
    EXPECT_GT(b.at("hidden_align").get<int>(), 0);
  }
  EXPECT_EQ(recipes, (std::set<std::string>{"mxfp4", "nvfp4"}));
  for (const auto& b : j.at("backends")) {
    backends.insert(b.at("name").get<std::string>());
    EXPECT_FALSE(b.at("recipes").empty()) << b.dump();
  }
  // The CPU backend is always registered; cuda-sm90 exactly when the build compiled CUDA.
  EXPECT_TRUE(backends.count("cpu")) << j.at("backends").dump();
  EXPECT_EQ(backends.count("cuda-sm90") == 1, j.at("build").at("cuda_compiled").get<bool>());
  for (const auto& t : j.at("transports")) transports.insert(t.at("name").get<std::string>());
  EXPECT_TRUE(transports.count("single-process") && transports.count("simulated")) << j.at("transports").dump();
  EXPECT_EQ(transports.count("nccl") == 1, j.at("build").at("nccl_compiled").get<bool>());
  ASSERT_FALSE(j.at("devices").empty());
  EXPECT_EQ(j["devices"][0].at("device"), "cpu");
  EXPECT_GE(j["devices"][0].at("threads").get<int>(), 1);
  EXPECT_TRUE(j.at("build").contains("cuda_compiled"));
  EXPECT_TRUE(j.contains("cuda_status"));
}

TEST(CliInfo, TextNamesBackendsPresetsDevices) {
  const CliResult r = run_cli("info");
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  for (const char* word : {"mxfp4", "nvfp4", "backends", "transports", "deepseek-v4-flash", "devices:", "cpu"})
    EXPECT_NE(r.out.find(word), std::string::npos) << word << "\n" << describe(r);
  // A build without CUDA simply has one backend fewer.
  const bool cuda = nlohmann::json::parse(run_cli("info --json").out).at("build").at("cuda_compiled").get<bool>();
  EXPECT_EQ(r.out.find("cuda-sm90") != std::string::npos, cuda) << describe(r);
}

TEST(CliBench, CpuSweepWritesCsvAndJson) {
  const std::string csv = "/tmp/moe_ep_cli_bench_test_" + std::to_string(::getpid()) + ".csv";
  const CliResult r = run_cli("bench --device cpu --preset tiny --tokens 1,5,0 --iters 2 --warmup 0 "
                              "--bandwidth-gbps 10 --compute-tflops 0.1 --json --csv " + csv);
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  const nlohmann::json j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j.at("rows").size(), 3u) << describe(r);
  EXPECT_EQ(j["rows"][1].at("tokens"), 5);
  for (const auto& row : j["rows"]) {
    EXPECT_TRUE(row.at("time_us").is_number()) << row.dump();
    // With the rates given, the floor is a pure function of the routing.
    const double bytes = row.at("weight_bytes").get<double>();
    EXPECT_NEAR(row.at("memory_floor_us").get<double>(), bytes / 10e9 * 1e6, 1e-6 * (1 + bytes));
    EXPECT_NEAR(row.at("flops").get<double>(), 2.0 * row.at("valid_slots").get<double>() * 3 * 256 * 128, 0.5);
  }
  std::ifstream in(csv);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  std::remove(csv.c_str());
  ASSERT_EQ(lines.size(), 4u) << describe(r);
  EXPECT_EQ(lines[0].rfind("preset,backend,", 0), 0u) << lines[0];
}

TEST(CliBench, CompareAcceptsTorchOnly) {
  const CliResult ok = run_cli("bench --device cpu --preset tiny --tokens 1 --iters 1 --warmup 0 "
                               "--bandwidth-gbps 10 --compute-tflops 0.1 --compare torch");
  EXPECT_EQ(ok.exit_code, 0) << describe(ok);
  const CliResult bad = run_cli("bench --device cpu --compare jax");
  EXPECT_EQ(bad.exit_code, 2) << describe(bad);
}

}  // namespace
}  // namespace moe_ep::test
