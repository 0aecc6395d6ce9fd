// Host-only checks of the SM90 backend's load-time code: the FP4 -> e4m3 register decode, the
// kernel weight layout, the GEMM 1 gate/up interleave and the workspace plan. They need no GPU.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <set>

#include <gtest/gtest.h>

#include "core/weight_prep.h"
#include "cuda/kernels/sm90_grouped_gemm.h"
#include "cuda/kernels/sm90_permute.h"
#include "cuda/plan.h"
#include "cuda/tile/fp4_codec.h"
#include "cuda/weight_layout.h"
#include "moe_ep/formats.h"
#include "support/fp4_word_cases.h"
#include "support/layer_problem.h"

namespace moe_ep::cuda {
namespace {

uint8_t e4m3_of_code(uint8_t code) { return float_to_e4m3(e2m1_to_float(code)); }

TEST(Sm90Fp4Codec, EveryCodeAtEveryPositionDecodesToItsE4M3) {
  std::mt19937 rng(7);
  for (int pos = 0; pos < 8; ++pos)
    for (uint8_t code = 0; code < 16; ++code)
      for (int rep = 0; rep < 16; ++rep) {
        const Fp4WordCase c = random_fp4_word_with(rng, pos, code);
        uint32_t lo_e4m3, hi_e4m3;
        decode_fp4_word(c.word, lo_e4m3, hi_e4m3);
        for (int i = 0; i < 4; ++i) {
          ASSERT_EQ((lo_e4m3 >> (8 * i)) & 0xFF, e4m3_of_code(c.lo[i])) << "lo " << i << " pos " << pos;
          ASSERT_EQ((hi_e4m3 >> (8 * i)) & 0xFF, e4m3_of_code(c.hi[i])) << "hi " << i << " pos " << pos;
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

TEST(Sm90Fp4Codec, StandardOrderWordDecodeIsExhaustivelyExactInBothHalves) {
  std::mt19937 rng(11);
  for (uint32_t x = 0; x < 65536; ++x) {
    const uint32_t other = rng() & 0xFFFFu;
    for (const bool high : {false, true}) {
      const uint32_t w = high ? (x << 16) | other : x | (other << 16);
      uint32_t lo_e4m3, hi_e4m3;
      decode_fp4x8_standard(w, lo_e4m3, hi_e4m3);
      for (int i = 0; i < 8; ++i) {
        const uint32_t got = ((i < 4 ? lo_e4m3 : hi_e4m3) >> (8 * (i % 4))) & 0xFF;
        ASSERT_EQ(got, e4m3_of_code((w >> (4 * i)) & 0xF)) << "w=" << w << " element " << i;
      }
    }
  }
}

// The folded tables against the formats module (itself checked against ml_dtypes): every
// code times every power of two of the window is exact in e4m3 and encodes as the table says.
TEST(Sm90Fp4Codec, FoldedTablesHoldTheExactE4M3OfEveryCodeAtEveryShift) {
  for (int d = 0; d < kFoldedShifts; ++d)
    for (uint8_t code = 0; code < 8; ++code) {
      const float v = std::ldexp(e2m1_to_float(code), d - kFoldedShiftBias);
      const uint32_t byte = (folded_table_word(d, code < 4 ? 0 : 4) >> (8 * (code % 4))) & 0xFF;
      ASSERT_EQ(byte, float_to_e4m3(v)) << "d=" << d << " code=" << int(code);
      ASSERT_EQ(e4m3_to_float(static_cast<uint8_t>(byte)), v) << "d=" << d << " code=" << int(code);
    }
}

TEST(Sm90Fp4Codec, FoldedDecodeScalesEverySignedCodeAtEveryPositionExactly) {
  std::mt19937 rng(9);
  for (int d = 0; d < kFoldedShifts; ++d)
    for (int pos = 0; pos < 8; ++pos)
      for (uint8_t code = 0; code < 16; ++code) {
        const Fp4WordCase c = random_fp4_word_with(rng, pos, code);
        uint32_t lo_e4m3, hi_e4m3;
        decode_fp4_word_with(c.word, folded_table_word(d, 0), folded_table_word(d, 4), lo_e4m3, hi_e4m3);
        for (int i = 0; i < 4; ++i) {
          const float want_lo = std::ldexp(e2m1_to_float(c.lo[i]), d - kFoldedShiftBias);
          const float want_hi = std::ldexp(e2m1_to_float(c.hi[i]), d - kFoldedShiftBias);
          const uint8_t got_lo = (lo_e4m3 >> (8 * i)) & 0xFF, got_hi = (hi_e4m3 >> (8 * i)) & 0xFF;
          ASSERT_EQ(e4m3_to_float(got_lo), want_lo) << "d=" << d << " lo " << i;
          ASSERT_EQ(e4m3_to_float(got_hi), want_hi) << "d=" << d << " hi " << i;
          ASSERT_EQ(got_lo >> 7, (c.lo[i] >> 3) & 1u);  // -0 keeps its sign, as in the unfolded decode
          ASSERT_EQ(got_hi >> 7, (c.hi[i] >> 3) & 1u);
        }
      }
}

// Folded weights keep every element: code * 2^(d - 8) * row factor = code * 2^(E8M0 - 127).
TEST(Sm90WeightLayout, FoldingIntoTheFp8WindowPreservesEveryWeight) {
  testsupport::Problem p = testsupport::tiny_problem("mxfp4");
  p.num_experts = 2;
  const testsupport::WeightSet ws = testsupport::random_weights(p, WeightFormat::kMXFP4, 5);
  const HostExpertWeights w = prepare_host_weights(p.recipe, ws.pack(),
                                                   {p.num_experts, p.hidden, p.intermediate});
  const KernelWeights folded = make_kernel_weights(w);
  const KernelWeights plain = make_kernel_weights(w, serial_for, Fp8Fold::kNever);
  ASSERT_TRUE(folded.w13.folded && folded.w2.folded);
  ASSERT_FALSE(plain.w13.folded || plain.w2.folded);
  EXPECT_EQ(folded.w13.tiles, plain.w13.tiles);
  for (const auto* pair : {&folded.w13, &folded.w2}) {
    const KernelWeightTensor& f = *pair;
    const KernelWeightTensor& u = pair == &folded.w13 ? plain.w13 : plain.w2;
    const std::vector<float> factor = f.row_factors();
    const int64_t steps = f.k / kGemmBlockK;
    for (int64_t e = 0; e < f.num_experts; ++e)
      for (int64_t s = 0; s < steps; ++s)
        for (int64_t n = 0; n < f.n; ++n)
          for (int j = 0; j < 4; ++j) {
            const size_t at = static_cast<size_t>(((e * steps + s) * f.n + n) * 4 + j);
            ASSERT_LT(f.scales[at], kFoldedShifts);
            const double folded_scale = std::ldexp(1.0, f.scales[at] - kFoldedShiftBias) * factor[e * f.n + n];
            ASSERT_EQ(folded_scale, std::ldexp(1.0, u.scales[at] - 127)) << "e=" << e << " n=" << n;
          }
  }
}

TEST(Sm90WeightLayout, RowsOutsideTheFp8WindowKeepTheBlockScales) {
  testsupport::Problem p = testsupport::tiny_problem("mxfp4");
  p.num_experts = 2;
  testsupport::WeightSet ws = testsupport::random_weights(p, WeightFormat::kMXFP4, 5);
  HostExpertWeights w = prepare_host_weights(p.recipe, ws.pack(),
                                             {p.num_experts, p.hidden, p.intermediate});
  // One W2 row of expert 1 spans 15 octaves: 112 and 127 among its blocks.
  uint8_t* row = w.w2_scale.get() + 1 * w.w2_scales_per_expert() + 3 * (p.intermediate / 32);
  row[0] = 112;
  row[1] = 127;
  const KernelWeights kw = make_kernel_weights(w);
  EXPECT_TRUE(kw.w13.folded);
  EXPECT_FALSE(kw.w2.folded);
  EXPECT_TRUE(kw.w2.row_base.empty());
  EXPECT_EQ(read_kernel_weight(kw.w2, WeightFormat::kMXFP4, 1, 3, 0).scale, 112);
  row[1] = 126;  // 14 octaves: inside
  EXPECT_TRUE(make_kernel_weights(w).w2.folded);
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
  const HostExpertWeights w = prepare_host_weights(p.recipe, ws.pack(),
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

// The nvfp4 decode kernel's operands (sm90_nvfp4_decode_mainloop.cuh), assembled here as the
// kernel assembles them: lane (g, t)'s A fragment (weights, feature g) from the micro-tile word
// kb through decode_fp4_word, its B fragment (activations, token g) from nvfp4_lane_word through
// decode_fp4x8_standard, byte 2p + i of k16 block j = 2kb + sub for k pair p. m16n8k16 multiplies
// A and B at the same (t, p, i), so the sum over them must be the exact dot product of the
// weight row and the activation row: each side must put the same k at the same place.
TEST(Sm90Nvfp4DecodeOperands, LanesPairTheSameKOfWeightsAndActivations) {
  testsupport::Problem p = testsupport::tiny_problem("nvfp4");
  p.num_experts = 2;
  const testsupport::WeightSet ws = testsupport::random_weights(p, WeightFormat::kNVFP4, 21);
  const HostExpertWeights w = prepare_host_weights(p.recipe, ws.pack(), {p.num_experts, p.hidden, p.intermediate});
  const KernelWeights kw = make_kernel_weights(w);
  const KernelWeightTensor& t13 = kw.w13;  // n = 2I, k = H
  const int64_t K = t13.k, steps = K / kGemmBlockK;
  std::mt19937 rng(3);
  for (int trial = 0; trial < 4; ++trial) {
    std::vector<uint8_t> x(static_cast<size_t>(K / 2)), xs(static_cast<size_t>(K / 16));
    for (uint8_t& b : x) b = static_cast<uint8_t>(rng());
    for (uint8_t& b : xs) b = static_cast<uint8_t>(8 + rng() % 100);  // finite e4m3 scales
    for (int64_t e = 0; e < p.num_experts; ++e)
      for (int64_t n = 0; n < t13.n; n += 7) {
        double want = 0.0;
        for (int64_t k = 0; k < K; ++k) {
          const KernelWeightElement we = read_kernel_weight(t13, WeightFormat::kNVFP4, e, n, k);
          want += static_cast<double>(e2m1_to_float(we.code)) * e4m3_to_float(we.scale) *
                  e2m1_to_float(unpack_e2m1(x[static_cast<size_t>(k / 2)], k)) * e4m3_to_float(xs[static_cast<size_t>(k / 16)]);
        }
        const int64_t g = n % 8, n8 = e * (t13.n / 8) + n / 8;
        double got = 0.0;
        for (int64_t s = 0; s < steps; ++s) {
          uint32_t step_words[16];
          std::memcpy(step_words, x.data() + s * 64, 64);
          for (int tq = 0; tq < 4; ++tq) {
            const int lane = static_cast<int>(4 * g + tq);
            for (int kb = 0; kb < 4; ++kb) {
              uint32_t word;
              std::memcpy(&word, t13.tiles.data() + (n8 * steps + s) * kWeightMicroTileBytes + lane * 16 + kb * 4, 4);
              uint32_t w_e4[2], x_e4[2];
              decode_fp4_word(word, w_e4[0], w_e4[1]);
              decode_fp4x8_standard(nvfp4_lane_word(step_words, tq, kb), x_e4[0], x_e4[1]);
              for (int sub = 0; sub < 2; ++sub) {
                const int j = 2 * kb + sub;
                const double sw = e4m3_to_float(t13.scales[static_cast<size_t>(((e * steps + s) * t13.n + n) * 8 + j)]);
                const double sx = e4m3_to_float(xs[static_cast<size_t>(s * 8 + j)]);
                for (int byte = 0; byte < 4; ++byte)  // pair byte / 2, element byte % 2
                  got += e4m3_to_float(static_cast<uint8_t>(w_e4[sub] >> (8 * byte))) * sw *
                         e4m3_to_float(static_cast<uint8_t>(x_e4[sub] >> (8 * byte))) * sx;
              }
            }
          }
        }
        ASSERT_EQ(got, want) << "trial " << trial << " expert " << e << " row " << n;
      }
  }
}

// The chunked routing's chunks cover the slots, stay within kRouteMaxChunks and within the
// workspace bound of every larger slot count (the bound is what the layer's workspace holds).
TEST(Sm90Plan, RoutingChunksCoverTheSlotsWithinTheWorkspaceBound) {
  EXPECT_EQ(sm90_route_chunks(kRouteOneBlockMaxSlots), 0);
  EXPECT_EQ(sm90_route_chunks_bound(kRouteOneBlockMaxSlots), 0);
  EXPECT_GT(sm90_route_chunks(kRouteOneBlockMaxSlots + 1), 0);
  for (int64_t max_slots : {int64_t{4097}, int64_t{49152}, int64_t{262144}, int64_t{294913}, int64_t{1} << 22})
    for (int64_t slots = kRouteOneBlockMaxSlots + 1; slots <= max_slots; slots += 1 + slots / 97) {
      const int chunks = sm90_route_chunks(slots), chunk = sm90_route_chunk_slots(slots);
      ASSERT_GE(static_cast<int64_t>(chunks) * chunk, slots) << slots;
      ASSERT_LT(static_cast<int64_t>(chunks - 1) * chunk, slots) << slots;  // no empty chunk
      ASSERT_LE(chunks, kRouteMaxChunks) << slots;
      ASSERT_LE(chunks, sm90_route_chunks_bound(max_slots)) << slots << " of at most " << max_slots;
      ASSERT_EQ(chunk % 256, 0) << slots;
    }
}

TEST(Sm90Plan, WorkspaceRegionsAreAlignedDisjointAndSizedByTheFormula) {
  for (bool nvfp4 : {false, true}) {
    const LayerShape s{256, 4096, 2048, 6, 8192, nvfp4 ? Recipe::kNvfp4 : Recipe::kMxfp4};
    const WorkspaceLayout w = workspace_layout(s);
    const int64_t M = 8192 * 6;
    struct Region {
      size_t at;
      int64_t bytes;
    };
    const std::vector<Region> regions = {
        {w.a, nvfp4 ? 8192 * 2048 : 8192 * 4096}, {w.a_scale, 8192 * 4096 / (nvfp4 ? 16 : 32)},
        {w.expert_offsets, 257 * 4}, {w.num_m_tiles, 4}, {w.row_token, M * 4},
        {w.row_weight, M * 4}, {w.slot_row, M * 4}, {w.route_chunk_rows, 24 * 256 * 4},
        {w.h, nvfp4 ? M * 1024 : M * 2048},
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

// Layers whose forms read 16-bit h add it (M x I x 2 B), disjoint from the rest; a bf16 x (the
// mxfp4 pairs GEMM 1) lives in o.
TEST(Sm90Plan, Bf16ActivationsAddTheirHRegionAndFitXIntoO) {
  LayerShape s{256, 4096, 2048, 6, 8192, Recipe::kMxfp4};
  const WorkspaceLayout plain = workspace_layout(s);
  s.activations_16bit = true;
  const WorkspaceLayout w = workspace_layout(s);
  const int64_t M = 8192 * 6;
  EXPECT_EQ(plain.h_16bit, plain.o);  // an empty region
  EXPECT_EQ(w.total_bytes, plain.total_bytes + static_cast<size_t>(M * 2048 * 2));
  EXPECT_GE(w.h_16bit, w.h_scale + static_cast<size_t>(M * 2048 / 32));
  EXPECT_EQ(w.h_16bit % 256, 0u);
  EXPECT_LE(w.h_16bit + static_cast<size_t>(M * 2048 * 2), w.o);
  EXPECT_LE(static_cast<size_t>(8192 * 4096 * 2), w.total_bytes - w.o);  // x as bf16 inside o
  // nvfp4-wgmma's f16 h reuses the fp32 h's region (read by the NVFP4 pass before it is written).
  LayerShape nv{256, 4096, 2048, 6, 8192, Recipe::kNvfp4};
  const WorkspaceLayout nv_plain = workspace_layout(nv);
  nv.activations_16bit = true;
  const WorkspaceLayout nw = workspace_layout(nv);
  EXPECT_EQ(nw.h_16bit, nw.h_f32);
  EXPECT_EQ(nw.total_bytes, nv_plain.total_bytes);
  EXPECT_LE(static_cast<size_t>(8192 * 4096 * 2), nw.total_bytes - nw.o);  // x as f16 inside o
}

// A shared expert adds h (R x Is x 2 B) and o (R x H x 2 B) after every routed region, so the
// second stream that writes them never touches what the routed steps use.
TEST(Sm90Plan, SharedExpertAddsItsRegionsAfterTheRoutedOnes) {
  LayerShape s{256, 4096, 2048, 6, 8192, Recipe::kMxfp4};
  const WorkspaceLayout plain = workspace_layout(s);
  s.shared_intermediate = 1536;
  const WorkspaceLayout w = workspace_layout(s);
  const int64_t M = 8192 * 6;
  EXPECT_EQ(plain.shared_h, plain.total_bytes);  // empty regions without a shared expert
  EXPECT_EQ(plain.shared_o, plain.total_bytes);
  EXPECT_EQ(w.o, plain.o);
  EXPECT_GE(w.shared_h, w.o + static_cast<size_t>(M * 4096 * 2));
  EXPECT_EQ(w.shared_h % 256, 0u);
  EXPECT_EQ(w.shared_o, w.shared_h + static_cast<size_t>(8192 * 1536 * 2));
  EXPECT_EQ(w.total_bytes, w.shared_o + static_cast<size_t>(8192 * 4096 * 2));
}

TEST(Sm90Plan, MTileBoundCoversEveryRoutingOfTheRows) {
  const LayerShape s{16, 256, 128, 4, 300, Recipe::kMxfp4};
  const Plan plan = make_plan(s);
  std::mt19937 rng(3);
  for (int trial = 0; trial < 2000; ++trial) {
    const int64_t T = rng() % 301;
    std::vector<int64_t> count(16, 0);
    const int mode = trial % 3;
    for (int64_t i = 0; i < T * 4; ++i) count[mode == 0 ? rng() % 16 : mode == 1 ? 0 : (i % 16)]++;
    for (const int block_m : {kGemmBlockM, kDecodeBlockM, 128}) {
      int64_t tiles = 0;
      for (int64_t c : count) tiles += (c + block_m - 1) / block_m;
      ASSERT_LE(tiles, plan.m_tile_bound(T, block_m)) << "T=" << T << " block_m=" << block_m;
      ASSERT_LE(plan.m_tile_bound(T, block_m), plan.max_m_tiles);
    }
  }
  // 300 tokens: ceil(1200 / 64) + 16 = 35 m-tiles x 2 n-tiles (2I = 256) = 70 blocks.
  const GridRule gemm1{kGemmBlockM, 256 / kGemmBlockN, 132};
  EXPECT_EQ(launch_grid(plan, gemm1, 0), 0);
  EXPECT_EQ(launch_grid(plan, gemm1, 300), 70);
  // With I = 2048 there are 32 n-tiles: the grid is capped at the resident blocks.
  const Plan big = make_plan({16, 256, 2048, 4, 300, Recipe::kMxfp4});
  EXPECT_EQ(launch_grid(big, {kGemmBlockM, 4096 / kGemmBlockN, 132}, 300), 132);
  EXPECT_EQ(launch_grid(big, {kGemmBlockM, 256 / kGemmBlockN, 132}, 300), 70);
}

}  // namespace
}  // namespace moe_ep::cuda
