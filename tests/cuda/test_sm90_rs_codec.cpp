// Host-only checks of tile/fp4_bf16_codec.h (folded FP4 -> bf16 register fragments of the bf16
// wgmma with weights as operand A): every code at every shift against the formats module, and
// the fragments of a whole kernel-layout tensor against the canonical weights, element by
// element in the order along k the activations are stored in. They need no GPU.
#include <cmath>
#include <cstring>
#include <random>
#include <set>

#include <gtest/gtest.h>

#include "core/weight_prep.h"
#include "cuda/kernels/sm90_grouped_gemm.h"
#include "cuda/tile/fp4_bf16_codec.h"
#include "cuda/tile/fp4_codec.h"
#include "cuda/weight_layout.h"
#include "moe_ep/formats.h"
#include "support/fp4_word_cases.h"
#include "support/layer_problem.h"

namespace moe_ep::cuda {
namespace {

uint16_t half_of(uint32_t bf16x2, int half) { return static_cast<uint16_t>(bf16x2 >> (16 * half)); }

template <int kPair>
uint32_t decode_pair(uint32_t w, Fp4SignBytes s, uint32_t factor) {
  return ptx::mul_bf16x2(fp4_pair_bf16_unscaled<kPair>(w, s), factor);
}

TEST(Sm90RsCodec, TheOrderAlongKIsAPermutationOfEach128WideStep) {
  std::set<int> seen;
  for (int step = 0; step < 8; ++step)
    for (int slot = 0; slot < 16; ++slot) {
      const int k = rs_source_k(step, slot);
      ASSERT_GE(k, 0);
      ASSERT_LT(k, 128);
      seen.insert(k);
      EXPECT_EQ(rs_position_of_k(k), 16 * step + slot) << "step " << step << " slot " << slot;
    }
  EXPECT_EQ(seen.size(), 128u);
  // Steps 2j and 2j + 1 read k32 block j only: the fold's shift of block j serves both.
  for (int step = 0; step < 8; ++step)
    for (int slot = 0; slot < 16; ++slot) EXPECT_EQ(rs_source_k(step, slot) / 32, step / 2);
}

TEST(Sm90RsCodec, FactorsArePowersOfTwoInsideTheBf16Range) {
  for (uint32_t d = 0; d < kFoldedShifts; ++d) {
    const uint32_t f = rs_fold_factor(d);
    EXPECT_EQ(half_of(f, 0), half_of(f, 1));
    EXPECT_EQ(bf16_to_float(half_of(f, 0)), std::ldexp(1.0f, 112 + static_cast<int>(d))) << "d=" << d;
  }
}

// Every signed code at every position of a word and every shift, against float_to_bf16 of the
// value (formats module, checked against ml_dtypes by the format-vector tests): bitwise, -0
// included.
TEST(Sm90RsCodec, EverySignedCodeAtEveryShiftDecodesToItsExactBf16) {
  std::mt19937 rng(17);
  for (uint32_t d = 0; d < kFoldedShifts; ++d)
    for (int pos = 0; pos < 8; ++pos)
      for (uint8_t code = 0; code < 16; ++code) {
        const Fp4WordCase c = random_fp4_word_with(rng, pos, code);
        const uint32_t w = c.word;
        const Fp4SignBytes s = fp4_sign_bytes(w);
        const uint32_t f = rs_fold_factor(d);
        const uint32_t pairs[4] = {decode_pair<0>(w, s, f), decode_pair<1>(w, s, f), decode_pair<2>(w, s, f),
                                   decode_pair<3>(w, s, f)};
        for (int p = 0; p < 4; ++p)
          for (int half = 0; half < 2; ++half) {
            const uint8_t v = half == 0 ? c.lo[p] : c.hi[p];
            const float want = std::ldexp(e2m1_to_float(v), static_cast<int>(d) - kFoldedShiftBias - kRsFoldBias);
            ASSERT_EQ(half_of(pairs[p], half), float_to_bf16(want))
                << "d=" << d << " pair " << p << " half " << half << " code " << int(v);
          }
      }
}

// The fragments a lane builds from a folded kernel-layout tensor, times the column factor the
// epilogue applies, are the canonical weights at k = rs_source_k(step, slot): rows, k order,
// shifts and decode together, for both GEMMs of every expert.
TEST(Sm90RsCodec, FragmentsOfAFoldedTensorAreItsCanonicalWeightsInTheRsOrder) {
  testsupport::Problem p = testsupport::tiny_problem("mxfp4");
  p.num_experts = 2;
  const testsupport::WeightSet ws = testsupport::random_weights(p, WeightFormat::kMXFP4, 23);
  const HostExpertWeights w = prepare_host_weights(p.recipe, ws.pack(), {p.num_experts, p.hidden, p.intermediate});
  const KernelWeights kw = make_kernel_weights(w);
  ASSERT_TRUE(kw.w13.folded && kw.w2.folded);
  const int64_t H = p.hidden, I = p.intermediate;
  int64_t checked = 0;
  for (const KernelWeightTensor* t : {&kw.w13, &kw.w2}) {
    const bool gemm1 = t == &kw.w13;
    const std::vector<float> col_factor = t->row_factors();
    const int64_t steps = t->k / kGemmBlockK;
    auto canonical = [&](int64_t e, int64_t n, int64_t k) {  // dequantized weight (e, kernel row n, k)
      const int64_t row = gemm1 ? gemm1_source_row(n, I) : n;
      const int64_t K = gemm1 ? H : I;
      const uint8_t byte = (gemm1 ? w.w13_packed(e) : w.w2_packed(e))[(row * K + k) / 2];
      const uint8_t scale = (gemm1 ? w.w13_scales(e) : w.w2_scales(e))[row * (K / 32) + k / 32];
      return std::ldexp(static_cast<double>(e2m1_to_float(unpack_e2m1(byte, k))), scale - 127);
    };
    auto word = [&](int64_t e, int64_t micro, int64_t s, int lane, int j) {
      uint32_t v;
      std::memcpy(&v, t->tiles.data() + ((e * (t->n / 8) + micro) * steps + s) * kWeightMicroTileBytes + lane * 16 + 4 * j, 4);
      return v;
    };
    auto shift = [&](int64_t e, int64_t s, int64_t n, int j) {
      return static_cast<uint32_t>(t->scales[static_cast<size_t>(((e * steps + s) * t->n + n) * 4 + j)]);
    };
    for (int64_t e = 0; e < t->num_experts; ++e)
      for (int64_t rows16 = 0; rows16 < t->n / 16; ++rows16)
        for (int64_t s = 0; s < steps; ++s)
          for (int lane = 0; lane < 32; ++lane)
            for (int step = 0; step < 8; ++step) {
              const int g = lane / 4, tq = lane % 4, j = step / 2;
              const int64_t n_g = 16 * rows16 + g, n_g8 = n_g + 8;
              uint32_t a[4];
              const uint32_t wg = word(e, 2 * rows16, s, lane, j), wg8 = word(e, 2 * rows16 + 1, s, lane, j);
              const uint32_t fg = rs_fold_factor(shift(e, s, n_g, j)), fg8 = rs_fold_factor(shift(e, s, n_g8, j));
              if (step % 2 == 0) rs_a_fragment<0>(wg, wg8, fg, fg8, a);
              else rs_a_fragment<1>(wg, wg8, fg, fg8, a);
              for (int r = 0; r < 4; ++r)
                for (int half = 0; half < 2; ++half) {
                  const int64_t n = r % 2 == 0 ? n_g : n_g8;
                  const int slot = 2 * tq + half + (r >= 2 ? 8 : 0);
                  const int64_t k = s * kGemmBlockK + rs_source_k(step, slot);
                  const double got = static_cast<double>(bf16_to_float(half_of(a[r], half))) *
                                     std::ldexp(1.0, kRsFoldBias) * col_factor[e * t->n + n];
                  ASSERT_EQ(got, canonical(e, n, k)) << (gemm1 ? "w13" : "w2") << " e=" << e << " n=" << n
                                                     << " k=" << k << " step " << step << " r " << r;
                  ++checked;
                }
            }
  }
  EXPECT_EQ(checked, p.num_experts * 3 * H * I);
}

}  // namespace
}  // namespace moe_ep::cuda
