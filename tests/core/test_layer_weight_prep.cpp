// Weight preparation (src/core/weight_prep): NVFP4 gate/up global-scale folding, conversions
// between formats, and the MXFP4 -> FP8 exactness window.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "core/weight_prep.h"
#include "moe_ep/error.h"
#include "moe_ep/formats.h"
#include "moe_ep/quant.h"
#include "support/layer_problem.h"

namespace moe_ep::testsupport {
namespace {


// A one-expert NVFP4 pack with constant codes and block scales per half.
WeightSet one_expert_nvfp4(int64_t H, int64_t I, uint8_t gate_scale, uint8_t up_scale, float gate_ws2,
                           float up_ws2) {
  WeightSet w;
  w.format = WeightFormat::kNVFP4;
  w.w13 = HostTensor<uint8_t>(DType::kU8, {1, 2 * I, H / 2}, 0x21);  // codes 1 and 2: 0.5, 1.0
  w.w13_scale = HostTensor<uint8_t>(DType::kE4M3, {1, 2 * I, H / 16});
  const int64_t half = I * H / 16;
  for (int64_t i = 0; i < 2 * half; ++i) w.w13_scale[i] = i < half ? gate_scale : up_scale;
  w.w2 = HostTensor<uint8_t>(DType::kU8, {1, H, I / 2}, 0x21);
  w.w2_scale = HostTensor<uint8_t>(DType::kE4M3, {1, H, I / 16}, 0x38);
  w.w13_global = HostTensor<float>(DType::kF32, {1, 2});
  w.w13_global[0] = gate_ws2;
  w.w13_global[1] = up_ws2;
  w.w2_global = HostTensor<float>(DType::kF32, {1}, 0.5f);
  return w;
}

constexpr uint8_t kE4M3One = 0x38, kE4M3Two = 0x40, kE4M3Max = 0x7E, kE4M3Tiny = 0x01;

TEST(WeightPrep, FoldsPowerOfTwoGateUpRatioIntoUpScales) {
  const ExpertShape shape{1, 32, 32};
  const WeightSet w = one_expert_nvfp4(32, 32, kE4M3One, kE4M3One, 0.25f, 1.0f);
  const HostExpertWeights h = prepare_host_weights(parse_recipe("nvfp4"), w.pack(), shape);
  const int64_t half = 32 * 32 / 16;
  EXPECT_EQ(h.w13_global[0], 0.25f);
  for (int64_t i = 0; i < half; ++i) ASSERT_EQ(h.w13_scales(0)[i], kE4M3One) << i;
  for (int64_t i = half; i < 2 * half; ++i) ASSERT_EQ(e4m3_to_float(h.w13_scales(0)[i]), 4.0f) << i;
  EXPECT_NE(h.notes.find("folded"), std::string::npos) << h.notes;
}

TEST(WeightPrep, FoldsIntoGateScalesWhenUpScalesWouldOverflow) {
  const ExpertShape shape{1, 32, 32};
  const WeightSet w = one_expert_nvfp4(32, 32, kE4M3Two, kE4M3Max, 1.0f, 2.0f);  // 448 * 2 > 448
  const HostExpertWeights h = prepare_host_weights(parse_recipe("nvfp4"), w.pack(), shape);
  const int64_t half = 32 * 32 / 16;
  EXPECT_EQ(h.w13_global[0], 2.0f);
  for (int64_t i = 0; i < half; ++i) ASSERT_EQ(h.w13_scales(0)[i], kE4M3One) << i;
  for (int64_t i = half; i < 2 * half; ++i) ASSERT_EQ(h.w13_scales(0)[i], kE4M3Max) << i;
}

TEST(WeightPrep, RejectsRatiosThatCannotBeFoldedExactly) {
  const ExpertShape shape{1, 32, 32};
  const WeightSet three = one_expert_nvfp4(32, 32, kE4M3One, kE4M3One, 1.0f, 3.0f);
  try {
    prepare_host_weights(parse_recipe("nvfp4"), three.pack(), shape);
    ADD_FAILURE() << "ratio 3 accepted";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("w13_global[0]"), std::string::npos) << e.message();
    EXPECT_NE(e.message().find("not a power of two"), std::string::npos) << e.message();
  }
  // Up scales 448 cannot double; gate scales 2^-9 (the smallest subnormal) cannot halve.
  const WeightSet range = one_expert_nvfp4(32, 32, kE4M3Tiny, kE4M3Max, 1.0f, 2.0f);
  try {
    prepare_host_weights(parse_recipe("nvfp4"), range.pack(), shape);
    ADD_FAILURE() << "out-of-range fold accepted";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("w13_global[0]"), std::string::npos) << e.message();
    EXPECT_NE(e.message().find("out of range"), std::string::npos) << e.message();
  }
}

TEST(WeightPrep, SplitGlobalsGiveTheSameLayerOutputAsEqualGlobals) {
  const Problem p = tiny_problem("nvfp4");
  const WeightSet equal = random_weights(p, WeightFormat::kNVFP4, 51);
  const WeightSet split = random_weights(p, WeightFormat::kNVFP4, 51, {.distinct_gate_up_global = true});
  int64_t experts_split = 0;
  for (int64_t e = 0; e < p.num_experts; ++e) experts_split += split.w13_global[2 * e] != split.w13_global[2 * e + 1];
  ASSERT_GT(experts_split, 0) << "the generator should produce split globals";
  const Inputs in = random_inputs(p, 16, 52);
  auto a = make_layer(p, equal);
  auto b = make_layer(p, split);
  EXPECT_EQ(run_forward(*a, p, in).values(), run_forward(*b, p, in).values()) << p.str();
}

TEST(WeightPrep, ConversionsMatchTheLibraryQuantizers) {
  const Problem p = tiny_problem("nvfp4");
  const ExpertShape shape{p.num_experts, p.hidden, p.intermediate};
  const WeightSet mx = random_weights(p, WeightFormat::kMXFP4, 53);
  const HostExpertWeights h = prepare_host_weights(parse_recipe("nvfp4"), mx.pack(), shape);
  ASSERT_EQ(h.format, WeightFormat::kNVFP4);
  // Expert 3's W2: dequantize MXFP4 (exact in bf16), one global from its amax, NVFP4.
  const int64_t n = p.hidden * p.intermediate;
  std::vector<float> v(n);
  dequantize_mxfp4(mx.w2.values().data() + 3 * n / 2, mx.w2_scale.values().data() + 3 * n / 32, p.hidden,
                   p.intermediate, v.data());
  const float g = nvfp4_global_encode(max_abs(v.data(), n));
  std::vector<uint8_t> packed(n / 2), scales(n / 16);
  quantize_nvfp4(v.data(), p.hidden, p.intermediate, g, packed.data(), scales.data());
  EXPECT_EQ(std::memcmp(packed.data(), h.w2_packed(3), n / 2), 0);
  EXPECT_EQ(std::memcmp(scales.data(), h.w2_scales(3), n / 16), 0);
  EXPECT_EQ(h.w2_global[3], 1.0f / g);
  EXPECT_NE(h.notes.find("requantized to nvfp4"), std::string::npos) << h.notes;

  const WeightSet bf = random_weights(p, WeightFormat::kBF16, 54);
  const HostExpertWeights m = prepare_host_weights(parse_recipe("mxfp4"), bf.pack(), shape);
  ASSERT_EQ(m.format, WeightFormat::kMXFP4);
  std::vector<float> w13(2 * p.intermediate * p.hidden);
  const int64_t m13 = static_cast<int64_t>(w13.size());
  for (int64_t i = 0; i < m13; ++i) w13[i] = bf16_to_float(bf.w13_bf16[5 * m13 + i]);
  std::vector<uint8_t> mp(m13 / 2), ms(m13 / 32);
  quantize_mxfp4(w13.data(), 2 * p.intermediate, p.hidden, mp.data(), ms.data());
  EXPECT_EQ(std::memcmp(mp.data(), m.w13_packed(5), m13 / 2), 0);
  EXPECT_EQ(std::memcmp(ms.data(), m.w13_scales(5), m13 / 32), 0);
}

TEST(WeightPrep, Fp8WindowCountsRowsAndExperts) {
  // 2 experts, H = I = 64 (two blocks per row). Expert 0: every block exponent 127 except
  // W13 row 3 (blocks 100 and 120: span 20) -> one row outside, expert outside. Expert 1:
  // a zero block with a wild exponent is ignored -> everything inside.
  const int64_t E = 2, H = 64, I = 64;
  WeightSet w;
  w.format = WeightFormat::kMXFP4;
  w.w13 = HostTensor<uint8_t>(DType::kU8, {E, 2 * I, H / 2}, 0x22);
  w.w13_scale = HostTensor<uint8_t>(DType::kU8, {E, 2 * I, H / 32}, 127);
  w.w2 = HostTensor<uint8_t>(DType::kU8, {E, H, I / 2}, 0x22);
  w.w2_scale = HostTensor<uint8_t>(DType::kU8, {E, H, I / 32}, 127);
  w.w13_scale[3 * 2 + 0] = 100;
  w.w13_scale[3 * 2 + 1] = 120;
  const int64_t e1_row0 = (1 * 2 * I + 0) * (H / 2);
  for (int64_t i = 0; i < 16; ++i) w.w13[e1_row0 + i] = 0x88;  // block 0: ±0 only
  w.w13_scale[(1 * 2 * I + 0) * 2 + 0] = 1;
  // Expert 1, W2 rows: exponents 120 and 134 in the same row (span 14: still inside).
  w.w2_scale[(1 * H + 9) * 2 + 0] = 120;
  w.w2_scale[(1 * H + 9) * 2 + 1] = 134;

  const HostExpertWeights h = prepare_host_weights(parse_recipe("mxfp4"), w.pack(), {E, H, I});
  const Fp8WindowStats s = analyze_fp8_window(h);
  EXPECT_EQ(s.rows, E * (2 * I + H));
  EXPECT_EQ(s.rows_inside, s.rows - 1);
  EXPECT_EQ(s.experts, 2);
  EXPECT_EQ(s.experts_inside, 1);
  EXPECT_EQ(s.max_row_span, 20);
  const std::string note = describe_fp8_window(s, "block scales applied in fp32");
  EXPECT_NE(note.find("383/384 rows"), std::string::npos) << note;
  EXPECT_NE(note.find("1/2 experts"), std::string::npos) << note;
  EXPECT_NE(note.find("block scales applied in fp32"), std::string::npos) << note;
}

TEST(WeightPrep, LayerNotesNameTheConversionAndTheWindow) {
  const Problem mx = tiny_problem("mxfp4");
  auto a = make_layer(mx, random_weights(mx, WeightFormat::kMXFP4, 55));
  EXPECT_NE(a->info().notes.find("mxfp4->fp8 window"), std::string::npos) << a->info().notes;
  EXPECT_NE(a->info().notes.find("weights: mxfp4 as given"), std::string::npos) << a->info().notes;
  EXPECT_EQ(a->info().implementation, "cpu");
  EXPECT_EQ(a->info().num_local_experts, 16);
  const Problem nv = tiny_problem("nvfp4");
  auto b = make_layer(nv, random_weights(nv, WeightFormat::kBF16, 56));
  EXPECT_NE(b->info().notes.find("bf16 quantized to nvfp4"), std::string::npos)
      << b->info().notes;
}

}  // namespace
}  // namespace moe_ep::testsupport
