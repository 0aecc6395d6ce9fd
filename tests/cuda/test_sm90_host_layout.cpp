// Host-only checks of the SM90 backend's load-time code: the FP4 -> e4m3 register decode, the
// kernel weight layout, the GEMM 1 gate/up interleave and the workspace plan. They need no GPU.
#include <algorithm>
#include <random>
#include <set>

#include <gtest/gtest.h>

#include "core/weight_prep.h"
#include "cuda/kernels/sm90_grouped_gemm.h"
#include "cuda/plan.h"
#include "cuda/tile/fp4_codec.h"
#include "cuda/weight_layout.h"
#include "moe_ep/formats.h"
#include "support/layer_problem.h"

namespace moe_ep::cuda {
namespace {

uint8_t e4m3_of_code(uint8_t code) { return float_to_e4m3(e2m1_to_float(code)); }

TEST(Sm90Fp4Codec, EveryCodeAtEveryPositionDecodesToItsE4M3) {
  std::mt19937 rng(7);
  for (int pos = 0; pos < 8; ++pos)
    for (uint8_t code = 0; code < 16; ++code)
      for (int rep = 0; rep < 16; ++rep) {
        uint8_t lo[4], hi[4];
        for (int i = 0; i < 4; ++i) {
          lo[i] = rng() & 0xF;
          hi[i] = rng() & 0xF;
        }
        (pos < 4 ? lo[pos] : hi[pos - 4]) = code;
        uint32_t lo_e4m3, hi_e4m3;
        decode_fp4_word(encode_fp4_word(lo, hi), lo_e4m3, hi_e4m3);
        for (int i = 0; i < 4; ++i) {
          ASSERT_EQ((lo_e4m3 >> (8 * i)) & 0xFF, e4m3_of_code(lo[i])) << "lo " << i << " pos " << pos;
          ASSERT_EQ((hi_e4m3 >> (8 * i)) & 0xFF, e4m3_of_code(hi[i])) << "hi " << i << " pos " << pos;
        }
      }
}

TEST(Sm90Fp4Codec, StandardOrderDecodeIsExhaustivelyExact) {
  for (uint32_t x = 0; x < 65536; ++x) {
    const uint32_t e4 = decode_fp4x4_standard(x);
    for (int i = 0; i < 4; ++i)
      ASSERT_EQ((e4 >> (8 * i)) & 0xFF, e4m3_of_code((x >> (4 * i)) & 0xF)) << "x=" << x << " i=" << i;
  }
}

TEST(Sm90WeightLayout, Gemm1RowsInterleaveGateAndUpBlocksOf8) {
  const int64_t I = 256;
  std::set<int64_t> seen;
  for (int64_t n = 0; n < 2 * I; ++n) {
    const int64_t src = gemm1_source_row(n, I);
    seen.insert(src);
    if ((n / 8) % 2 == 0) {
      EXPECT_LT(src, I);
      EXPECT_EQ(gemm1_source_row(n + 8, I), src + I) << "n=" << n;  // its up partner
      // h column of this pair inside a 128-wide n tile: (n % 128) / 16 * 8 + n % 8
      EXPECT_EQ((n / kGemmBlockN) * 64 + (n % kGemmBlockN) / 16 * 8 + n % 8, src) << "n=" << n;
    }
  }
  EXPECT_EQ(static_cast<int64_t>(seen.size()), 2 * I);
}

class Sm90WeightLayoutRoundTrip : public ::testing::TestWithParam<std::string> {};

TEST_P(Sm90WeightLayoutRoundTrip, KernelLayoutReadsBackEveryElementAndScale) {
  testsupport::Problem p = testsupport::tiny_problem(GetParam());
  p.num_experts = 3;
  const WeightFormat format = GetParam() == "nvfp4" ? WeightFormat::kNVFP4 : WeightFormat::kMXFP4;
  const testsupport::WeightSet ws = testsupport::random_weights(p, format, 11);
  const HostExpertWeights w = prepare_host_weights(find_family(p.family), ws.pack(),
                                                   {p.num_experts, p.hidden, p.intermediate});
  const KernelWeights kw = make_kernel_weights(w);
  const int64_t H = p.hidden, I = p.intermediate, B = w.block();
  int64_t checked = 0;
  for (int64_t e = 0; e < p.num_experts; ++e) {
    for (int64_t n = 0; n < 2 * I; ++n)
      for (int64_t k = 0; k < H; ++k) {
        const int64_t row = gemm1_source_row(n, I);
        const KernelWeightElement got = read_kernel_weight(kw.w13, format, e, n, k);
        const uint8_t code = unpack_e2m1(w.w13_packed(e)[(row * H + k) / 2], k);
        ASSERT_EQ(got.code, code) << "w13 e=" << e << " n=" << n << " k=" << k;
        ASSERT_EQ(got.scale, w.w13_scales(e)[row * (H / B) + k / B]) << "w13 scale e=" << e << " n=" << n << " k=" << k;
        ++checked;
      }
    for (int64_t n = 0; n < H; ++n)
      for (int64_t k = 0; k < I; ++k) {
        const KernelWeightElement got = read_kernel_weight(kw.w2, format, e, n, k);
        ASSERT_EQ(got.code, unpack_e2m1(w.w2_packed(e)[(n * I + k) / 2], k)) << "w2 e=" << e << " n=" << n << " k=" << k;
        ASSERT_EQ(got.scale, w.w2_scales(e)[n * (I / B) + k / B]) << "w2 scale e=" << e << " n=" << n << " k=" << k;
        ++checked;
      }
  }
  EXPECT_EQ(checked, p.num_experts * 3 * H * I);
  if (format == WeightFormat::kNVFP4) {
    ASSERT_EQ(kw.w13_global.size(), 3u);
    for (int64_t e = 0; e < 3; ++e) EXPECT_EQ(kw.w13_global[e], w.w13_weight_scale_2(e));
  }
}

INSTANTIATE_TEST_SUITE_P(Recipes, Sm90WeightLayoutRoundTrip, ::testing::Values("mxfp4", "nvfp4"));

TEST(Sm90Plan, WorkspaceRegionsAreAlignedDisjointAndSizedByTheFormula) {
  for (bool nvfp4 : {false, true}) {
    const LayerShape s{256, 4096, 2048, 6, 8192, nvfp4};
    const WorkspaceLayout w = workspace_layout(s);
    const int64_t M = 8192 * 6;
    struct Region {
      size_t at;
      int64_t bytes;
    };
    const std::vector<Region> regions = {
        {w.a, nvfp4 ? 8192 * 2048 : 8192 * 4096}, {w.a_scale, 8192 * 4096 / (nvfp4 ? 16 : 32)},
        {w.expert_offsets, 257 * 4}, {w.num_m_tiles, 4}, {w.row_token, M * 4},
        {w.row_weight, M * 4}, {w.slot_row, M * 4}, {w.h, nvfp4 ? M * 1024 : M * 2048},
        {w.h_scale, M * 2048 / (nvfp4 ? 16 : 32)}, {w.o, M * 4096 * 2}};
    for (size_t i = 0; i < regions.size(); ++i) {
      EXPECT_EQ(regions[i].at % 256, 0u);
      EXPECT_LE(regions[i].at + regions[i].bytes, w.total_bytes);
      for (size_t j = i + 1; j < regions.size(); ++j)
        EXPECT_TRUE(regions[i].at + regions[i].bytes <= regions[j].at ||
                    regions[j].at + regions[j].bytes <= regions[i].at) << i << " vs " << j;
    }
    // o dominates: M * H * 2 = 384 MiB of the flash preset at T = 8192.
    EXPECT_GE(w.total_bytes, static_cast<size_t>(M * 4096 * 2));
    EXPECT_LE(w.total_bytes, static_cast<size_t>(M * 4096 * 2 + M * 2048 * (nvfp4 ? 5 : 2)) + (size_t{64} << 20));
  }
}

TEST(Sm90Plan, MTileBoundCoversEveryRoutingOfTheRows) {
  const LayerShape s{16, 256, 128, 4, 300, false};
  const Plan plan = make_plan(s, {132, 1, 1});
  std::mt19937 rng(3);
  for (int trial = 0; trial < 2000; ++trial) {
    const int64_t T = rng() % 301;
    std::vector<int64_t> count(16, 0);
    const int mode = trial % 3;
    for (int64_t i = 0; i < T * 4; ++i) count[mode == 0 ? rng() % 16 : mode == 1 ? 0 : (i % 16)]++;
    int64_t tiles = 0;
    for (int64_t c : count) tiles += (c + kGemmBlockM - 1) / kGemmBlockM;
    ASSERT_LE(tiles, plan.m_tile_bound(T)) << "T=" << T;
    ASSERT_LE(plan.m_tile_bound(T), plan.max_m_tiles);
  }
  // 300 tokens: ceil(1200 / 64) + 16 = 35 m-tiles x 2 n-tiles (2I = 256) = 70 blocks.
  EXPECT_EQ(plan.gemm1_grid(0), 0);
  EXPECT_EQ(plan.gemm1_grid(300), 70);
  // With I = 2048 there are 32 n-tiles: the grid is capped at the resident blocks.
  const Plan big = make_plan({16, 256, 2048, 4, 300, false}, {132, 1, 2});
  EXPECT_EQ(big.gemm1_grid(300), 132);
  EXPECT_EQ(big.gemm2_grid(300), 70);
}

}  // namespace
}  // namespace moe_ep::cuda
