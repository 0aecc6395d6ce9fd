// Failures across ranks: a rank that never arrives, bad input on one rank, a layer that needs
// more workspace than the runtime has. No hang, clear messages, usable afterwards.
#include <gtest/gtest.h>

#include <chrono>

#include "core/runtime_state.h"
#include "support/ep_harness.h"

namespace moe_ep {
namespace {

using namespace testsupport;
using namespace std::chrono_literals;

TEST(EpFailures, RankThatNeverArrivesTimesOutOnTheOthers) {
  Problem p = tiny_problem("mxfp4");
  p.max_tokens = 4;
  const WeightSet w = random_weights(p, WeightFormat::kMXFP4, 31);
  constexpr int R = 4, kAbsent = 3;
  const auto start = std::chrono::steady_clock::now();
  auto out = run_ranks(R, [&](int r) {
    auto rt = Runtime::acquire(simulated_bootstrap(R, r, /*timeout_ms=*/200));
    auto layer = Layer::create(rt, p.desc(), slice_experts(w.pack(), r * 4, 4), p.overrides);
    if (r == kAbsent) return;  // never calls forward
    run_forward(*layer, p, random_inputs(p, 4, 40 + r));
  });
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s) << "no rank may hang";
  for (int r = 0; r < R; ++r) {
    if (r == kAbsent) {
      EXPECT_FALSE(out[r].threw) << out[r].message;
      continue;
    }
    ASSERT_TRUE(out[r].threw) << "rank " << r;
    EXPECT_EQ(out[r].code, ErrorCode::kTimeout) << out[r].message;
    EXPECT_NE(out[r].message.find("rank " + std::to_string(r) + " timed out in phase 'dispatch"),
              std::string::npos) << out[r].message;
    EXPECT_NE(out[r].message.find("waiting for rank 3"), std::string::npos) << out[r].message;
  }
}

TEST(EpFailures, BadInputOnOneRankFailsEveryRankAtOnceAndTheNextForwardWorks) {
  Problem p = tiny_problem("mxfp4");
  p.max_tokens = 8;
  const WeightSet w = random_weights(p, WeightFormat::kMXFP4, 32);
  constexpr int R = 4;
  std::vector<Inputs> good;
  for (int r = 0; r < R; ++r) good.push_back(random_inputs(p, 2 + 2 * r, 50 + r));
  const HostTensor<uint16_t> ref = reference_y(p, w, concat_inputs(good));

  std::vector<HostTensor<uint16_t>> y(R);
  std::vector<std::string> first_error(R);
  std::vector<ErrorCode> first_code(R);
  std::vector<char> counts_clean(R);  // not vector<bool>: each rank writes its own element (TSan)
  const auto start = std::chrono::steady_clock::now();
  auto out = run_ranks(R, [&](int r) {
    // A long timeout: the other ranks must learn of the failure, not wait it out.
    auto rt = Runtime::acquire(simulated_bootstrap(R, r, /*timeout_ms=*/60000));
    auto layer = Layer::create(rt, p.desc(), slice_experts(w.pack(), r * 16 / R, 16 / R), p.overrides);
    // Rank 1 passes an id outside [-1, E).
    Inputs bad = good[r];
    if (r == 1) bad.set_id(1, 2, 99);
    try {
      run_forward(*layer, p, bad);
      first_error[r] = "no error";
    } catch (const Error& e) {
      first_error[r] = e.what();
      first_code[r] = e.code();
    }
    const Workspace& ws = *rt->workspace();
    const auto* counts = reinterpret_cast<const int32_t*>(ws.region(r, WorkspaceRegionId::kRecvCounts));
    counts_clean[r] = std::all_of(counts, counts + R, [](int32_t c) { return c == 0; });
    rt->state().transport().barrier("counts checked");  // before any rank sends again
    y[r] = run_forward(*layer, p, good[r]);
  });
  EXPECT_LT(std::chrono::steady_clock::now() - start, 20s);
  for (int r = 0; r < R; ++r) ASSERT_FALSE(out[r].threw) << outcomes_str(out);
  EXPECT_EQ(first_code[1], ErrorCode::kInvalidArgument) << first_error[1];
  EXPECT_NE(first_error[1].find("topk_ids[1, 2] = 99"), std::string::npos) << first_error[1];
  for (int r : {0, 2, 3}) {
    EXPECT_EQ(first_code[r], ErrorCode::kRuntime) << first_error[r];
    EXPECT_NE(first_error[r].find("rank 1 failed before phase 'dispatch"), std::string::npos)
        << first_error[r];
    EXPECT_NE(first_error[r].find("topk_ids[1, 2] = 99"), std::string::npos) << first_error[r];
  }
  for (int r = 0; r < R; ++r) EXPECT_TRUE(counts_clean[r]) << "rank " << r;
  EXPECT_EQ(compare_ranks_bitwise(y, ref, p.hidden), "");
}

TEST(EpFailures, LayerNeedingMoreWorkspaceIsRefused) {
  Problem p = tiny_problem("mxfp4");
  p.max_tokens = 4;
  const WeightSet w = random_weights(p, WeightFormat::kMXFP4, 33);
  constexpr int R = 2;
  std::vector<std::string> error(R);
  auto out = run_ranks(R, [&](int r) {
    auto rt = Runtime::acquire(simulated_bootstrap(R, r));
    const WeightPack mine = slice_experts(w.pack(), r * 8, 8);
    auto first = Layer::create(rt, p.desc(), mine, p.overrides);
    const std::byte* base = rt->workspace()->base(r);
    const int64_t bytes = rt->workspace()->bytes();
    Problem bigger = p;
    bigger.max_tokens = 5;
    try {
      Layer::create(rt, bigger.desc(), mine, bigger.overrides);
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kRuntime);
      error[r] = e.what();
    }
    // Not reallocated, and a layer of the same shape still works.
    EXPECT_EQ(rt->workspace()->base(r), base);
    EXPECT_EQ(rt->workspace()->bytes(), bytes);
    auto second = Layer::create(rt, p.desc(), mine, p.overrides);
    run_forward(*second, p, random_inputs(p, 3, 60 + r));
  });
  for (auto& o : out) ASSERT_FALSE(o.threw) << outcomes_str(out);
  for (int r = 0; r < R; ++r)
    EXPECT_NE(error[r].find("max_tokens_per_rank = 5 exceeds the max_tokens_per_rank = 4"),
              std::string::npos) << error[r];
}

}  // namespace
}  // namespace moe_ep
