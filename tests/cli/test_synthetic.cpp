// The synthetic problem generator (src/testing): seeded, thread-count independent, and
// consistent between a full generation and a slice of it.
#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "moe_ep/error.h"
#include "moe_ep/formats.h"
#include "moe_ep/quant.h"
#include "testing/presets.h"
#include "testing/synthetic.h"

namespace moe_ep::testing {
namespace {

WeightSpec tiny_spec(WeightFormat format, int threads) {
  WeightSpec s;
  s.hidden_size = 256;
  s.intermediate_size = 128;
  s.format = format;
  s.seed = 42;
  s.num_slots = 8;
  s.num_threads = threads;
  return s;
}

TEST(Synthetic, PresetsMatchTheSpecTable) {
  const Preset& flash = find_preset("deepseek-v4-flash");
  EXPECT_EQ(flash.hidden_size, 4096);
  EXPECT_EQ(flash.intermediate_size, 2048);
  EXPECT_EQ(flash.num_experts, 256);
  EXPECT_EQ(flash.top_k, 6);
  EXPECT_EQ(flash.num_layers, 43);
  const Preset& pro = find_preset("deepseek-v4-pro");
  EXPECT_EQ(pro.hidden_size, 7168);
  EXPECT_EQ(pro.num_experts, 384);
  EXPECT_EQ(pro.routed_scaling_factor, 2.5f);
  EXPECT_EQ(find_preset("tiny").num_experts, 16);
  try {
    find_preset("nope", "--preset");
    FAIL() << "no error for an unknown preset";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(e.message().find("tiny"), std::string::npos) << e.message();
  }
}

TEST(Synthetic, WeightsIndependentOfThreadCount) {
  for (WeightFormat f : {WeightFormat::kMXFP4, WeightFormat::kNVFP4, WeightFormat::kBF16}) {
    int progress_calls = 0;
    const HostWeights a = make_weights(tiny_spec(f, 1), [&](int64_t, int64_t) { ++progress_calls; });
    const HostWeights b = make_weights(tiny_spec(f, 3));
    EXPECT_EQ(progress_calls, 8);
    EXPECT_EQ(a.w13, b.w13) << weight_format_name(f);
    EXPECT_EQ(a.w13_scale, b.w13_scale);
    EXPECT_EQ(a.w2, b.w2);
    EXPECT_EQ(a.w2_scale, b.w2_scale);
    EXPECT_EQ(a.w13_global, b.w13_global);
    EXPECT_EQ(a.w2_global, b.w2_global);
    WeightSpec other = tiny_spec(f, 1);
    other.seed = 43;
    EXPECT_NE(make_weights(other).w13, a.w13) << "the seed does not change the weights";
  }
}

TEST(Synthetic, SlotsAreKeyedByExpertId) {
  const HostWeights full = make_weights(tiny_spec(WeightFormat::kNVFP4, 2));
  WeightSpec slice = tiny_spec(WeightFormat::kNVFP4, 2);
  slice.expert_ids = {5, 2, 5};  // e.g. a rank's experts with an EPLB replica
  const HostWeights part = make_weights(slice);
  const size_t w13_bytes = full.w13.size() / 8, w2_scale_bytes = full.w2_scale.size() / 8;
  for (size_t s = 0; s < 3; ++s) {
    const size_t e = static_cast<size_t>(slice.expert_ids[s]);
    EXPECT_TRUE(std::equal(part.w13.begin() + s * w13_bytes, part.w13.begin() + (s + 1) * w13_bytes,
                           full.w13.begin() + e * w13_bytes)) << "slot " << s;
    EXPECT_TRUE(std::equal(part.w2_scale.begin() + s * w2_scale_bytes,
                           part.w2_scale.begin() + (s + 1) * w2_scale_bytes,
                           full.w2_scale.begin() + e * w2_scale_bytes)) << "slot " << s;
    EXPECT_EQ(part.w2_global[s], full.w2_global[e]);
  }
}

TEST(Synthetic, WeightsHaveTheIntendedScale) {
  // Dequantized W13 should have standard deviation ~1/sqrt(H), W2 ~1/sqrt(I).
  const HostWeights w = make_weights(tiny_spec(WeightFormat::kMXFP4, 2));
  const int64_t H = 256, I = 128;
  std::vector<float> deq(static_cast<size_t>(2 * I * H));
  dequantize_mxfp4(w.w13.data(), w.w13_scale.data(), 2 * I, H, deq.data());
  double sum2 = 0;
  for (float v : deq) sum2 += static_cast<double>(v) * v;
  EXPECT_NEAR(std::sqrt(sum2 / deq.size()) * std::sqrt(H), 1.0, 0.1);
  deq.resize(static_cast<size_t>(H * I));
  dequantize_mxfp4(w.w2.data(), w.w2_scale.data(), H, I, deq.data());
  sum2 = 0;
  for (float v : deq) sum2 += static_cast<double>(v) * v;
  EXPECT_NEAR(std::sqrt(sum2 / deq.size()) * std::sqrt(I), 1.0, 0.1);
}

TEST(Synthetic, Nvfp4GlobalScalesAreInverseEncodeFactors) {
  const HostWeights w = make_weights(tiny_spec(WeightFormat::kNVFP4, 1));
  for (float g : w.w13_global) {
    EXPECT_TRUE(std::isfinite(g) && g > 0.0f) << g;
    // amax of a half is a few sigma of N(0, 1/H): weight_scale_2 = amax / (448 * 6).
    EXPECT_GT(g * 448 * 6, 1.0f / 16);
    EXPECT_LT(g * 448 * 6, 1.0f);
  }
  ASSERT_EQ(w.w13_global.size(), 16u);
  for (size_t e = 0; e < 8; ++e) EXPECT_EQ(w.w13_global[2 * e], w.w13_global[2 * e + 1]) << e;
  ASSERT_EQ(w.w2_global.size(), 8u);
  const WeightPack p = w.pack();
  EXPECT_EQ(p.w13_scale.shape[2], 256 / 16);
  EXPECT_EQ(p.w13_global.shape[1], 2);
}

TEST(Synthetic, InputsRouteToDistinctExpertsWithHoles) {
  InputSpec s;
  s.num_tokens = 2000;
  s.hidden_size = 256;
  s.num_experts = 16;
  s.top_k = 4;
  s.hole_fraction = 0.25;
  s.routed_scaling_factor = 1.5f;
  s.seed = 9;
  const HostInputs in = make_inputs(s);
  int64_t holes = 0;
  for (int64_t t = 0; t < s.num_tokens; ++t) {
    std::set<int32_t> seen;
    double wsum = 0;
    for (int64_t k = 0; k < s.top_k; ++k) {
      const int32_t id = in.topk_ids[t * 4 + k];
      const float w = in.topk_weights[t * 4 + k];
      if (id < 0) {
        ++holes;
        EXPECT_EQ(id, -1);
        EXPECT_EQ(w, 0.0f);
        continue;
      }
      EXPECT_LT(id, 16);
      EXPECT_TRUE(seen.insert(id).second) << "token " << t << " repeats expert " << id;
      EXPECT_GT(w, 0.0f);
      wsum += w;
    }
    if (!seen.empty()) EXPECT_NEAR(wsum, 1.5, 1e-5) << "token " << t;
  }
  EXPECT_NEAR(static_cast<double>(holes) / (2000 * 4), 0.25, 0.03);
  EXPECT_EQ(in.num_valid_slots(), 2000 * 4 - holes);
  double sum2 = 0;
  for (uint16_t v : in.x) sum2 += static_cast<double>(bf16_to_float(v)) * bf16_to_float(v);
  EXPECT_NEAR(sum2 / in.x.size(), 1.0, 0.02);

  InputSpec other_rank = s;
  other_rank.stream_idx = 1;
  EXPECT_NE(make_inputs(other_rank).topk_ids, in.topk_ids);
  EXPECT_EQ(make_inputs(s).x, in.x);
}

}  // namespace
}  // namespace moe_ep::testing
