// Faults in expert parallelism on simulated ranks (issue 16), injected at the fault points of the
// CPU EP layer (src/core/fault_points.h): a rank that throws in the middle of dispatch, one that
// leaves before combine, one that arrives late but within the timeout, one that is 10x slower
// for a whole run. The others finish, or fail within timeout_ms with an error naming the rank and
// the phase; afterwards the runtime is released and acquired again in the same process and a new
// forward is bitwise correct.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "core/fault_points.h"
#include "core/runtime_state.h"
#include "moe_ep/error.h"
#include "support/ep_harness.h"

namespace moe_ep {
namespace {

using namespace testsupport;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

constexpr int R = 4;
constexpr int kFaulty = 2;

// Not a std::exception: the layer's steps do not catch it, so the rank leaves the forward without
// telling anyone, as a dead process would.
struct RankLeft {};

class Hook : public detail::FaultHook {
 public:
  std::function<void(int, std::string_view)> fn;
  void at(int rank, std::string_view point) override { fn(rank, point); }
};

class EpFaults : public ::testing::Test {
 protected:
  void SetUp() override {
    p_ = tiny_problem("mxfp4");
    p_.max_tokens = 8;
    w_ = random_weights(p_, WeightFormat::kMXFP4, 111);
    for (int r = 0; r < R; ++r) in_.push_back(random_inputs(p_, 3 + r, 112 + r, {0.1}));
    ref_ = reference_y(p_, w_, concat_inputs(in_));
  }
  void TearDown() override { detail::set_fault_hook(nullptr); }

  void install(std::function<void(int, std::string_view)> fn) {
    hook_.fn = std::move(fn);
    detail::set_fault_hook(&hook_);
  }

  // A fresh world after the fault: acquire, build, forward, bitwise against the reference.
  void expect_recovery() {
    detail::set_fault_hook(nullptr);
    std::vector<HostTensor<uint16_t>> y(R);
    auto out = run_ranks(R, [&](int r) {
      auto rt = Runtime::acquire(simulated_bootstrap(R, r, 5000));
      auto layer = Layer::create(rt, p_.desc(), slice_experts(w_.pack(), r * 4, 4), p_.overrides);
      y[r] = run_forward(*layer, p_, in_[r]);
    });
    for (auto& o : out) ASSERT_FALSE(o.threw) << "after the fault: " << outcomes_str(out);
    EXPECT_EQ(compare_ranks_bitwise(y, ref_, p_.hidden), "");
  }

  Problem p_;
  WeightSet w_;
  std::vector<Inputs> in_;
  HostTensor<uint16_t> ref_;
  Hook hook_;
};

TEST_F(EpFaults, RankThrowingInTheMiddleOfDispatchFailsEveryRankAtOnce) {
  install([](int rank, std::string_view point) {
    if (rank == kFaulty && point == "dispatch") throw std::runtime_error("injected fault in dispatch");
  });
  std::vector<HostTensor<uint16_t>> y(R);
  const auto start = Clock::now();
  auto out = run_ranks(R, [&](int r) {
    auto rt = Runtime::acquire(simulated_bootstrap(R, r, 60000));
    auto layer = Layer::create(rt, p_.desc(), slice_experts(w_.pack(), r * 4, 4), p_.overrides);
    try {
      run_forward(*layer, p_, in_[r]);
      ADD_FAILURE() << "rank " << r << ": the faulty forward succeeded";
    } catch (const std::exception& e) {  // the faulty rank gets its own exception back
      if (r == kFaulty) EXPECT_NE(std::string(e.what()).find("injected fault in dispatch"), std::string::npos);
      else EXPECT_NE(std::string(e.what()).find("rank 2 failed before phase 'dispatch of layer 0 forward 0'"),
                     std::string::npos) << e.what();
    }
    // The world stays usable after a local failure: the next forward (no fault) is correct.
    rt->state().transport().barrier("fault cleared");
    if (r == 0) detail::set_fault_hook(nullptr);
    rt->state().transport().barrier("hook removed");
    y[r] = run_forward(*layer, p_, in_[r]);
  });
  EXPECT_LT(Clock::now() - start, 20s) << "the others must learn of the failure, not wait it out";
  for (auto& o : out) ASSERT_FALSE(o.threw) << outcomes_str(out);
  EXPECT_EQ(compare_ranks_bitwise(y, ref_, p_.hidden), "");
  expect_recovery();
}

TEST_F(EpFaults, RankLeavingBeforeCombineTimesOutTheOthersNamingRankAndPhase) {
  install([](int rank, std::string_view point) {
    if (rank == kFaulty && point == "combine") throw RankLeft{};
  });
  constexpr int64_t kTimeoutMs = 300;
  std::vector<double> waited_ms(R);
  const auto start = Clock::now();
  auto out = run_ranks(R, [&](int r) {
    auto rt = Runtime::acquire(simulated_bootstrap(R, r, kTimeoutMs));
    auto layer = Layer::create(rt, p_.desc(), slice_experts(w_.pack(), r * 4, 4), p_.overrides);
    const auto t0 = Clock::now();
    try {
      run_forward(*layer, p_, in_[r]);
    } catch (const RankLeft&) {
      return;  // rank 2 "died"; it releases what it holds
    } catch (...) {
      waited_ms[r] = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
      throw;
    }
  });
  EXPECT_LT(Clock::now() - start, 10s);
  for (int r = 0; r < R; ++r) {
    if (r == kFaulty) {
      EXPECT_FALSE(out[r].threw) << out[r].message;
      continue;
    }
    ASSERT_TRUE(out[r].threw) << "rank " << r;
    EXPECT_EQ(out[r].code, ErrorCode::kTimeout) << out[r].message;
    EXPECT_NE(out[r].message.find("phase 'combine of layer 0 forward 0'"), std::string::npos) << out[r].message;
    EXPECT_NE(out[r].message.find("waiting for rank 2"), std::string::npos) << out[r].message;
    EXPECT_LT(waited_ms[r], kTimeoutMs + 2000) << "rank " << r;
  }
  expect_recovery();
}

TEST_F(EpFaults, LateRankWithinTheTimeoutIsWaitedFor) {
  install([](int rank, std::string_view point) {
    if (rank == kFaulty && point == "dispatch") std::this_thread::sleep_for(400ms);
  });
  std::vector<HostTensor<uint16_t>> y(R);
  auto out = run_ranks(R, [&](int r) {
    auto rt = Runtime::acquire(simulated_bootstrap(R, r, 3000));
    auto layer = Layer::create(rt, p_.desc(), slice_experts(w_.pack(), r * 4, 4), p_.overrides);
    if (r == 3) std::this_thread::sleep_for(400ms);  // late to the forward as well
    y[r] = run_forward(*layer, p_, in_[r]);
  });
  for (auto& o : out) ASSERT_FALSE(o.threw) << outcomes_str(out);
  EXPECT_EQ(compare_ranks_bitwise(y, ref_, p_.hidden), "");
}

TEST_F(EpFaults, TenTimesSlowerRankForAWholeRun) {
  // Time one forward of the world without faults, then make rank 2 spend 10x that at each of its
  // two points, for every forward of a run of 8.
  constexpr int kForwards = 8;
  auto run = [&](std::vector<HostTensor<uint16_t>>& y) {
    const auto t0 = Clock::now();
    auto out = run_ranks(R, [&](int r) {
      auto rt = Runtime::acquire(simulated_bootstrap(R, r, 10000));
      auto layer = Layer::create(rt, p_.desc(), slice_experts(w_.pack(), r * 4, 4), p_.overrides);
      for (int n = 0; n < kForwards; ++n) y[r] = run_forward(*layer, p_, in_[r]);
    });
    for (auto& o : out) EXPECT_FALSE(o.threw) << outcomes_str(out);
    return Clock::now() - t0;
  };
  std::vector<HostTensor<uint16_t>> y(R);
  const auto normal = run(y);
  const auto per_forward = std::max<Clock::duration>(normal / kForwards, 1ms);
  install([&](int rank, std::string_view) {
    if (rank == kFaulty) std::this_thread::sleep_for(per_forward * 5);  // two points: 10x
  });
  const auto slow = run(y);
  EXPECT_EQ(compare_ranks_bitwise(y, ref_, p_.hidden), "");
  EXPECT_GT(slow, normal * 5) << "the slow rank did not slow the run";
}

}  // namespace
}  // namespace moe_ep
