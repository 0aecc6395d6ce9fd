// `moe_ep run` as a user runs it: exit codes, JSON output, error messages.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "cli/cli_runner.h"

namespace moe_ep::test {
namespace {

TEST(CliRun, DefaultRunPassesItsCheck) {
  const CliResult r = run_cli("run");
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_NE(r.out.find("PASSED"), std::string::npos) << describe(r);
}

TEST(CliRun, JsonHasTheRequiredKeys) {
  const CliResult r = run_cli("run --device cpu --json");
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  const nlohmann::json j = parse_json(r);
  for (const char* key : {"preset", "backend", "device", "tokens", "ranks", "time_us", "rel_err",
                          "check_passed", "threshold", "seed", "H", "I", "E", "K", "checked_rows",
                          "reference"})
    EXPECT_TRUE(j.contains(key)) << "missing key " << key << "\n" << describe(r);
  EXPECT_EQ(j.value("preset", ""), "tiny");
  EXPECT_EQ(j.value("backend", ""), "mxfp4");
  EXPECT_EQ(j.value("device", ""), "cpu");
  EXPECT_EQ(j.value("ranks", 0), 1);
  EXPECT_EQ(j.value("check_passed", false), true) << describe(r);
  EXPECT_GT(j.value("checked_rows", 0), 0);
  EXPECT_TRUE(j["time_us"].is_number()) << describe(r);
  EXPECT_GT(j["time_us"].get<double>(), 0.0);
}

TEST(CliRun, YDigestNamesTheOutputBits) {
  auto digest = [](const char* args) {
    const CliResult r = run_cli(args);
    EXPECT_EQ(r.exit_code, 0) << describe(r);
    return parse_json(r).value("y_digest", std::string());
  };
  const std::string a = digest("run --device cpu --tokens 5 --seed 3 --json");
  EXPECT_EQ(a.size(), 16u);
  EXPECT_EQ(a.find_first_not_of("0123456789abcdef"), std::string::npos) << a;
  EXPECT_EQ(digest("run --device cpu --tokens 5 --seed 3 --threads 1 --json"), a);
  EXPECT_NE(digest("run --device cpu --tokens 5 --seed 4 --json"), a);
}

TEST(CliRun, Nvfp4PassesOnCpu) {
  const CliResult r = run_cli("run --device cpu --backend nvfp4 --tokens 40 --seed 7 --json");
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  const nlohmann::json j = parse_json(r);
  EXPECT_EQ(j.value("backend", ""), "nvfp4");
  EXPECT_EQ(j.value("weight_format", ""), "nvfp4");
  EXPECT_EQ(j.value("check_passed", false), true) << describe(r);
}

TEST(CliRun, ZeroTokensAndAllHolesPass) {
  for (const char* args : {"run --device cpu --tokens 0 --json", "run --device cpu --holes 1 --json"}) {
    const CliResult r = run_cli(args);
    ASSERT_EQ(r.exit_code, 0) << describe(r);
    EXPECT_EQ(parse_json(r).value("check_passed", false), true) << describe(r);
  }
}

TEST(CliRun, CheckFailsOnACorruptedOutput) {
  const CliResult r = run_cli("run --device cpu --tokens 16 --corrupt-row 3 --json");
  EXPECT_EQ(r.exit_code, 1) << describe(r);
  EXPECT_EQ(parse_json(r).value("check_passed", true), false) << describe(r);
  EXPECT_NE(r.err.find("FAILED"), std::string::npos) << describe(r);
}

TEST(CliRun, UnknownBackendListsTheAllowedNames) {
  const CliResult r = run_cli("run --backend fp8 --device cpu");
  EXPECT_EQ(r.exit_code, 2) << describe(r);
  EXPECT_NE(r.err.find("fp8"), std::string::npos) << describe(r);
  EXPECT_NE(r.err.find("mxfp4"), std::string::npos) << describe(r);
  EXPECT_NE(r.err.find("nvfp4"), std::string::npos) << describe(r);
  EXPECT_TRUE(r.out.empty()) << describe(r);
}

TEST(CliRun, UnknownPresetListsTheAllowedNames) {
  const CliResult r = run_cli("run --preset huge --device cpu");
  EXPECT_EQ(r.exit_code, 2) << describe(r);
  EXPECT_NE(r.err.find("deepseek-v4-flash"), std::string::npos) << describe(r);
  EXPECT_NE(r.err.find("tiny"), std::string::npos) << describe(r);
}

TEST(CliRun, TokensAboveTheCapNameMaxTokensPerRank) {
  const CliResult r = run_cli("run --device cpu --tokens 65 --max-tokens-per-rank 64 --json");
  EXPECT_EQ(r.exit_code, 2) << describe(r);
  EXPECT_NE(r.err.find("max_tokens_per_rank"), std::string::npos) << describe(r);
  EXPECT_TRUE(r.out.empty()) << describe(r);
}

TEST(CliRun, BadFlagsAndValuesExitWithTwo) {
  for (const char* args : {"run --tokens abc", "run --tokens -3", "run --seed x", "run --bogus",
                           "run --device gpu", "run --holes 1.5", "run --ranks 0",
                           "run --weights fp8", "frobnicate", ""}) {
    const CliResult r = run_cli(args);
    EXPECT_EQ(r.exit_code, 2) << describe(r);
    EXPECT_FALSE(r.err.empty()) << describe(r);
  }
}

TEST(CliRun, CudaDeviceWithoutAGpuFailsClearly) {
  const CliResult info = run_cli("info --json");
  ASSERT_EQ(info.exit_code, 0) << describe(info);
  const nlohmann::json j = parse_json(info);
  for (const auto& d : j["devices"])
    if (d.value("device", "") != "cpu") GTEST_SKIP() << "a CUDA device is present: " << d.dump();
  const CliResult r = run_cli("run --device cuda");
  EXPECT_EQ(r.exit_code, 2) << describe(r);
  EXPECT_NE(r.err.find("--device cuda"), std::string::npos) << describe(r);
  EXPECT_NE(r.err.find("--device cpu"), std::string::npos) << describe(r);
  const CliResult b = run_cli("bench --device cuda --tokens 1");
  EXPECT_EQ(b.exit_code, 2) << describe(b);
}

}  // namespace
}  // namespace moe_ep::test
