// DeepSeek V4 router: hand-computed cases, a float64 re-implementation, hash layers, bad input.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>

#include "core/router_math.h"
#include "moe_ep/error.h"
#include "moe_ep/formats.h"
#include "moe_ep/router.h"
#include "support/host_tensor.h"

namespace moe_ep {
namespace {

using testsupport::HostTensor;

double sqrt_softplus64(double v) { return std::sqrt(std::log1p(std::exp(v))); }

// The fp32 score against float64 over [-85, 100] (below -85 exp(-|v|) leaves the normal range and
// the score is documented as 0): a sweep, random values and small values near 0.
TEST(RouterMath, SqrtSoftplusIsWithinAnUlpOfFloat64) {
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> wide(-85.0f, 100.0f), narrow(-4.0f, 4.0f);
  int64_t worst = 0;
  float worst_at = 0.0f;
  for (int i = 0; i < 600000; ++i) {
    const float v = i < 200000 ? -85.0f + 185.0f * static_cast<float>(i) / 200000.0f : i % 2 ? wide(rng) : narrow(rng);
    const float s = router_math::sqrt_softplus(v);
    const float ref = static_cast<float>(sqrt_softplus64(v));
    int32_t a, b;
    std::memcpy(&a, &s, sizeof a);
    std::memcpy(&b, &ref, sizeof b);
    if (std::abs(int64_t{a} - b) > worst) {
      worst = std::abs(int64_t{a} - b);
      worst_at = v;
    }
  }
  EXPECT_LE(worst, 1) << "at v = " << worst_at;
  EXPECT_EQ(router_math::sqrt_softplus(-90.0f), 0.0f);
}

struct Routed {
  HostTensor<int64_t> ids;
  HostTensor<float> weights;
};

Routed route(const RouterConfig& c, const HostTensor<float>& logits, const HostTensor<float>* bias,
             int64_t layer = 0, const HostTensor<int64_t>* tokens = nullptr,
             const HostTensor<int32_t>* table = nullptr) {
  const int64_t T = logits.shape()[0];
  Routed r{HostTensor<int64_t>(DType::kI64, {T, c.top_k}, -7),
           HostTensor<float>(DType::kF32, {T, c.top_k}, NAN)};
  RouterArgs a;
  a.layer_idx = layer;
  a.logits = logits.view();
  if (bias) a.bias = bias->view();
  if (tokens) a.token_ids = tokens->view();
  if (table) a.hash_table = table->view();
  a.topk_ids = r.ids.view();
  a.topk_weights = r.weights.view();
  route_deepseek_v4(c, a);
  return r;
}

TEST(RouterV4, HandComputed) {
  const RouterConfig c{4, 2, 2.5f, 0};
  HostTensor<float> logits(DType::kF32, {1, 4});
  logits.values() = {0.0f, 1.0f, -1.0f, 2.0f};
  // s = sqrt(softplus): 0.832555, 1.145976, 0.559698, 1.458399 (to 6 digits).
  const double s[4] = {sqrt_softplus64(0), sqrt_softplus64(1), sqrt_softplus64(-1),
                       sqrt_softplus64(2)};
  EXPECT_NEAR(s[0], 0.832555, 1e-6);
  EXPECT_NEAR(s[3], 1.458399, 1e-6);
  Routed r = route(c, logits, nullptr);
  EXPECT_EQ(r.ids.values(), (std::vector<int64_t>{3, 1}));
  EXPECT_NEAR(r.weights[0], 2.5 * s[3] / (s[3] + s[1]), 1e-6);
  EXPECT_NEAR(r.weights[1], 2.5 * s[1] / (s[3] + s[1]), 1e-6);

  // Bias selects (expert 2: 0.56 + 1 beats 1.46) but the weights stay s.
  HostTensor<float> bias(DType::kF32, {4});
  bias.values() = {0.0f, 0.0f, 1.0f, 0.0f};
  r = route(c, logits, &bias);
  EXPECT_EQ(r.ids.values(), (std::vector<int64_t>{2, 3}));
  EXPECT_NEAR(r.weights[0], 2.5 * s[2] / (s[2] + s[3]), 1e-6);
  EXPECT_NEAR(r.weights[1], 2.5 * s[3] / (s[2] + s[3]), 1e-6);
}

TEST(RouterV4, TiesGoToTheLowerId) {
  const RouterConfig c{6, 3, 1.0f, 0};
  HostTensor<float> logits(DType::kF32, {2, 6});
  logits.values() = {0.5f, 0.5f, 0.5f, 0.5f, 0.5f, 0.5f,   // all equal
                     -3.0f, 4.0f, 1.0f, 4.0f, 1.0f, -3.0f};  // pairs
  Routed r = route(c, logits, nullptr);
  EXPECT_EQ(r.ids.values(), (std::vector<int64_t>{0, 1, 2, 1, 3, 2}));
  for (int k = 0; k < 3; ++k) EXPECT_NEAR(r.weights[k], 1.0 / 3.0, 1e-7);
  // A bias that drops expert 1 on the first token: the next equal ids, lowest first.
  HostTensor<float> bias(DType::kF32, {6}, 0.0f);
  bias[1] = -1.0f;
  r = route(c, logits, &bias);
  EXPECT_EQ(r.ids[0], 0);
  EXPECT_EQ(r.ids[1], 2);
  EXPECT_EQ(r.ids[2], 3);
}

TEST(RouterV4, VerySmallScoresAreFlooredNotDividedByZero) {
  const RouterConfig c{3, 2, 1.0f, 0};
  HostTensor<float> logits(DType::kF32, {1, 3});
  logits.values() = {-200.0f, -200.0f, -200.0f};  // softplus underflows to 0
  Routed r = route(c, logits, nullptr);
  EXPECT_EQ(r.weights[0], 0.0f);
  EXPECT_EQ(r.weights[1], 0.0f);
}

TEST(RouterV4, MatchesFloat64Reimplementation) {
  std::mt19937_64 rng(1234);
  std::normal_distribution<float> n01(0.0f, 2.0f);
  const RouterConfig c{64, 6, 1.5f, 0};
  const int64_t T = 200;
  HostTensor<float> logits(DType::kF32, {T, 64}), bias(DType::kF32, {64});
  for (auto& v : logits.values()) v = n01(rng);
  for (auto& v : bias.values()) v = 0.1f * n01(rng);
  // bf16 logits too: widened exactly, so the float64 reference uses the rounded values.
  HostTensor<uint16_t> logits_bf16(DType::kBF16, {T, 64});
  for (size_t i = 0; i < logits.size(); ++i) {
    logits_bf16[i] = float_to_bf16(logits[i]);
  }
  for (int pass = 0; pass < 2; ++pass) {
    const bool bf16 = pass == 1;
    Routed r{HostTensor<int64_t>(DType::kI64, {T, 6}), HostTensor<float>(DType::kF32, {T, 6}, NAN)};
    RouterArgs a;
    a.logits = bf16 ? logits_bf16.view() : logits.view();
    a.bias = bias.view();
    a.topk_ids = r.ids.view();
    a.topk_weights = r.weights.view();
    route_deepseek_v4(c, a);
    int64_t compared = 0;
    double max_rel = 0.0;
    for (int64_t t = 0; t < T; ++t) {
      std::vector<double> s(64), sel(64);
      for (int e = 0; e < 64; ++e) {
        const double v = bf16 ? bf16_to_float(logits_bf16[t * 64 + e]) : logits[t * 64 + e];
        s[e] = sqrt_softplus64(v);
        sel[e] = s[e] + bias[e];
      }
      std::vector<int> order(64);
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(), [&](int x, int y) { return sel[x] > sel[y]; });
      // Skip tokens whose 6th and 7th choices are too close for fp32 to order like float64.
      if (sel[order[5]] - sel[order[6]] < 1e-5) continue;
      ++compared;
      double sum = 0.0;
      for (int k = 0; k < 6; ++k) sum += s[order[k]];
      for (int k = 0; k < 6; ++k) {
        ASSERT_EQ(r.ids[t * 6 + k], order[k]) << "token " << t << " slot " << k << " bf16 " << bf16;
        const double w = 1.5 * s[order[k]] / sum;
        max_rel = std::max(max_rel, std::fabs(r.weights[t * 6 + k] - w) / w);
      }
    }
    EXPECT_GT(compared, T * 9 / 10);
    EXPECT_LT(max_rel, 2e-6) << "bf16 " << bf16;
  }
}

TEST(RouterV4, HashLayersTakeIdsFromTheTable) {
  const RouterConfig c{8, 2, 2.0f, 3};
  EXPECT_TRUE(is_hash_layer(c, 2));
  EXPECT_FALSE(is_hash_layer(c, 3));
  HostTensor<float> logits(DType::kF32, {3, 8});
  for (size_t i = 0; i < logits.size(); ++i) logits[i] = 0.25f * static_cast<float>(i % 8) - 1.0f;
  HostTensor<int32_t> table(DType::kI32, {5, 2});
  table.values() = {0, 1, 7, 6, 2, 2, 5, 0, 3, 4};
  HostTensor<int64_t> tokens(DType::kI64, {3});
  tokens.values() = {4, 1, 2};
  Routed r = route(c, logits, nullptr, 1, &tokens, &table);
  EXPECT_EQ(r.ids.values(), (std::vector<int64_t>{3, 4, 7, 6, 2, 2}));
  auto s = [](int e) { return sqrt_softplus64(0.25 * e - 1.0); };
  EXPECT_NEAR(r.weights[0], 2.0 * s(3) / (s(3) + s(4)), 1e-6);
  EXPECT_NEAR(r.weights[3], 2.0 * s(6) / (s(7) + s(6)), 1e-6);
  EXPECT_NEAR(r.weights[4], 1.0, 1e-6);  // the same expert twice: half each, times 2
  // Layer 3 is not a hash layer: top-k of s (7, 6).
  r = route(c, logits, nullptr, 3);
  EXPECT_EQ(r.ids[0], 7);
  EXPECT_EQ(r.ids[1], 6);
}

TEST(RouterV4, BadInputNamesTheEntry) {
  auto msg = [](const std::function<void()>& f) -> std::string {
    try {
      f();
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      return e.what();
    }
    return "no error";
  };
  const RouterConfig c{4, 2, 1.0f, 1};
  HostTensor<float> logits(DType::kF32, {2, 4}, 0.0f);
  logits[5] = NAN;
  EXPECT_NE(msg([&] { route(c, logits, nullptr, 1); }).find("logits[1, 1] = nan"),
            std::string::npos);
  logits[5] = 0.0f;
  HostTensor<int32_t> table(DType::kI32, {3, 2}, 0);
  table[3] = 4;
  HostTensor<int64_t> tokens(DType::kI64, {2});
  tokens.values() = {0, 1};
  EXPECT_NE(msg([&] { route(c, logits, nullptr, 0, &tokens, &table); })
                .find("hash_table[1, 1] = 4 is outside [0, num_experts = 4)"),
            std::string::npos);
  table[3] = 0;
  tokens[1] = 3;
  EXPECT_NE(msg([&] { route(c, logits, nullptr, 0, &tokens, &table); })
                .find("token_ids[1] = 3 is outside [0, vocab = 3)"),
            std::string::npos);
  EXPECT_NE(msg([&] { route(c, logits, nullptr, 0); }).find("token_ids is missing"),
            std::string::npos);
  EXPECT_NE(msg([&] { route({4, 5, 1.0f, 0}, logits, nullptr); }).find("top_k = 5"),
            std::string::npos);
  EXPECT_NE(msg([&] { route({4, 2, -1.0f, 0}, logits, nullptr); }).find("routed_scaling_factor"),
            std::string::npos);
  HostTensor<float> bad_bias(DType::kF32, {3}, 0.0f);
  EXPECT_NE(msg([&] { route({4, 2, 1.0f, 0}, logits, &bad_bias); }).find("bias has shape [3]"),
            std::string::npos);
}

}  // namespace
}  // namespace moe_ep
