// Faults in expert parallelism on the one-GPU simulation (Bootstrap{comm = simulated, device =
// cuda:0}, R = 4 ranks on threads), injected at the fault points of cuda/ep/sim_layer.cpp
// (core/fault_points.h): a rank that throws in the middle of dispatch, one that leaves before
// combine, one that arrives late but within the timeout, one that is 10x slower for a whole run.
// The others finish, or fail within timeout_ms with an error naming the rank and the phase;
// afterwards the runtime is released and acquired again in the same process and a new forward
// equals, bit for bit, the world-size-1 GPU layer on the global batch.
#include <chrono>
#include <functional>
#include <thread>

#include <gtest/gtest.h>

#include "core/fault_points.h"
#include "cuda/errors.h"
#include "cuda_test_util.h"
#include "support/ep_harness.h"

namespace moe_ep::cudatest {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using testsupport::Inputs;
using testsupport::Problem;

constexpr int R = 4;
constexpr int kFaulty = 2;

struct RankLeft {};  // not a std::exception: the rank leaves the forward as a dead process would

class Hook : public detail::FaultHook {
 public:
  std::function<void(int, std::string_view)> fn;
  void at(int rank, std::string_view point) override { fn(rank, point); }
};

struct Outcome {
  std::vector<uint16_t> y;
  bool threw = false, left = false;
  ErrorCode code = ErrorCode::kInternal;
  std::string message;
  double waited_ms = 0.0;
};

class EpSimFaults : public ::testing::Test {
 protected:
  void SetUp() override {
    MOE_EP_REQUIRE_CUDA();
    p_ = testsupport::tiny_problem("mxfp4");
    p_.max_tokens = 16;
    p_.overrides.gemm = GemmKernel::kMma;  // the same kernels for the reference and the ranks
    w_ = testsupport::random_weights(p_, WeightFormat::kMXFP4, 211);
    for (int r = 0; r < R; ++r) in_.push_back(testsupport::random_inputs(p_, 3 + 2 * r, 212 + r, {0.1}));
    Problem g = p_;
    const Inputs global = testsupport::concat_inputs(in_);
    g.max_tokens = global.tokens;
    auto layer = make_gpu_layer(g, w_.pack());
    ref_ = run_on_gpu(*layer, to_device(g, global));
  }
  void TearDown() override { detail::set_fault_hook(nullptr); }

  void install(std::function<void(int, std::string_view)> fn) {
    hook_.fn = std::move(fn);
    detail::set_fault_hook(&hook_);
  }

  // R ranks on threads, `forwards` forwards each; per-rank outcome of the last forward.
  std::vector<Outcome> run(int64_t timeout_ms, int forwards = 1) {
    std::vector<Outcome> out(R);
    std::vector<std::thread> threads;
    for (int r = 0; r < R; ++r)
      threads.emplace_back([&, r] {
        Outcome& o = out[r];
        try {
          auto rt = Runtime::acquire(simulated_gpu_bootstrap(R, r, timeout_ms));
          const int64_t E_loc = p_.num_experts / R;
          auto layer = Layer::create(rt, p_.desc(), testsupport::slice_experts(w_.pack(), r * E_loc, E_loc), p_.overrides);
          const DeviceInputs d = to_device(p_, in_[r]);
          for (int f = 0; f < forwards; ++f) {
            const auto t0 = Clock::now();
            try {
              o.y = run_on_gpu(*layer, d);
            } catch (...) {
              o.waited_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
              throw;
            }
          }
        } catch (const RankLeft&) {
          o.left = true;
        } catch (const Error& e) {
          o.threw = true;
          o.code = e.code();
          o.message = e.what();
        } catch (const std::exception& e) {
          o.threw = true;
          o.message = e.what();
        }
      });
    for (auto& t : threads) t.join();
    return out;
  }

  std::vector<uint16_t> joined(const std::vector<Outcome>& out) {
    std::vector<uint16_t> y;
    for (const Outcome& o : out) y.insert(y.end(), o.y.begin(), o.y.end());
    return y;
  }

  void expect_recovery() {
    detail::set_fault_hook(nullptr);
    const auto out = run(20000);
    for (int r = 0; r < R; ++r) ASSERT_FALSE(out[r].threw) << "after the fault, rank " << r << ": " << out[r].message;
    EXPECT_EQ(joined(out), ref_) << "the forward after the fault is not bitwise the world-size-1 layer's";
  }

  Problem p_;
  testsupport::WeightSet w_;
  std::vector<Inputs> in_;
  std::vector<uint16_t> ref_;
  Hook hook_;
};

TEST_F(EpSimFaults, RankThrowingInTheMiddleOfDispatchFailsEveryRankAtOnce) {
  install([](int rank, std::string_view point) {
    if (rank == kFaulty && point == "dispatch") throw std::runtime_error("injected fault in dispatch");
  });
  const auto start = Clock::now();
  const auto out = run(60000);
  EXPECT_LT(Clock::now() - start, 20s) << "the others must learn of the failure, not wait it out";
  for (int r = 0; r < R; ++r) {
    ASSERT_TRUE(out[r].threw) << "rank " << r;
    if (r == kFaulty)
      EXPECT_NE(out[r].message.find("injected fault in dispatch"), std::string::npos) << out[r].message;
    else
      EXPECT_NE(out[r].message.find("rank 2 failed before phase 'prepare of layer 0 forward 0'"), std::string::npos)
          << "rank " << r << ": " << out[r].message;
  }
  expect_recovery();
}

TEST_F(EpSimFaults, RankLeavingBeforeCombineTimesOutTheOthersNamingRankAndPhase) {
  install([](int rank, std::string_view point) {
    if (rank == kFaulty && point == "combine") throw RankLeft{};
  });
  constexpr int64_t kTimeoutMs = 300;
  const auto start = Clock::now();
  const auto out = run(kTimeoutMs);
  EXPECT_LT(Clock::now() - start, 15s);
  for (int r = 0; r < R; ++r) {
    if (r == kFaulty) {
      EXPECT_TRUE(out[r].left) << out[r].message;
      continue;
    }
    ASSERT_TRUE(out[r].threw) << "rank " << r;
    EXPECT_EQ(out[r].code, ErrorCode::kTimeout) << out[r].message;
    EXPECT_NE(out[r].message.find("phase 'launch of layer 0 forward 0'"), std::string::npos) << out[r].message;
    EXPECT_NE(out[r].message.find("waiting for rank 2"), std::string::npos) << out[r].message;
    EXPECT_LT(out[r].waited_ms, kTimeoutMs + 2000) << "rank " << r;
  }
  expect_recovery();
}

TEST_F(EpSimFaults, LateRankWithinTheTimeoutIsWaitedFor) {
  install([](int rank, std::string_view point) {
    if (rank == kFaulty && point == "dispatch") std::this_thread::sleep_for(400ms);
  });
  const auto out = run(3000);
  for (int r = 0; r < R; ++r) ASSERT_FALSE(out[r].threw) << "rank " << r << ": " << out[r].message;
  EXPECT_EQ(joined(out), ref_);
}

TEST_F(EpSimFaults, TenTimesSlowerRankForAWholeRun) {
  constexpr int kForwards = 8;
  auto timed = [&] {
    const auto t0 = Clock::now();
    const auto out = run(10000, kForwards);
    for (int r = 0; r < R; ++r) EXPECT_FALSE(out[r].threw) << "rank " << r << ": " << out[r].message;
    EXPECT_EQ(joined(out), ref_);
    return Clock::now() - t0;
  };
  const auto normal = timed();
  const auto per_forward = std::max<Clock::duration>(normal / kForwards, 1ms);
  install([&](int rank, std::string_view) {
    if (rank == kFaulty) std::this_thread::sleep_for(per_forward * 5);  // two points: 10x
  });
  const auto slow = timed();
  EXPECT_GT(slow, normal * 3) << "the slow rank did not slow the run";
}

}  // namespace
}  // namespace moe_ep::cudatest
