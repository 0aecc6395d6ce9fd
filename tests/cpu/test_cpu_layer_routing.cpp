// Routing and structure of the CPU layer: each expert leaves a signature in its own output
// columns, skipped slots, T = 0, experts with no or all tokens, forward_rows, i32/i64 ids,
// batching, thread-count independence and rerun determinism.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <random>
#include <set>

#include <fmt/format.h>

#include "moe_ep/formats.h"
#include "support/layer_problem.h"
#include "support/reference_moe.h"

namespace moe_ep::testsupport {
namespace {

using Rounding = ReferenceModel::Rounding;


bool bitwise_equal(const HostTensor<uint16_t>& a, const HostTensor<uint16_t>& b) {
  return a.values() == b.values();
}

uint64_t hash_bits(const HostTensor<uint16_t>& y) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (uint16_t v : y.values()) {
    h = (h ^ (v & 0xFF)) * 1099511628211ull;
    h = (h ^ (v >> 8)) * 1099511628211ull;
  }
  return h;
}

// ---- signatures: expert e writes only output columns [e*S, (e+1)*S), S = H / E ----

// Every expert has the same W13 (Gaussian); W2_e row e*S + r equals pattern row r, all other
// rows are zero. BF16 weights, quantized by the layer's family.
WeightSet signature_weights(const Problem& p, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const int64_t E = p.num_experts, H = p.hidden, I = p.intermediate, S = H / E;
  WeightSet w;
  w.format = WeightFormat::kBF16;
  w.w13_bf16 = HostTensor<uint16_t>(DType::kBF16, {E, 2 * I, H});
  w.w2_bf16 = HostTensor<uint16_t>(DType::kBF16, {E, H, I});
  std::vector<uint16_t> w13(2 * I * H), pattern(S * I);
  for (auto& v : w13) v = float_to_bf16(normal(rng) / std::sqrt(float(H)));
  for (auto& v : pattern) v = float_to_bf16(normal(rng) / std::sqrt(float(I)));
  for (int64_t e = 0; e < E; ++e) {
    std::copy(w13.begin(), w13.end(), w.w13_bf16.values().begin() + e * 2 * I * H);
    std::copy(pattern.begin(), pattern.end(), w.w2_bf16.values().begin() + (e * H + e * S) * I);
  }
  return w;
}

class SignatureTest : public ::testing::TestWithParam<std::string> {};

// With power-of-two topk weights, y[t, columns of e] = w * (the same token through expert 0
// with weight 1), bit for bit (Q8 and NVFP4 of h commute with powers of two), and the columns
// of experts the token did not pick are exactly zero.
TEST_P(SignatureTest, EachTokenGetsExactlyItsExpertsWeighted) {
  Problem p = tiny_problem(GetParam());
  const int64_t T = 40, E = p.num_experts, K = p.top_k, H = p.hidden, S = H / E;
  const WeightSet w = signature_weights(p, 21);
  auto layer = make_layer(p, w);

  // x row t encodes t: the row's values differ per token, so a row mix-up changes columns.
  Inputs base = random_inputs(p, T, 22);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t k = 0; k < K; ++k) {
      base.set_id(t, k, k == 0 ? 0 : -1);
      base.weights[t * K + k] = 1.0f;
    }
  const HostTensor<uint16_t> unit = run_forward(*layer, p, base);
  std::set<std::vector<uint16_t>> distinct;
  for (int64_t t = 0; t < T; ++t)
    distinct.insert({unit.values().begin() + t * H, unit.values().begin() + t * H + S});
  ASSERT_EQ(distinct.size(), size_t(T)) << "token signatures must differ to detect row mix-ups";

  Inputs routed = base;
  std::mt19937_64 rng(23);
  const float powers[] = {0.25f, 0.5f, 1.0f, 2.0f};
  std::vector<int64_t> experts(E);
  for (int64_t t = 0; t < T; ++t) {
    std::iota(experts.begin(), experts.end(), 0);
    std::shuffle(experts.begin(), experts.end(), rng);
    for (int64_t k = 0; k < K; ++k) {
      const bool skip = t % 7 == 3 || (t + k) % 5 == 0;  // holes; token 3, 10, ... all skipped
      routed.set_id(t, k, skip ? -1 : experts[k]);
      routed.weights[t * K + k] = powers[rng() % 4];
    }
  }
  const HostTensor<uint16_t> y = run_forward(*layer, p, routed);

  for (int64_t t = 0; t < T; ++t) {
    for (int64_t e = 0; e < E; ++e) {
      float weight = 0.0f;
      for (int64_t k = 0; k < K; ++k)
        if (routed.id(t, k) == e) weight = routed.weights[t * K + k];
      for (int64_t r = 0; r < S; ++r) {
        const double got = to_double_bf16(y[t * H + e * S + r]);
        const double want = weight * to_double_bf16(unit[t * H + r]);
        ASSERT_EQ(got, want) << p.str() << " token " << t << " expert " << e << " column "
                             << e * S + r << " weight " << weight;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Recipes, SignatureTest, ::testing::Values("mxfp4", "nvfp4"));

// ---- edge cases against the reference model ----

class RoutingEdgeTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    p_ = tiny_problem(GetParam());
    weights_ = random_weights(p_, GetParam() == "mxfp4" ? WeightFormat::kMXFP4 : WeightFormat::kNVFP4, 31);
    layer_ = make_layer(p_, weights_);
    model_ = std::make_unique<ReferenceModel>(p_, weights_);
  }
  void expect_matches_model(const Inputs& in, const char* what) {
    const HostTensor<uint16_t> y = run_forward(*layer_, p_, in);
    const std::vector<double> ref = model_->forward(in, Rounding::kBf16);
    EXPECT_LT(relative_error(y, ref), 3e-2) << p_.str() << " " << what;
    EXPECT_GE(exact_match_fraction(y, ref), 0.9) << p_.str() << " " << what;
  }

  Problem p_;
  WeightSet weights_;
  std::unique_ptr<Layer> layer_;
  std::unique_ptr<ReferenceModel> model_;
};

TEST_P(RoutingEdgeTest, SkippedSlotsAndFullySkippedTokensGiveZeros) {
  Inputs in = random_inputs(p_, 24, 32, {.skip_fraction = 0.4});
  for (int64_t k = 0; k < p_.top_k; ++k) {
    in.set_id(5, k, -1);
    in.set_id(23, k, -1);
  }
  const HostTensor<uint16_t> y = run_forward(*layer_, p_, in);
  for (int64_t t : {5, 23})
    for (int64_t j = 0; j < p_.hidden; ++j)
      ASSERT_EQ(y[t * p_.hidden + j], 0) << p_.str() << " token " << t << " column " << j;
  expect_matches_model(in, "40% skipped slots");
}

TEST_P(RoutingEdgeTest, ZeroTokensIsANoOp) {
  const Inputs in = random_inputs(p_, 0, 33);
  HostTensor<uint16_t> y = poisoned_output(p_, 0);
  EXPECT_NO_THROW(layer_->forward(in.args(y, true))) << p_.str();
  EXPECT_NO_THROW(layer_->forward_rows(in.args(y, true), {})) << p_.str();
}

TEST_P(RoutingEdgeTest, ExpertsWithoutTokensAndAllTokensOnOneExpert) {
  Inputs few = random_inputs(p_, 20, 34);
  for (int64_t t = 0; t < 20; ++t)
    for (int64_t k = 0; k < p_.top_k; ++k) few.set_id(t, k, (t + k) % 3);  // experts 3.. idle
  expect_matches_model(few, "only experts 0..2 used");

  Inputs one = random_inputs(p_, 20, 35);
  for (int64_t t = 0; t < 20; ++t) one.set_id(t, 0, 9);
  expect_matches_model(one, "every token's slot 0 on expert 9");

  Inputs same = random_inputs(p_, 20, 36);
  for (int64_t t = 0; t < 20; ++t)
    for (int64_t k = 0; k < p_.top_k; ++k) same.set_id(t, k, 9);
  expect_matches_model(same, "every slot of every token on expert 9");
}

TEST_P(RoutingEdgeTest, Int32AndInt64IdsAgree) {
  Inputs in64 = random_inputs(p_, 17, 37, {.skip_fraction = 0.2});
  Inputs in32 = in64;
  in32.ids_i32 = true;
  for (int64_t t = 0; t < 17; ++t)
    for (int64_t k = 0; k < p_.top_k; ++k) in32.ids32[t * p_.top_k + k] = int32_t(in64.id(t, k));
  EXPECT_TRUE(bitwise_equal(run_forward(*layer_, p_, in64), run_forward(*layer_, p_, in32)))
      << p_.str();
}

TEST_P(RoutingEdgeTest, ForwardRowsEqualsForwardOnThoseRowsOnly) {
  for (bool quantize_input : {true, false}) {
    Problem p = p_;
    p.quantize_input = quantize_input;
    auto layer = make_layer(p, weights_);
    Inputs in = random_inputs(p, 30, 38, {.skip_fraction = 0.2});
    if (!quantize_input) quantize_inputs_for_caller(p, in);
    const HostTensor<uint16_t> full = run_forward(*layer, p, in);
    const std::vector<int64_t> rows = {29, 0, 7, 7, 13};
    HostTensor<uint16_t> y = poisoned_output(p, 30);
    layer->forward_rows(in.args(y, quantize_input), rows);
    const std::set<int64_t> chosen(rows.begin(), rows.end());
    for (int64_t t = 0; t < 30; ++t)
      for (int64_t j = 0; j < p.hidden; ++j) {
        const size_t i = t * p.hidden + j;
        if (chosen.count(t))
          ASSERT_EQ(y[i], full[i]) << p.str() << " row " << t << " column " << j;
        else
          ASSERT_EQ(y[i], kBf16NaN) << p.str() << " untouched row " << t << " column " << j;
      }
  }
}

TEST_P(RoutingEdgeTest, BatchingThreadCountsAndRerunsAreBitwiseIdentical) {
  const Inputs in = random_inputs(p_, 64, 39, {.skip_fraction = 0.1});
  const HostTensor<uint16_t> base = run_forward(*layer_, p_, in);
  for (int threads : {1, 2, 3, 8}) {
    Problem p = p_;
    p.overrides.num_threads = threads;
    auto layer = make_layer(p, weights_);
    EXPECT_TRUE(bitwise_equal(run_forward(*layer, p_, in), base)) << p_.str() << " threads " << threads;
  }
  for (int batch : {1, 7}) {
    Problem p = p_;
    p.overrides.cpu_batch_tokens = batch;
    auto layer = make_layer(p, weights_);
    EXPECT_TRUE(bitwise_equal(run_forward(*layer, p_, in), base)) << p_.str() << " batch " << batch;
    HostTensor<uint16_t> y = poisoned_output(p_, 64);
    const std::vector<int64_t> rows = {63, 1, 2, 40, 41, 42, 43, 44, 5};
    layer->forward_rows(in.args(y, true), rows);
    for (int64_t t : rows)
      for (int64_t j = 0; j < p_.hidden; ++j)
        ASSERT_EQ(y[t * p_.hidden + j], base[t * p_.hidden + j]) << p_.str() << " batch " << batch;
  }
  const uint64_t hash = hash_bits(base);
  for (int run = 0; run < 20; ++run)
    ASSERT_EQ(hash_bits(run_forward(*layer_, p_, in)), hash) << p_.str() << " rerun " << run;
}

INSTANTIATE_TEST_SUITE_P(Recipes, RoutingEdgeTest, ::testing::Values("mxfp4", "nvfp4"));

}  // namespace
}  // namespace moe_ep::testsupport
