// Concurrency rule (README.md "Concurrency", src/core/call_guard.h): on a single-process
// runtime, forwards on one layer from several threads are serialized and forwards on different
// layers run at once, with results bitwise equal to serial runs; on simulated (and NCCL) ranks a
// second thread's forward on a rank that is already in a forward is refused with kRuntime, and
// the forward in flight completes correctly. Run under ThreadSanitizer in CI.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "support/ep_harness.h"

namespace moe_ep {
namespace {

using namespace testsupport;
using namespace std::chrono_literals;

constexpr int kForwardsPerThread = 40;

TEST(Concurrency, TwoThreadsOnOneLayerGiveSerialResults) {
  Problem p = tiny_problem("mxfp4");
  p.max_tokens = 16;
  const WeightSet w = random_weights(p, WeightFormat::kMXFP4, 91);
  auto layer = make_layer(p, w);
  const Inputs in[2] = {random_inputs(p, 16, 92), random_inputs(p, 9, 93, {0.25})};
  const HostTensor<uint16_t> ref[2] = {run_forward(*layer, p, in[0]), run_forward(*layer, p, in[1])};
  std::atomic<int> mismatches{0}, errors{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < 2; ++i)
    threads.emplace_back([&, i] {
      for (int n = 0; n < kForwardsPerThread; ++n) {
        try {
          if (run_forward(*layer, p, in[i]).values() != ref[i].values()) ++mismatches;
        } catch (const Error&) {
          ++errors;
        }
      }
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(mismatches.load(), 0);
  EXPECT_EQ(errors.load(), 0);
}

TEST(Concurrency, TwoLayersOfOneRuntimeFromTwoThreads) {
  Problem p = tiny_problem("mxfp4");
  p.max_tokens = 16;
  Problem q = tiny_problem("nvfp4");
  q.max_tokens = 16;
  const WeightSet wp = random_weights(p, WeightFormat::kMXFP4, 94);
  const WeightSet wq = random_weights(q, WeightFormat::kNVFP4, 95);
  auto runtime = cpu_runtime();
  auto lp = Layer::create(runtime, p.desc(), wp.pack(), p.overrides);
  auto lq = Layer::create(runtime, q.desc(), wq.pack(), q.overrides);
  const Inputs ip = random_inputs(p, 16, 96), iq = random_inputs(q, 13, 97);
  const HostTensor<uint16_t> rp = run_forward(*lp, p, ip), rq = run_forward(*lq, q, iq);
  std::atomic<int> mismatches{0};
  std::thread a([&] {
    for (int n = 0; n < kForwardsPerThread; ++n) mismatches += run_forward(*lp, p, ip).values() != rp.values();
  });
  std::thread b([&] {
    for (int n = 0; n < kForwardsPerThread; ++n) mismatches += run_forward(*lq, q, iq).values() != rq.values();
  });
  a.join();
  b.join();
  EXPECT_EQ(mismatches.load(), 0);
}

// Rank 0 is driven by two threads: the first waits in its forward for rank 1 (which comes late);
// the second thread's forward, on the same layer or on another layer of the rank, is refused
// at once and touches nothing, and the first forward then completes bitwise correct.
TEST(Concurrency, SecondThreadOnASimulatedRankIsRefused) {
  Problem p = tiny_problem("mxfp4");
  p.max_tokens = 8;
  const WeightSet w = random_weights(p, WeightFormat::kMXFP4, 98);
  constexpr int R = 2;
  std::vector<Inputs> in;
  for (int r = 0; r < R; ++r) in.push_back(random_inputs(p, 8, 99 + r));
  const HostTensor<uint16_t> ref = reference_y(p, w, concat_inputs(in));
  for (bool same_layer : {true, false}) {
    std::vector<HostTensor<uint16_t>> y(R);
    std::string refused;
    ErrorCode refused_code = ErrorCode::kInternal;
    std::atomic<bool> in_forward{false};
    auto out = run_ranks(R, [&](int r) {
      auto rt = Runtime::acquire(simulated_bootstrap(R, r, 20000));
      auto l0 = Layer::create(rt, p.desc(), slice_experts(w.pack(), r * 8, 8), p.overrides);
      auto l1 = Layer::create(rt, p.desc(), slice_experts(w.pack(), r * 8, 8), p.overrides);
      if (r == 1) {
        while (!in_forward) std::this_thread::sleep_for(1ms);
        std::this_thread::sleep_for(300ms);  // rank 0's second thread tries meanwhile
        y[1] = run_forward(*l0, p, in[1]);
        return;
      }
      std::thread second([&] {
        while (!in_forward) std::this_thread::sleep_for(1ms);
        std::this_thread::sleep_for(50ms);
        HostTensor<uint16_t> other = poisoned_output(p, 8);
        try {
          (same_layer ? l0 : l1)->forward(in[0].args(other, true));
          refused = "not refused";
        } catch (const Error& e) {
          refused = e.what();
          refused_code = e.code();
        }
        for (uint16_t v : other.values()) ASSERT_EQ(v, kBf16NaN) << "the refused forward wrote y";
      });
      in_forward = true;
      y[0] = run_forward(*l0, p, in[0]);
      second.join();
    });
    for (auto& o : out) ASSERT_FALSE(o.threw) << outcomes_str(out);
    EXPECT_EQ(refused_code, ErrorCode::kRuntime) << refused;
    EXPECT_NE(refused.find("another thread is already in a forward"), std::string::npos) << refused;
    EXPECT_EQ(compare_ranks_bitwise(y, ref, p.hidden), "") << "same_layer " << same_layer;
  }
}

}  // namespace
}  // namespace moe_ep
