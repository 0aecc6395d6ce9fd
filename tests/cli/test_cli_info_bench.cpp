// `moe_ep info` and `moe_ep bench` as a user runs them.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <iterator>
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
  EXPECT_EQ(lines[0].rfind("gpu,date,commit,preset,backend,", 0), 0u) << lines[0];
  // Every row names the device, a YYYY-MM-DD date and a commit (MOE_EP_COMMIT unset here).
  for (size_t i = 1; i < lines.size(); ++i) {
    std::vector<std::string> f;
    std::stringstream row(lines[i]);
    for (std::string cell; std::getline(row, cell, ',');) f.push_back(cell);
    ASSERT_GE(f.size(), 4u) << lines[i];
    EXPECT_FALSE(f[0].empty()) << lines[i];
    EXPECT_EQ(f[1].size(), 10u) << lines[i];
    EXPECT_EQ(f[1][4], '-') << lines[i];
    EXPECT_FALSE(f[2].empty()) << lines[i];
    EXPECT_EQ(f[3], "tiny") << lines[i];
  }
}

TEST(CliBench, PlotDrawsEveryVariantAndTheSeriesOfOtherCsvFiles) {
  const std::string base = "/tmp/moe_ep_cli_plot_test_" + std::to_string(::getpid());
  {
    std::ofstream peer(base + "_peer.csv");
    peer << "preset,peer,tokens,time_us,tflops,rel_err\ntiny,torch-bf16,1,900.5,0,0\ntiny,torch-bf16,4,950,0,0\n";
  }
  const CliResult r = run_cli("bench --device cpu --preset tiny --tokens 1,4 --iters 1 --warmup 0 "
                              "--bandwidth-gbps 10 --compute-tflops 0.1 --variants auto --plot " + base +
                              ".svg --plot-with " + base + "_peer.csv");
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  std::ifstream in(base + ".svg");
  const std::string svg((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(svg.rfind("<svg", 0), 0u) << svg.substr(0, 80);
  EXPECT_NE(svg.find(">auto</text>"), std::string::npos);
  EXPECT_NE(svg.find(">torch-bf16</text>"), std::string::npos);
  EXPECT_NE(svg.find("roofline floor"), std::string::npos);
  std::remove((base + ".svg").c_str());
  std::remove((base + "_peer.csv").c_str());
  // A CSV without the columns is refused naming them.
  const CliResult bad = run_cli("bench --device cpu --preset tiny --tokens 1 --iters 1 --warmup 0 --plot " +
                                base + ".svg --plot-with /dev/null");
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.err.find("--plot-with"), std::string::npos) << describe(bad);
}

TEST(CliBench, LoadReportsBytesAndRateOfEveryRepeat) {
  const CliResult r = run_cli("bench --device cpu --preset tiny --load --load-repeats 2 --json");
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  const nlohmann::json j = parse_json(r);
  EXPECT_EQ(j.at("command"), "bench-load");
  ASSERT_EQ(j.at("repeats").size(), 2u);
  // tiny: 16 experts x (3 x 256 x 128 / 2 codes + 3 x 256 x 128 / 32 scales)
  EXPECT_EQ(j.at("weight_bytes").get<int64_t>(), 16 * (3 * 256 * 128 / 2 + 3 * 256 * 128 / 32));
  for (const auto& rep : j["repeats"]) EXPECT_GT(rep.at("gbps").get<double>(), 0.0) << rep.dump();
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
