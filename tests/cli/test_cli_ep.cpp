// `moe_ep run` across simulated ranks and `moe_ep info`'s workspace report, as a user runs them.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "cli/cli_runner.h"
#include "moe_ep/workspace.h"

namespace moe_ep::test {
namespace {

TEST(CliRunEp, RanksLayersEplbRouterPassTheirBitwiseCheck) {
  const CliResult r = run_cli("run --device cpu --ranks 4 --layers 3 --eplb-redundant 4 --router "
                              "--tokens 24 --max-tokens-per-rank 32 --json");
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  const nlohmann::json j = parse_json(r);
  EXPECT_EQ(j.value("ranks", 0), 4);
  EXPECT_EQ(j.value("layers", 0), 3);
  EXPECT_EQ(j.value("E", 0), 20);  // 16 logical + 4 redundant
  EXPECT_EQ(j.value("check_passed", false), true) << describe(r);
  EXPECT_EQ(j.value("bitwise_required", false), true);
  EXPECT_EQ(j.value("workspace_clean_after_each_forward", false), true);
  EXPECT_EQ(j.value("rerun_bitwise_equal", false), true);
  // A key containing "workspace" with its bytes: the formula's figure for the run's shape.
  EXPECT_EQ(j.value("workspace_bytes", int64_t{0}), workspace_bytes(4, 20, 32, 256, 128, 4)) << describe(r);
  EXPECT_TRUE(j["eplb"].is_object()) << describe(r);
  EXPECT_EQ(j["eplb"]["replicated_logical"].size(), 4u);
  EXPECT_TRUE(j["router"].is_object()) << describe(r);
}

TEST(CliRunEp, HashLayersRouteByTheTableAndPassTheBitwiseCheck) {
  const CliResult r = run_cli("run --device cpu --ranks 2 --layers 3 --router --hash-layers 2 "
                              "--eplb-redundant 2 --tokens 16 --json");
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  const nlohmann::json j = parse_json(r);
  EXPECT_EQ(j.value("check_passed", false), true) << describe(r);
  EXPECT_EQ(j["router"].value("num_hash_layers", -1), 2) << describe(r);
  CliResult bad = run_cli("run --device cpu --layers 2 --hash-layers 1");
  EXPECT_NE(bad.exit_code, 0) << describe(bad);
  EXPECT_NE(bad.err.find("--hash-layers 1 needs --router"), std::string::npos) << describe(bad);
}

TEST(CliRunEp, SharedExpertOnSimulatedRanksPassesTheBitwiseCheckAndTheCheckCanFail) {
  const CliResult r = run_cli("run --device cpu --ranks 4 --layers 2 --router --eplb-redundant 4 "
                              "--shared-expert --tokens 12 --json");
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  const nlohmann::json j = parse_json(r);
  EXPECT_EQ(j.value("check_passed", false), true) << describe(r);
  ASSERT_TRUE(j["shared_expert"].is_object()) << describe(r);
  EXPECT_EQ(j["shared_expert"].value("intermediate_size", 0), 128);
  EXPECT_NE(j.value("reference", "").find("shared expert"), std::string::npos) << describe(r);
  EXPECT_NE(j.value("sanity", "").find("every token nonzero"), std::string::npos) << describe(r);
  const CliResult bad = run_cli("run --device cpu --ranks 2 --shared-expert --tokens 8 --corrupt-row 5");
  EXPECT_EQ(bad.exit_code, 1) << describe(bad);
  EXPECT_NE(bad.err.find("not bitwise equal to the single-rank layer"), std::string::npos) << describe(bad);
}

TEST(CliRunEp, EveryRankCountPassesAndTheCheckCanFail) {
  for (int R : {1, 2, 8}) {
    const CliResult r = run_cli("run --device cpu --backend nvfp4 --tokens 9 --ranks " +
                                std::to_string(R) + (R == 1 ? " --layers 2" : ""));
    EXPECT_EQ(r.exit_code, 0) << describe(r);
    EXPECT_NE(r.out.find("bitwise equal"), std::string::npos) << describe(r);
  }
  const CliResult bad = run_cli("run --device cpu --ranks 2 --tokens 8 --corrupt-row 3");
  EXPECT_EQ(bad.exit_code, 1) << describe(bad);
  EXPECT_NE(bad.err.find("not bitwise equal to the single-rank layer"), std::string::npos)
      << describe(bad);
}

TEST(CliRunEp, BadCombinationsNameTheFlags) {
  CliResult r = run_cli("run --device cpu --ranks 3");
  EXPECT_EQ(r.exit_code, 2) << describe(r);
  EXPECT_NE(r.err.find("--ranks 3"), std::string::npos) << describe(r);
  r = run_cli("run --device cpu --ranks 4 --eplb-redundant 2");
  EXPECT_EQ(r.exit_code, 2) << describe(r);
  EXPECT_NE(r.err.find("--eplb-redundant 2 with --ranks 4"), std::string::npos) << describe(r);
  r = run_cli("run --device cpu --ranks 2 --timeout-ms 0");
  EXPECT_EQ(r.exit_code, 2) << describe(r);
}

// Checked before any device is touched: the messages are the same with or without a GPU.
TEST(CliRunEp, GpuRankFlagsOutsideTheSimulationNameTheFlags) {
  CliResult r = run_cli("run --device cuda --ranks 2 --layers 2 --simulate-ranks-on-one-gpu");
  EXPECT_EQ(r.exit_code, 2) << describe(r);
  EXPECT_NE(r.err.find("--layers 2 on GPU ranks"), std::string::npos) << describe(r);
  r = run_cli("run --device cuda --ranks 2 --router");
  EXPECT_EQ(r.exit_code, 2) << describe(r);
  EXPECT_NE(r.err.find("--simulate-ranks-on-one-gpu"), std::string::npos) << describe(r);
  EXPECT_NE(r.err.find("NCCL ranks take the generated routing"), std::string::npos) << describe(r);
}

TEST(CliInfo, ReportsTheWorkspaceFormulaAndPresetFigures) {
  const CliResult r = run_cli("info --json");
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  const nlohmann::json j = parse_json(r);
  ASSERT_TRUE(j.contains("workspace")) << describe(r);
  EXPECT_EQ(j["workspace"].value("formula", ""), std::string(workspace_formula()));
  bool tiny = false;
  for (const auto& p : j["workspace"]["presets"])
    if (p.value("preset", "") == "tiny") {
      tiny = true;
      EXPECT_EQ(p.value("workspace_bytes", int64_t{0}), workspace_bytes(8, 16, 256, 256, 128, 4));
    }
  EXPECT_TRUE(tiny) << describe(r);
}

}  // namespace
}  // namespace moe_ep::test
