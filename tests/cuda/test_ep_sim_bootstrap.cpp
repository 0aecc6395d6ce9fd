// The one-GPU expert-parallel simulation through the public API: Bootstrap{comm = simulated,
// device = cuda:0} on R threads, Layer::create / forward per rank as on the CPU
// (cuda/ep/sim_layer.cpp). The ranks' y must equal, bit for bit, the CUDA world-size-1 layer on
// the global batch (same pinned GEMM kernels) and match the CPU layer by the recipe's threshold;
// a rank with bad arguments makes every rank fail the forward without a hang, and the next
// forward is right; a rank that never calls forward ends the others' forward in a timeout that
// names the phase.
#include <thread>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "cuda/errors.h"
#include "cuda_test_util.h"
#include "support/ep_harness.h"

namespace moe_ep::cudatest {
namespace {

using testsupport::Inputs;
using testsupport::Problem;
using testsupport::WeightSet;

Problem pinned_tiny(const std::string& recipe) {
  Problem p = testsupport::tiny_problem(recipe);
  p.max_tokens = 64;
  p.overrides.gemm = GemmKernel::kMma;  // the same kernels for the reference and the ranks
  return p;
}

struct RankOutcome {
  std::vector<std::vector<uint16_t>> y;  // per forward
  std::string error;
  ErrorCode code = ErrorCode::kInternal;
};

// Runs `forwards` forwards on R simulated ranks; `bad_rank` passes T > max_tokens_per_rank in
// forward `bad_forward`; `absent_rank` never calls forward.
std::vector<RankOutcome> run_ranks(const Problem& p, const WeightSet& w, const std::vector<Inputs>& per_rank,
                                   int forwards, int bad_rank = -1, int bad_forward = -1,
                                   int absent_rank = -1, int64_t timeout_ms = 20000) {
  const int R = static_cast<int>(per_rank.size());
  const int64_t E_loc = p.num_experts / R;
  std::vector<RankOutcome> out(R);
  std::vector<std::thread> threads;
  for (int r = 0; r < R; ++r)
    threads.emplace_back([&, r] {
      try {
        auto rt = Runtime::acquire(simulated_gpu_bootstrap(R, r, timeout_ms));
        auto layer = Layer::create(rt, p.desc(), testsupport::slice_experts(w.pack(), r * E_loc, E_loc), p.overrides);
        if (r == absent_rank) return;
        cudaStream_t stream = nullptr;
        MOE_EP_CUDA_CHECK(cudaStreamCreate(&stream));
        const DeviceInputs d = to_device(p, per_rank[r]);
        for (int f = 0; f < forwards; ++f) {
          try {
            if (f == bad_forward && r == bad_rank) {
              ForwardArgs a = d.args(stream);
              a.x.shape[0] = p.max_tokens + 1;  // validated before anything runs
              layer->forward(a);
            } else {
              std::vector<uint16_t> y = run_on_gpu(*layer, d, stream);
              out[r].y.push_back(std::move(y));
              EXPECT_EQ(layer->read_error_flags(), 0u) << "rank " << r;
            }
          } catch (const Error& e) {
            out[r].y.push_back({});
            out[r].error = e.message();
            out[r].code = e.code();
          }
        }
        MOE_EP_CUDA_CHECK(cudaStreamDestroy(stream));
      } catch (const Error& e) {
        out[r].error = e.message();
        out[r].code = e.code();
      }
    });
  for (auto& t : threads) t.join();
  return out;
}

std::vector<uint16_t> joined(const std::vector<RankOutcome>& ranks, int forward) {
  std::vector<uint16_t> y;
  for (const RankOutcome& r : ranks) y.insert(y.end(), r.y[forward].begin(), r.y[forward].end());
  return y;
}

class EpSimBootstrap : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override { MOE_EP_REQUIRE_CUDA(); }
};

TEST_P(EpSimBootstrap, RanksOnThreadsEqualTheWorldSizeOneLayerBitwise) {
  for (int R : {2, 4}) {
    Problem p = pinned_tiny(GetParam());
    const WeightSet w = testsupport::random_weights(p, p.traits().native_format, 40 + R);
    std::vector<Inputs> per_rank;
    for (int r = 0; r < R; ++r)
      per_rank.push_back(testsupport::random_inputs(p, r == 1 ? 0 : 13 * r + 7, 90 + r, {.skip_fraction = 0.15}));
    const Inputs global = testsupport::concat_inputs(per_rank);
    Problem g = p;
    g.max_tokens = std::max<int64_t>(global.tokens, 1);
    const std::vector<double> cpu = cpu_reference(g, w.pack(), global);
    std::vector<uint16_t> ws1;
    {
      auto layer = make_gpu_layer(g, w.pack());
      ws1 = run_on_gpu(*layer, to_device(g, global));
    }
    const auto ranks = run_ranks(p, w, per_rank, 3);
    for (int r = 0; r < R; ++r) ASSERT_TRUE(ranks[r].error.empty()) << "rank " << r << ": " << ranks[r].error;
    for (int f = 0; f < 3; ++f) {
      const std::vector<uint16_t> y = joined(ranks, f);
      EXPECT_EQ(y, ws1) << "R=" << R << " forward " << f << ": " << p.str();
      const double err = relative_error_rows(y, cpu, p.hidden);
      EXPECT_LE(err, same_recipe_tolerance(p.recipe)) << p.str();
      if (f == 0)
        fmt::print("[ ep boot ] {} R={} T={} rel_err={:.3e} bitwise-vs-cuda-ws1={}\n", p.name(), R, global.tokens,
                   err, y == ws1 ? "yes" : "NO");
    }
  }
}

TEST_P(EpSimBootstrap, ARankWithBadArgumentsFailsEveryRankAndTheNextForwardIsRight) {
  const int R = 2;
  Problem p = pinned_tiny(GetParam());
  const WeightSet w = testsupport::random_weights(p, p.traits().native_format, 61);
  const std::vector<Inputs> per_rank = {testsupport::random_inputs(p, 20, 62), testsupport::random_inputs(p, 9, 63)};
  const auto ranks = run_ranks(p, w, per_rank, 3, /*bad_rank=*/1, /*bad_forward=*/1);
  for (int r = 0; r < R; ++r) {
    ASSERT_EQ(ranks[r].y.size(), 3u) << "rank " << r << ": " << ranks[r].error;
    EXPECT_TRUE(ranks[r].y[1].empty()) << "rank " << r << " should have failed forward 1";
    EXPECT_NE(ranks[r].error.find(r == 1 ? "max_tokens_per_rank" : "rank 1"), std::string::npos)
        << "rank " << r << ": " << ranks[r].error;
    EXPECT_EQ(ranks[r].y[0], ranks[r].y[2]) << "rank " << r << ": forward 2 differs from forward 0";
  }
}

TEST_P(EpSimBootstrap, ARankThatNeverForwardsEndsTheOthersInATimeoutNamingThePhase) {
  Problem p = pinned_tiny(GetParam());
  const WeightSet w = testsupport::random_weights(p, p.traits().native_format, 71);
  const std::vector<Inputs> per_rank = {testsupport::random_inputs(p, 5, 72), testsupport::random_inputs(p, 5, 73)};
  const auto t0 = std::chrono::steady_clock::now();
  const auto ranks = run_ranks(p, w, per_rank, 1, -1, -1, /*absent_rank=*/1, /*timeout_ms=*/300);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(ranks[0].code, ErrorCode::kTimeout) << ranks[0].error;
  EXPECT_NE(ranks[0].error.find("prepare of layer 0 forward 0"), std::string::npos) << ranks[0].error;
  EXPECT_NE(ranks[0].error.find("rank 1"), std::string::npos) << ranks[0].error;
  EXPECT_LT(s, 30.0);
  fmt::print("[ ep boot ] absent rank 1: {:.2f} s, {}\n", s, ranks[0].error);
}

INSTANTIATE_TEST_SUITE_P(Recipes, EpSimBootstrap, ::testing::Values("mxfp4", "nvfp4"));

}  // namespace
}  // namespace moe_ep::cudatest
