// Checks of tile/fp4_bf16_codec.h (folded FP4 -> bf16 register fragments of the bf16 wgmma with
// weights as operand A): on the host, every code at every shift against the formats module, and
// the fragments of a whole kernel-layout tensor against the canonical weights, element by element
// in the order along k the activations are stored in; on the GPU, the same decode bitwise equal
// to the host's (Sm90RsCodecDevice), and the Q8 -> bf16 conversion of the activations into that
// order (launch_sm90_q8_to_rs_bf16) against a host model built from the formats module.
#include <cmath>
#include <cstring>
#include <random>
#include <set>

#include <gtest/gtest.h>

#include "core/weight_prep.h"
#include "cuda/kernels/sm90_grouped_gemm.h"
#include "cuda/tile/fp4_bf16_codec.h"
#include "cuda/tile/fp4_codec.h"
#include "cuda/tile/nvfp4_f16_codec.h"
#include "cuda/weight_layout.h"
#include "cuda_test_util.h"
#include "moe_ep/quant.h"
#include "rs_codec_probe.h"
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

// A converter run again into a poisoned buffer with a device row count below its row bound:
// the rows below the count are those of the full run (`full`), the rows from it on untouched.
template <class Launch>
void expect_rows_from_the_count_untouched(const std::vector<uint16_t>& full, int64_t rows, int64_t k, int32_t count,
                                          Launch&& launch) {
  const DeviceBuffer dcount = DeviceBuffer::upload(std::vector<int32_t>{count});
  DeviceBuffer out(static_cast<size_t>(rows * k) * 2);
  MOE_EP_CUDA_CHECK(cudaMemset(out.get(), 0xFF, out.bytes()));
  MOE_EP_CUDA_CHECK(launch(dcount.get<int32_t>(), out.get<uint16_t>()));
  std::vector<uint16_t> got(rows * k);
  MOE_EP_CUDA_CHECK(cudaMemcpy(got.data(), out.get(), out.bytes(), cudaMemcpyDeviceToHost));
  for (int64_t i = 0; i < rows * k; ++i)
    ASSERT_EQ(got[i], i < count * k ? full[i] : uint16_t{0xFFFF}) << "element " << i << " with a row count of " << count;
}

// nvfp4-wgmma's order (tile/nvfp4_f16_codec.h): a permutation of each k16 block (one e4m3 block
// scale per block), the inverse of the position function, and the mma fragment rule it encodes:
// slot 2t + e <- element 4t + e, slot 2t + 8 + e <- element 4t + 2 + e.
TEST(Sm90RsCodec, TheNvfp4OrderAlongKPermutesEachK16Block) {
  std::set<int> seen;
  for (int block = 0; block < 8; ++block)
    for (int slot = 0; slot < 16; ++slot) {
      const int k = nvfp4_f16_source_k(block, slot);
      ASSERT_EQ(k / 16, block) << "slot " << slot;
      seen.insert(k);
      EXPECT_EQ(nvfp4_f16_position_of_k(k), 16 * block + slot) << "block " << block << " slot " << slot;
      const int t = (slot % 8) / 2, e = slot % 2;
      EXPECT_EQ(k % 16, slot < 8 ? 4 * t + e : 4 * t + 2 + e) << "slot " << slot;
    }
  EXPECT_EQ(seen.size(), 128u);
}

// f16 bits -> float, written out from the IEEE binary16 layout (the device side uses the CUDA
// conversions).
float f16_bits_to_float(uint16_t h) {
  const int e = (h >> 10) & 0x1F, m = h & 0x3FF;
  const float mag = e == 0 ? std::ldexp(static_cast<float>(m), -24)
                   : e == 31 ? (m ? NAN : INFINITY)
                             : std::ldexp(static_cast<float>(m | 0x400), e - 25);
  return h & 0x8000 ? -mag : mag;
}

// Random NVFP4 rows (the library's quantizer; rows over 30 binades, and 16-value blocks over 12
// binades within a row, so the e4m3 block scales span twelve binades while most values stay
// nonzero) -> f16 rows on the GPU, against the host: position nvfp4_f16_position_of_k(k) of each
// 128-wide step holds e2m1 * e4m3 block scale, exactly.
TEST(Sm90RsCodecDevice, Nvfp4ToF16WritesEachValueExactlyAtItsPosition) {
  MOE_EP_REQUIRE_CUDA();
  const int64_t rows = 29, k = 384;
  std::mt19937 rng(37);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(rows * k);
  for (int64_t i = 0; i < rows * k; ++i)
    x[i] = normal(rng) * std::ldexp(1.0f, static_cast<int>(i / k % 30 - 15 + (i % k / 16) % 12 - 6));
  std::vector<uint8_t> packed(rows * k / 2), sc(rows * k / 16);
  std::vector<float> global(rows);
  quantize_nvfp4_rows(x.data(), rows, k, packed.data(), sc.data(), global.data());
  const DeviceBuffer dp = DeviceBuffer::upload(packed), dsc = DeviceBuffer::upload(sc);
  DeviceBuffer out(static_cast<size_t>(rows * k) * 2);
  MOE_EP_CUDA_CHECK(cudaMemset(out.get(), 0xFF, out.bytes()));  // f16 NaN
  MOE_EP_CUDA_CHECK(launch_sm90_nvfp4_to_rs_f16(dp.get(), dsc.get(), rows, nullptr, static_cast<int>(k),
                                                out.get<uint16_t>(), nullptr));
  MOE_EP_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<uint16_t> got(rows * k);
  MOE_EP_CUDA_CHECK(cudaMemcpy(got.data(), out.get(), out.bytes(), cudaMemcpyDeviceToHost));
  expect_rows_from_the_count_untouched(got, rows, k, static_cast<int32_t>(rows - 5), [&](const int32_t* count, uint16_t* o) {
    return launch_sm90_nvfp4_to_rs_f16(dp.get(), dsc.get(), rows, count, static_cast<int>(k), o, nullptr);
  });
  int64_t nonzero = 0;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t kk = 0; kk < k; ++kk) {
      const float v = e2m1_to_float(unpack_e2m1(packed[(r * k + kk) / 2], kk)) * e4m3_to_float(sc[(r * k + kk) / 16]);
      const int64_t at = r * k + kk / 128 * 128 + nvfp4_f16_position_of_k(static_cast<int>(kk % 128));
      ASSERT_EQ(f16_bits_to_float(got[at]), v) << "row " << r << " k " << kk;
      nonzero += v != 0.0f;
    }
  EXPECT_GT(nonzero, rows * k / 2);  // the check is not over zeros
  EXPECT_EQ(launch_sm90_nvfp4_to_rs_f16(dp.get(), dsc.get(), rows, nullptr, 96, out.get<uint16_t>(), nullptr),
            cudaErrorInvalidValue);
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


TEST(Sm90RsCodecDevice, FragmentDecodeIsBitwiseTheHosts) {
  MOE_EP_REQUIRE_CUDA();
  std::mt19937 rng(29);
  std::vector<uint32_t> words_g, words_g8, d_g, d_g8;
  std::vector<int32_t> steps;
  for (uint32_t d = 0; d < kFoldedShifts; ++d)
    for (int pos = 0; pos < 8; ++pos)
      for (uint8_t code = 0; code < 16; ++code)
        for (int step = 0; step < 2; ++step) {
          words_g.push_back(random_fp4_word_with(rng, pos, code).word);
          words_g8.push_back(random_fp4_word_with(rng, 7 - pos, code ^ 8).word);
          d_g.push_back(d);
          d_g8.push_back(kFoldedShifts - 1 - d);
          steps.push_back(step);
        }
  const int n = static_cast<int>(steps.size());
  const DeviceBuffer wg = DeviceBuffer::upload(words_g), wg8 = DeviceBuffer::upload(words_g8),
                     dg = DeviceBuffer::upload(d_g), dg8 = DeviceBuffer::upload(d_g8), st = DeviceBuffer::upload(steps);
  DeviceBuffer out(static_cast<size_t>(n) * 16);
  MOE_EP_CUDA_CHECK(test::run_rs_fragment_probe(wg.get<uint32_t>(), wg8.get<uint32_t>(), dg.get<uint32_t>(),
                                                dg8.get<uint32_t>(), st.get<int32_t>(), n, out.get<uint32_t>()));
  std::vector<uint32_t> got(static_cast<size_t>(n) * 4);
  MOE_EP_CUDA_CHECK(cudaMemcpy(got.data(), out.get(), got.size() * 4, cudaMemcpyDeviceToHost));
  for (int i = 0; i < n; ++i) {
    uint32_t want[4];
    const uint32_t fg = rs_fold_factor(d_g[i]), fg8 = rs_fold_factor(d_g8[i]);
    if (steps[i] == 0) rs_a_fragment<0>(words_g[i], words_g8[i], fg, fg8, want);
    else rs_a_fragment<1>(words_g[i], words_g8[i], fg, fg8, want);
    for (int r = 0; r < 4; ++r)
      ASSERT_EQ(got[4 * i + r], want[r]) << "case " << i << " register " << r << " shift " << d_g[i];
  }
}

// Random Q8 rows (formats module quantizer) -> bf16 rows in the rs order on the GPU, against the
// host: position rs_position_of_k(k) of each 128-wide step holds bf16(e4m3 * 2^(E8M0 - 127)).
TEST(Sm90RsCodecDevice, Q8ToBf16WritesEachValueExactlyAtItsRsPosition) {
  MOE_EP_REQUIRE_CUDA();
  const int64_t rows = 37, k = 384;
  std::mt19937 rng(31);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(rows * k);
  for (int64_t i = 0; i < rows * k; ++i) x[i] = normal(rng) * std::ldexp(1.0f, static_cast<int>(i / k) - 18);
  std::vector<uint8_t> q(rows * k), sc(rows * k / 32);
  for (int64_t r = 0; r < rows; ++r) quantize_q8(x.data() + r * k, k, q.data() + r * k, sc.data() + r * k / 32);
  const DeviceBuffer dq = DeviceBuffer::upload(q), dsc = DeviceBuffer::upload(sc);
  DeviceBuffer out(static_cast<size_t>(rows * k) * 2);
  MOE_EP_CUDA_CHECK(cudaMemset(out.get(), 0xFF, out.bytes()));  // bf16 NaN
  MOE_EP_CUDA_CHECK(launch_sm90_q8_to_rs_bf16(dq.get(), dsc.get(), rows, nullptr, static_cast<int>(k),
                                              out.get<uint16_t>(), nullptr));
  MOE_EP_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<uint16_t> got(rows * k);
  MOE_EP_CUDA_CHECK(cudaMemcpy(got.data(), out.get(), out.bytes(), cudaMemcpyDeviceToHost));
  expect_rows_from_the_count_untouched(got, rows, k, static_cast<int32_t>(rows - 3), [&](const int32_t* count, uint16_t* o) {
    return launch_sm90_q8_to_rs_bf16(dq.get(), dsc.get(), rows, count, static_cast<int>(k), o, nullptr);
  });
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t kk = 0; kk < k; ++kk) {
      const float v = e4m3_to_float(q[r * k + kk]) * std::ldexp(1.0f, sc[r * k / 32 + kk / 32] - 127);
      const int64_t at = r * k + kk / 128 * 128 + rs_position_of_k(static_cast<int>(kk % 128));
      ASSERT_EQ(got[at], float_to_bf16(v)) << "row " << r << " k " << kk;
      ASSERT_EQ(bf16_to_float(got[at]), v) << "row " << r << " k " << kk << ": not exact";
    }
  EXPECT_EQ(launch_sm90_q8_to_rs_bf16(dq.get(), dsc.get(), rows, nullptr, 96, out.get<uint16_t>(), nullptr),
            cudaErrorInvalidValue);
}

}  // namespace
}  // namespace moe_ep::cuda
