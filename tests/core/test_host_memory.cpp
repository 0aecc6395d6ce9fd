// Requests too large (issue 16): size-driven host allocations are checked before they are made,
// and the error names the bytes needed, for what, the bytes available and what drove the size.
// MOE_EP_HOST_MEMORY_LIMIT pins "available" so that the cases do not depend on the machine.
#include <gtest/gtest.h>

#include <cstdlib>
#include <limits>

#include "cli/cli_runner.h"
#include "core/host_memory.h"
#include "support/ep_harness.h"

namespace moe_ep {
namespace {

using namespace testsupport;

class ScopedLimit {
 public:
  explicit ScopedLimit(const char* bytes) { setenv("MOE_EP_HOST_MEMORY_LIMIT", bytes, 1); }
  ~ScopedLimit() { unsetenv("MOE_EP_HOST_MEMORY_LIMIT"); }
};

void expect_parts(const std::string& text, std::initializer_list<const char*> parts) {
  for (const char* part : parts)
    EXPECT_NE(text.find(part), std::string::npos) << "'" << text << "' lacks '" << part << "'";
}

TEST(HostMemory, SaturatingBytes) {
  EXPECT_EQ(detail::saturating_bytes({3, 5, 7}), 105);
  EXPECT_EQ(detail::saturating_bytes({int64_t{1} << 40, int64_t{1} << 30}),
            std::numeric_limits<int64_t>::max());
  EXPECT_EQ(detail::saturating_bytes({100, 0}), 0);
}

TEST(HostMemory, AvailableIsMeasured) {
  const int64_t avail = detail::available_host_bytes();
  EXPECT_GT(avail, int64_t{1} << 20) << detail::available_host_bytes_source();
  ScopedLimit limit("12345");
  EXPECT_EQ(detail::available_host_bytes(), 12345);
}

TEST(HostMemory, ProblemMessageNamesBytesPurposeAvailableAndDriver) {
  ScopedLimit limit("1000000");
  EXPECT_EQ(detail::host_allocation_problem(1000000, "a buffer", "--flag"), "");
  expect_parts(detail::host_allocation_problem(1000001, "the thing", "--tokens 7"),
               {"the thing needs 1000001 bytes", "1000000 bytes", "are available",
                "MOE_EP_HOST_MEMORY_LIMIT", "driven by --tokens 7"});
  expect_parts(detail::host_allocation_problem(std::numeric_limits<int64_t>::max(), "x", "y"),
               {"more than 2^63 bytes"});
  try {
    detail::require_host_bytes(2000000, "the thing", "--tokens 7");
    ADD_FAILURE() << "not refused";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnsupported);
  }
}

TEST(HostMemory, CliRunWithTooManyTokensIsRefusedBeforeAllocating) {
  ScopedLimit limit("4000000000");  // the child process inherits it
  const test::CliResult r = test::run_cli("run --device cpu --tokens 100000000");
  EXPECT_EQ(r.exit_code, 2) << r.err;
  expect_parts(r.err, {"the host problem", "needs 208002506752 bytes", "4000000000 bytes", "available",
                       "--tokens 100000000 x --ranks 1", "--preset tiny"});
  EXPECT_EQ(r.err.find("out of host memory"), std::string::npos) << r.err;
}

TEST(HostMemory, LayerWeightsCheckedBeforeTheCopy) {
  Problem p = tiny_problem("mxfp4");
  const WeightSet w = random_weights(p, WeightFormat::kMXFP4, 121);
  ScopedLimit limit("100000");
  try {
    make_layer(p, w);
    ADD_FAILURE() << "not refused";
  } catch (const Error& e) {
    expect_parts(e.message(), {"the layer's copy of 16 experts' weights in mxfp4 needs",
                               "100000 bytes", "num_experts / world_size"});
  }
}

TEST(HostMemory, WorkspaceTooLargeFailsEveryRankWithoutHanging) {
  Problem p = tiny_problem("mxfp4");
  p.max_tokens = 4096;  // workspace of 2 ranks: tens of MiB, the weights well below the limit
  const WeightSet w = random_weights(p, WeightFormat::kMXFP4, 122);
  ScopedLimit limit("8000000");
  constexpr int R = 2;
  auto out = run_ranks(R, [&](int r) {
    auto rt = Runtime::acquire(simulated_bootstrap(R, r, 60000));
    Layer::create(rt, p.desc(), slice_experts(w.pack(), r * 8, 8), p.overrides);
  });
  for (int r = 0; r < R; ++r) {
    ASSERT_TRUE(out[r].threw) << "rank " << r;
    expect_parts(out[r].message, {"workspace window needs", "8000000 bytes",
                                  "workspace_bytes(R, E, max_tokens_per_rank, H, I, K)"});
  }
}

}  // namespace
}  // namespace moe_ep
