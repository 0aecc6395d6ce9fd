// The top of the bf16 range through Q8, and a rank that fails between collective calls.
//
// Q8: a finite value >= 1.9375 * 2^127 rounds, in e4m3 times any power-of-two scale, to 2^128,
// fp32 Inf; Infs of both signs in one dot product then give NaN for the whole output row.
// Q8 saturates such values to kQ8MaxFinite = 1.875 * 2^127 instead (the GPU does the same:
// tests/cuda/test_sm90_kernels.cpp, Sm90Kernels.Q8SaturatesTheTopOfTheBf16RangeLikeTheHost).
//
// A simulated rank that fails outside a collective call (its own allocation between layers)
// calls Runtime::abort: its peers must fail at once, naming it, instead of waiting timeout_ms.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <limits>
#include <thread>

#include "moe_ep/formats.h"
#include "moe_ep/quant.h"
#include "support/ep_harness.h"
#include "support/sim_ranks.h"

namespace moe_ep {
namespace {

using namespace testsupport;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

const float kBf16Max = 0x1.fep+127f;

TEST(HostileNumerics, Q8SaturatesFiniteValuesAtTheTopOfTheRange) {
  EXPECT_EQ(kQ8MaxFinite, std::ldexp(1.875f, 127));
  const float top[] = {kBf16Max, 0x1.f8p+127f, 0x1.f0p+127f, 0x1.e8p+127f, 0x1.e0p+127f};
  for (float v : top)
    for (float sign : {1.0f, -1.0f}) {
      std::vector<float> block(32, 1.0f);
      block[5] = sign * v;
      std::vector<uint8_t> q(32), s(1);
      quantize_q8(block.data(), 32, q.data(), s.data());
      std::vector<float> back(32);
      dequantize_q8(q.data(), s.data(), 32, back.data());
      EXPECT_TRUE(std::isfinite(back[5])) << v << " quantized to " << back[5];
      EXPECT_LE(std::fabs(back[5]), kQ8MaxFinite) << v;
      if (v >= 0x1.f0p+127f) {  // would round to 2^128
        EXPECT_EQ(back[5], sign * kQ8MaxFinite) << v;
      }
    }
  // Below the threshold nothing changes; Inf and NaN pass unchanged (docs/spec.md §11: not checked).
  EXPECT_EQ(q8_saturate(3.0e38f), 3.0e38f);
  EXPECT_EQ(q8_saturate(-kQ8MaxFinite), -kQ8MaxFinite);
  EXPECT_EQ(q8_saturate(INFINITY), INFINITY);
  EXPECT_EQ(q8_saturate(-INFINITY), -INFINITY);
  EXPECT_TRUE(std::isnan(q8_saturate(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_EQ(q8_saturate(-kBf16Max), -kQ8MaxFinite);
}

// One element of a token's x at the top of the bf16 range: its output row stays finite with
// mxfp4 (it was NaN) as with nvfp4, and no other row changes.
TEST(HostileNumerics, TopOfTheRangeInXGivesAFiniteRow) {
  for (const char* family : {"mxfp4", "nvfp4"}) {
    Problem p = tiny_problem(family);
    p.max_tokens = 4;
    const WeightSet w = random_weights(p, p.traits().native_format, 81);
    auto layer = make_layer(p, w);
    const Inputs clean = random_inputs(p, 4, 82);
    const HostTensor<uint16_t> y_clean = run_forward(*layer, p, clean);
    for (float v : {kBf16Max, -kBf16Max, 0x1.f0p+127f}) {
      Inputs in = clean;
      in.x[1 * p.hidden + 37] = float_to_bf16(v);
      const HostTensor<uint16_t> y = run_forward(*layer, p, in);
      for (int64_t t = 0; t < 4; ++t)
        for (int64_t h = 0; h < p.hidden; ++h) {
          const uint16_t bits = y[t * p.hidden + h];
          if (t != 1) {
            ASSERT_EQ(bits, y_clean[t * p.hidden + h]) << family << " " << v << ": row " << t << " changed";
          } else {
            ASSERT_FALSE(std::isnan(bf16_to_float(bits))) << family << " x = " << v << ": y[1, " << h << "] is NaN";
          }
        }
    }
  }
}

TEST(HostileNumerics, RankFailingBetweenForwardsFailsItsPeersAtOnce) {
  Problem p = tiny_problem("mxfp4");
  p.max_tokens = 8;
  const WeightSet w = random_weights(p, WeightFormat::kMXFP4, 83);
  constexpr int R = 4, kFaulty = 1;
  const auto start = Clock::now();
  auto out = run_ranks(R, [&](int r) {
    auto rt = Runtime::acquire(simulated_bootstrap(R, r, 60000));
    auto layer = Layer::create(rt, p.desc(), slice_experts(w.pack(), r * 4, 4), p.overrides);
    const Inputs in = random_inputs(p, 3, 84 + r);
    run_forward(*layer, p, in);
    if (r == kFaulty) {
      // The peers are (or soon will be) waiting in the next forward's first step.
      std::this_thread::sleep_for(200ms);
      rt->abort("std::bad_alloc while growing its own buffers");
      return;
    }
    run_forward(*layer, p, in);
  });
  EXPECT_LT(Clock::now() - start, 20s) << "the peers waited for the timeout (60 s)";
  for (int r = 0; r < R; ++r) {
    if (r == kFaulty) {
      EXPECT_FALSE(out[r].threw) << out[r].message;
      continue;
    }
    ASSERT_TRUE(out[r].threw) << "rank " << r;
    EXPECT_EQ(out[r].code, ErrorCode::kRuntime) << out[r].message;
    EXPECT_NE(out[r].message.find("rank 1 failed and left the world: std::bad_alloc while growing"),
              std::string::npos) << out[r].message;
  }
  // A world of one has no peer to tell: abort does nothing and the runtime stays usable.
  auto single = Runtime::acquire(Bootstrap{});
  single->abort("nothing to tell");
  EXPECT_NO_THROW(single->barrier("after abort"));
}

}  // namespace
}  // namespace moe_ep
