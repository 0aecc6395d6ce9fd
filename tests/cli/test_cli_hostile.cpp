// Flag values and combinations a user gets wrong, through the built binary: each must end in
// the exit code of its kind (2: bad usage or a request too large, 1: a runtime failure such as
// a write error) with a message that names the flag, and none may crash, hang or allocate
// without bound. Valid runs that the output check once rejected must pass.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "cli/cli_runner.h"

namespace moe_ep {
namespace {

namespace fs = std::filesystem;

struct CliCase {
  std::string args;
  int exit_code;
  std::vector<std::string> stderr_parts;  // each must appear in stderr
};

// The host budget's figure for the child processes: large enough for every valid run here, far
// below what a runaway size asks for.
class ScopedHostLimit {
 public:
  ScopedHostLimit() { ::setenv("MOE_EP_HOST_MEMORY_LIMIT", "4000000000", 1); }
  ~ScopedHostLimit() { ::unsetenv("MOE_EP_HOST_MEMORY_LIMIT"); }
};

void run_cases(const std::vector<CliCase>& cases) {
  ScopedHostLimit limit;
  for (const CliCase& c : cases) {
    const test::CliResult r = test::run_cli(c.args);
    EXPECT_EQ(r.exit_code, c.exit_code) << test::describe(r);
    for (const std::string& part : c.stderr_parts)
      EXPECT_NE(r.err.find(part), std::string::npos) << "'" << part << "' missing; " << test::describe(r);
    EXPECT_EQ(r.err.find("out of host memory"), std::string::npos) << test::describe(r);
  }
}

const std::string kRun = "run --device cpu ";
const std::string kBench = "bench --device cpu --iters 1 --warmup 0 ";
const std::string kBench1 = kBench + "--tokens 1 ";

TEST(CliHostile, LenientFlagValuesAreRefused) {
  run_cases({
      {kRun + "--activation-clamp ''", 2, {"--activation-clamp"}},
      {kRun + "--activation-clamp 0x10", 2, {"--activation-clamp", "'0x10' is not a decimal number"}},
      {kRun + "--activation-clamp inf", 2, {"--activation-clamp", "not a decimal number"}},
      {kRun + "--activation-clamp nan", 2, {"--activation-clamp"}},
      {kRun + "--kernel ''", 2, {"--kernel", "empty"}},
      {kRun + "--tile ''", 2, {"--tile", "empty"}},
      {kRun + "--check --no-check", 2, {"--no-check", "--check"}},
      {kRun + "--no-check --check", 2, {"--no-check", "--check"}},
      {"inspect --stats --no-stats /nonexistent", 2, {"--no-stats", "--stats"}},
      {kBench + "--tokens 1,,2", 2, {"--tokens '1,,2' has an empty element"}},
      {kBench + "--tokens 1,", 2, {"--tokens '1,' has an empty element"}},
      {kBench + "--tokens x", 2, {"--tokens 'x': element 'x' is not an integer"}},
      {kRun + "--iters 1000001", 2, {"--iters", "[1, 1000000]"}},
      {kRun + "--warmup 99999999999", 2, {"--warmup"}},
      {kBench1 + "--iters 2147483647", 2, {"--iters"}},
      {"bench --device cpu --load --load-repeats 1000001", 2, {"--load-repeats"}},
      {"frobnicate", 2, {"unknown subcommand 'frobnicate'", "run", "inspect"}},
      {"rnu --device cpu", 2, {"unknown subcommand 'rnu'"}},
  });
}

TEST(CliHostile, FlagCombinationsThatMeanAMistakeAreRefused) {
  run_cases({
      {kRun + "--layer 3", 2, {"--layer is a checkpoint flag", "--checkpoint"}},
      {kRun + "--layout fused", 2, {"--layout is a checkpoint flag"}},
      {kRun + "--tensor-pattern 'model.layers.{L}.{proj}.weight'", 2, {"--tensor-pattern is a checkpoint flag"}},
      {kRun + "--proj-names a,b,c", 2, {"--proj-names is a checkpoint flag"}},
      {kRun + "--top-k 2", 2, {"--top-k is a checkpoint flag"}},
      {kBench1 + "--top-k 2", 2, {"--top-k is a checkpoint flag"}},
      {kRun + "--preset tiny --checkpoint /nonexistent", 2, {"--preset with --checkpoint"}},
      {kRun + "--hash-layers 1", 2, {"--hash-layers 1 needs --router"}},
      {kRun + "--router --layers 2 --hash-layers 3", 2, {"--hash-layers 3 is above --layers 2"}},
      {kBench1 + "--plot-with a.csv", 2, {"--plot-with needs --plot"}},
  });
}

// Every size that multiplies into an allocation is checked against the host budget before
// anything is allocated, and the message names the flag.
TEST(CliHostile, SizesBeyondTheHostAreRefusedNamingTheFlag) {
  run_cases({
      {kRun + "--layers 1000000", 2, {"host memory", "--layers 1000000"}},
      {kRun + "--layers 2147483647", 2, {"host memory", "--layers 2147483647"}},
      {kRun + "--ranks 2 --layers 100000 --tokens 1", 2, {"host memory", "--layers 100000"}},
      {kRun + "--eplb-redundant 2147483647", 2, {"host memory", "--eplb-redundant 2147483647"}},
      {kRun + "--eplb-redundant 9223372036854775807", 2,
       {"host memory", "more than 2^63 bytes", "--eplb-redundant 9223372036854775807"}},
      {kRun + "--ranks 2 --eplb-redundant 9223372036854775806", 2, {"--eplb-redundant 9223372036854775806"}},
  });
  // No negative expert count may show up in a message (2^63 - 1 once wrapped it).
  ScopedHostLimit limit;
  const test::CliResult r = test::run_cli(kRun + "--eplb-redundant 9223372036854775807");
  EXPECT_EQ(r.err.find("= -"), std::string::npos) << test::describe(r);
}

TEST(CliHostile, PlotInputsAreBoundedAndWriteErrorsReported) {
  const fs::path dir = fs::temp_directory_path() / ("moe_ep_cli_hostile_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string svg = (dir / "p.svg").string(), csv = (dir / "c.csv").string();
  {
    std::FILE* f = std::fopen(csv.c_str(), "w");
    std::fputs("tokens,time_us,variant\n1,abc,x\n", f);
    std::fclose(f);
  }
  std::vector<CliCase> cases = {
      {kBench1 + "--plot " + svg + " --plot-with /dev/zero", 2, {"--plot-with '/dev/zero'", "expected a CSV file"}},
      {kBench1 + "--plot " + svg + " --plot-with " + dir.string(), 2, {"expected a CSV file"}},
      {kBench1 + "--plot " + svg + " --plot-with " + csv, 2, {"column 'time_us' holds 'abc'"}},
  };
  if (fs::exists("/dev/full")) {
    cases.push_back({kBench1 + "--csv /dev/full", 1, {"--csv '/dev/full': writing failed"}});
    cases.push_back({kBench1 + "--plot /dev/full", 1, {"--plot '/dev/full': writing failed"}});
  }
  run_cases(cases);
  ScopedHostLimit limit;
  const test::CliResult r = test::run_cli(kBench1 + "--plot /dev/full");
  EXPECT_EQ(r.out.find("plot: /dev/full"), std::string::npos) << "a failed plot reported as written; "
                                                              << test::describe(r);
  fs::remove_all(dir);
}

// Valid runs the output check once failed: chained layers whose signal faded to zero, and
// --activation-clamp 0, whose outputs are zero by definition. The check still compares with the
// reference bit for bit; it must pass, and say why zero rows are right where they are.
TEST(CliHostile, ValidChainsAndZeroClampPassTheCheck) {
  ScopedHostLimit limit;
  for (const std::string args :
       {"--layers 10 --tokens 8", "--ranks 2 --layers 6", "--ranks 4 --layers 8 --tokens 16",
        "--activation-clamp 0", "--activation-clamp 0 --ranks 2 --layers 3 --tokens 8",
        "--layers 12 --tokens 4 --backend nvfp4"}) {
    const test::CliResult r = test::run_cli("run --device cpu --json " + args);
    ASSERT_EQ(r.exit_code, 0) << test::describe(r);
    const auto j = test::parse_json(r);
    EXPECT_EQ(j["check_passed"], true) << test::describe(r);
    if (args.find("--activation-clamp 0") != std::string::npos)
      EXPECT_NE(j["sanity"].get<std::string>().find("activation_clamp = 0"), std::string::npos) << test::describe(r);
  }
}

// The check still fails for a wrong result on a chain (the corrupted row of the single-layer
// path is covered by test_cli_run.cpp): a non-zero output where the clamp makes every output
// zero is not hidden by the zero rule.
TEST(CliHostile, ZeroClampRuleStillSeesNonzeroOutputs) {
  ScopedHostLimit limit;
  const test::CliResult r = test::run_cli("run --device cpu --activation-clamp 0 --tokens 8 --corrupt-row 3");
  EXPECT_EQ(r.exit_code, 1) << test::describe(r);
  EXPECT_NE(r.err.find("check FAILED"), std::string::npos) << test::describe(r);
}

}  // namespace
}  // namespace moe_ep
