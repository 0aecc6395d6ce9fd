// The wgmma grouped GEMMs (folded mxfp4 weights, sm90_mxfp4_wgmma_mainloop.cuh) on the device.
//
// Kernel level: routing + GEMM 1 + GEMM 2 run twice on the same routed rows, once with the
// mma.sync kernels on unfolded weights (E8M0 block scales) and once with the wgmma kernels on
// folded weights (shifts + column factors), for both tile shapes, on the tiny shape and the
// deepseek-v4-flash shape (fewer experts), at T = 1, 7, 300 and more, with -1 holes, an idle
// expert and one expert taking every row; outputs NaN-poisoned before each run. Both sides
// compute the same exact k32 products in fp32, so h (dequantized) and o agree to the
// same-recipe threshold; the share of bitwise-equal bytes is printed. GEMM 2 is compared on the
// same h (isolating it) and along the whole chain. Then 20 reruns must be bitwise identical.
// The bf16 wgmma with the weights in registers (rs, sm90_rs16_mainloop.cuh) runs as one
// more variant: its activations converted from the same Q8 to bf16 first, its products exact and
// summed over all of K, so it meets the same threshold; its four-consumer form
// (sm90_rs16_wide_mainloop.cuh) must give bitwise its outputs. So do the FP8 wgmma kernels with the
// weights in registers (rs fp8, sm90_mxfp4_rs_fp8_mainloop.cuh), on m tiles of 64 and 96 tokens:
// the FP8 wgmma products and promotion on the transposed tile.
//
// The weight paths of the rs fp8 kernels (cp.async, bulk copies, registers) must give bitwise
// the same outputs; the deep decode kernels bitwise those of the regular ones. The harness
// (shapes, weights, routing, the runs, the metrics) is gemm_harness.h.
//
// Layer level: the layer forced onto the wgmma kernels (KernelOverrides::gemm = wgmma) against the CPU
// layer on the tiny preset and deepseek-v4-flash (T = 1, 7, 300, 1024, 4096, 6144, a subset of rows for the
// large ones), structured routings, and 20 bitwise reruns; nvfp4's f16 wgmma kernels likewise.
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "cuda/plan.h"
#include "cuda/sm90_config.h"
#include "cuda/sm90_pipeline.h"
#include "cuda_test_util.h"
#include "gemm_harness.h"
#include "moe_ep/backend.h"
#include "moe_ep/formats.h"
#include "testing/presets.h"

namespace moe_ep::cuda {
namespace {

using namespace gemmtest;
void compare_kernels(const Shape& s, const std::vector<RoutingCase>& cases, uint64_t seed) {
  const DeviceWeights& w = cached_device_weights(s, seed);
  const double tol = cudatest::wgmma_recipe_tolerance();
  for (const RoutingCase& c : cases) {
    const DeviceProblem p = make_problem(s, make_inputs(s, c, seed + static_cast<uint64_t>(c.T)));
    GemmRun mma(s, p, w, Kernels{});
    mma.gemm1();
    mma.gemm2();
    const GemmOutputs ref = mma.outputs();
    std::map<int, GemmOutputs> rs_fp8_chain;  // block_m -> the cp.async rs fp8 kernel's outputs
    std::optional<GemmOutputs> rs_bf16_chain;  // the two-consumer rs bf16 kernel's
    for (const Kernels& k : wgmma_variants()) {
      SCOPED_TRACE(fmt::format("{} {} T={} {}", s.name, c.name, c.T, k.name()));
      GemmRun run(s, p, w, k);
      run.gemm1();
      run.gemm2(&mma);  // GEMM 2 alone, on the mma.sync h
      const GemmOutputs same_h = run.outputs();
      run.poison();
      run.gemm1();
      run.gemm2();
      const GemmOutputs chain = run.outputs();
      const double err_h = rel_err_h(same_h, ref);
      const double err_o2 = rel_err_o(same_h, ref);
      const double err_chain = rel_err_o(chain, ref);
      EXPECT_LE(err_h, tol) << "GEMM 1 h";
      EXPECT_LE(err_o2, tol) << "GEMM 2 on the same h";
      EXPECT_LE(err_chain, tol) << "GEMM 1 + GEMM 2";
      EXPECT_EQ(chain.h.size(), ref.h.size());
      // Every weight path gives the rs fp8 kernel the same words, so the same products and sums;
      // four consumer warpgroups split the same rows differently over the same sums, and narrow
      // tail tiles compute their rows' columns alone. The reference: the two-consumer cp.async
      // kernel of each m tile.
      const bool rs_fp8_reference = k.rs_fp8_block_m > 0 && !k.rs_fp8_probe() && k.rs_fp8_tails == 0;
      if (rs_fp8_reference)
        rs_fp8_chain[k.rs_fp8_block_m] = chain;
      else if (k.rs_fp8_block_m > 0) {
        const GemmOutputs& plain = rs_fp8_chain.at(k.rs_fp8_block_m);
        EXPECT_TRUE(chain.h == plain.h && chain.h_scale == plain.h_scale && chain.o == plain.o)
            << "the weight path, the consumer count or the narrow tail tiles changed the outputs";
      }
      // The four-consumer rs bf16 kernel: the same exact products summed in the same k order.
      if (k.rs && !k.rs_wide) rs_bf16_chain = chain;
      if (k.rs && k.rs_wide) {  // either group size
        ASSERT_TRUE(rs_bf16_chain.has_value()) << "the two-consumer rs bf16 kernel runs first";
        EXPECT_TRUE(chain.h == rs_bf16_chain->h && chain.h_scale == rs_bf16_chain->h_scale && chain.o == rs_bf16_chain->o)
            << "four consumers changed the rs bf16 kernel's outputs";
      }
      fmt::print("[ wgmma   ] {:<10} {:<22} T={:<5} {:<12} rows={:<6} h err={:.2e} (bytes equal {:.4f}, scales "
                 "{:.4f})  o err={:.2e} (equal {:.4f})  chain err={:.2e}\n",
                 s.name, c.name, c.T, k.name(), ref.h.size() / s.I, err_h, equal_share(same_h.h, ref.h),
                 equal_share(same_h.h_scale, ref.h_scale), err_o2, equal_share(same_h.o, ref.o), err_chain);
    }
  }
}

// The selected config (cuda/sm90_config.h) is host arithmetic: which kernels run for which T.
MoeDesc flash_desc(Recipe recipe = Recipe::kMxfp4) {
  MoeDesc d;
  d.fleet = {256, 8192, 4096};
  d.recipe = recipe;
  d.intermediate_size = 2048;
  d.top_k = 6;
  d.activation_clamp = 10.0f;
  return d;
}

Sm90Facts all_available() {
  Sm90Facts f;
  f.sm_count = 132;
  f.w13_folded = f.w2_folded = true;
  f.decode_blocks_per_sm[0] = f.decode_blocks_per_sm[1] = 2;
  f.decode_deep_blocks_per_sm[0] = f.decode_deep_blocks_per_sm[1] = 2;
  f.decode_split_blocks_per_sm[0] = f.decode_split_blocks_per_sm[1] = 3;
  f.mma_blocks_per_sm[0] = f.mma_blocks_per_sm[1] = 1;
  f.wgmma_blocks_per_sm[0] = f.wgmma_blocks_per_sm[1] = 1;
  f.wgmma_bf16_blocks_per_sm[0] = f.wgmma_bf16_blocks_per_sm[1] = 1;
  f.wgmma_bf16_wide_blocks_per_sm[0] = f.wgmma_bf16_wide_blocks_per_sm[1] = 1;
  f.wgmma_rs_blocks_per_sm[0] = f.wgmma_rs_blocks_per_sm[1] = 1;
  f.wgmma_rs_wide_blocks_per_sm[0] = f.wgmma_rs_wide_blocks_per_sm[1] = 1;
  f.gemm1_bf16_128_blocks_per_sm = 1;
  f.nvfp4_wgmma_blocks_per_sm[0] = f.nvfp4_wgmma_blocks_per_sm[1] = 1;
  f.nvfp4_wgmma_wide_blocks_per_sm[0] = f.nvfp4_wgmma_wide_blocks_per_sm[1] = 1;
  return f;
}

Sm90Config selected(const MoeDesc& d, const KernelOverrides& o, const Sm90Facts& f = all_available()) {
  Sm90Config c = select_sm90_load_config(d, o);
  select_sm90_kernels(c, d, o, f);
  return c;
}

// The buckets cover T = 0 .. max_tokens_per_rank once, in order (Sm90Config::bucket() reads only
// their ends).
void expect_contiguous(const Sm90Config& c, const MoeDesc& d) {
  ASSERT_FALSE(c.buckets.empty());
  EXPECT_EQ(c.buckets.front().min_tokens, 0);
  for (size_t i = 0; i < c.buckets.size(); ++i) {
    EXPECT_LE(c.buckets[i].min_tokens, c.buckets[i].max_tokens) << "bucket " << i;
    if (i > 0) {
      EXPECT_EQ(c.buckets[i].min_tokens, c.buckets[i - 1].max_tokens + 1) << "bucket " << i;
    }
  }
  EXPECT_EQ(c.buckets.back().max_tokens, d.fleet.max_tokens_per_rank);
}

// The entries of a config (or the plan lines of a pipeline) as `Layer::info().config` prints them.
template <class Described>
std::string described(const Described& d) {
  SelectedConfig out;
  d.describe(out);
  return out.str();
}

template <class F>
void expect_refused(F&& f, ErrorCode code, const std::string& part) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one naming '" << part << "'";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << e.message();
    EXPECT_NE(e.message().find(part), std::string::npos) << e.message();
  }
}

TEST(Sm90Config, KernelsPerTBucketFollowTheThresholdsAndAvailability) {
  using G = Sm90Gemm;
  const MoeDesc d = flash_desc();
  const Sm90Config c = selected(d, {});
  // mxfp4's decode bound: kDecodeMaxTokens, or kDecodeMaxRowsPerExpert rows per expert where larger.
  const int64_t decode_max = mxfp4_decode_max_tokens(d);
  EXPECT_EQ(decode_max, kDecodeMaxRowsPerExpert * 256 / 6);  // flash: E = 256, K = 6: T = 640
  MoeDesc pro_like = d;
  pro_like.fleet.num_experts = 384;
  EXPECT_EQ(mxfp4_decode_max_tokens(pro_like), 960);
  MoeDesc few = d;
  few.fleet.num_experts = 8;
  EXPECT_EQ(mxfp4_decode_max_tokens(few), kDecodeMaxTokens);
  // decode with K split at T = 1, decode, wgmma-rs 64x256 with narrow tail tiles up to
  // kNarrowTailsMaxRowsPerExpert rows per expert, then wgmma-rs 64x256 with GEMM 1 on bf16
  // wgmma's 128x256 tiles (odd last 64-row tiles on 64-token ones) where gemm1_bf16_pays
  // (68.1-128.5 and from 186.6 rows per expert), else plain: flash (E = 256, K = 6, up to T =
  // 8192) 64-68.1 rows plain, bf16, plain, bf16.
  const int64_t narrow_max = kNarrowTailsMaxRowsPerExpert * 256 / 6;  // flash: T = 2730
  ASSERT_EQ(c.buckets.size(), 7u);
  EXPECT_FALSE(c.bucket(narrow_max).gemm1_bf16);
  EXPECT_FALSE(c.bucket(narrow_max + 1).gemm1_bf16);  // 64 rows: the 64-row tiles are as few
  EXPECT_TRUE(c.bucket(4096).gemm1_bf16);   // 96 rows: one 128-token tile against two 64-row ones
  EXPECT_FALSE(c.bucket(6144).gemm1_bf16);  // 144 rows: a pair and an odd last tile cost three
  EXPECT_TRUE(c.bucket(8192).gemm1_bf16);   // 192 rows: half the experts two pairs
  for (double rows = 69; rows < 128; rows += 0.5) EXPECT_TRUE(gemm1_bf16_pays(rows)) << rows;
  for (double rows = 130; rows < 186; rows += 0.5) EXPECT_FALSE(gemm1_bf16_pays(rows)) << rows;
  for (double rows = 187; rows < 400; rows += 0.5) EXPECT_TRUE(gemm1_bf16_pays(rows)) << rows;
  EXPECT_NEAR(expected_gemm1_bf16_cost(96), kGemm1Bf16TileCost, 0.01);
  EXPECT_NEAR(expected_gemm1_bf16_cost(160), kGemm1Bf16TileCost + kGemm1Bf16OddTileCost, 0.01);
  for (const int64_t T : {int64_t{4096}, int64_t{6144}, int64_t{8192}}) {
    EXPECT_EQ(c.bucket(T).gemm, G::kWgmmaRs);
    EXPECT_EQ(c.bucket(T).block_m, 64);
    EXPECT_EQ(c.bucket(T).block_n, kRsFp8WideBlockN);
  }
  // The rule: expected tiles of an expert under random routing.
  EXPECT_NEAR(expected_expert_tiles(96, 64), 2.0, 0.01);
  EXPECT_NEAR(expected_expert_tiles(96, 128), 1.0, 0.01);
  EXPECT_NEAR(expected_expert_tiles(192, 64), 3.5, 0.02);
  EXPECT_FALSE(gemm1_bf16_pays(60));  // the narrow buckets' rows
  EXPECT_TRUE(c.bucket(decode_max + 1).narrow_tails);
  EXPECT_TRUE(c.bucket(narrow_max).narrow_tails);
  EXPECT_EQ(c.bucket(narrow_max + 1).gemm, G::kWgmmaRs);
  EXPECT_EQ(c.bucket(narrow_max + 1).block_n, kRsFp8WideBlockN);
  EXPECT_FALSE(c.bucket(narrow_max + 1).narrow_tails);
  EXPECT_FALSE(c.bucket(1).narrow_tails);
  EXPECT_EQ(c.bucket(1).gemm, G::kDecode);
  EXPECT_EQ(c.bucket(kDecodeSplitMaxTokens).decode_split, 2);
  EXPECT_EQ(c.bucket(kDecodeSplitMaxTokens + 1).gemm, G::kDecode);
  EXPECT_EQ(c.bucket(kDecodeSplitMaxTokens + 1).decode_split, 1);
  EXPECT_EQ(c.bucket(decode_max).gemm, G::kDecode);
  EXPECT_EQ(c.bucket(decode_max + 1).gemm, G::kWgmmaRs);
  EXPECT_EQ(c.bucket(8192).gemm, G::kWgmmaRs);
  EXPECT_EQ(c.bucket(1).block_m, kDecodeBlockM);
  EXPECT_EQ(c.bucket(1).block_n, 0);
  EXPECT_EQ(c.bucket(8192).block_m, 64);
  EXPECT_EQ(c.bucket(8192).block_n, kRsFp8WideBlockN);
  const std::string auto_out = described(c);
  EXPECT_NE(auto_out.find(fmt::format("wgmma_rs = auto from T = {} on 64x256 tiles", decode_max + 1)),
            std::string::npos) << auto_out;
  EXPECT_NE(auto_out.find("by override (overrides.gemm = wgmma; auto takes wgmma-rs)"), std::string::npos)
      << auto_out;
  EXPECT_NE(auto_out.find(fmt::format("tiles of <= 48 rows on n48 after the others up to T = {}", narrow_max)), std::string::npos)
      << auto_out;
  EXPECT_NE(auto_out.find(fmt::format("GEMM 1 on bf16 wgmma over 128x256 tiles (blocks/SM 1) at T = {}..{}",
                                      c.bucket(4096).min_tokens, c.bucket(4096).max_tokens)),
            std::string::npos)
      << auto_out;
  // Without the 128x256 GEMM 1 kernel (it did not fit): wgmma-rs 64x256 throughout.
  Sm90Facts no_bf16 = all_available();
  no_bf16.gemm1_bf16_128_blocks_per_sm = 0;
  const Sm90Config nb = selected(d, {}, no_bf16);
  EXPECT_EQ(nb.buckets.size(), 4u);
  EXPECT_FALSE(nb.bucket(8192).gemm1_bf16);
  EXPECT_EQ(nb.bucket(8192).gemm, G::kWgmmaRs);
  EXPECT_EQ(described(nb).find("GEMM 1 on bf16"), std::string::npos);
  // Nor with caller-quantized x (an expert-parallel rank's received slots): the conversion would
  // cover every row passed.
  MoeDesc caller_q = d;
  caller_q.quantize_input = false;
  const Sm90Config cq = selected(caller_q, {});
  EXPECT_FALSE(cq.bucket(4096).gemm1_bf16);
  EXPECT_FALSE(cq.bucket(8192).gemm1_bf16);
  EXPECT_EQ(cq.bucket(8192).gemm, G::kWgmmaRs);
  // FP8 wgmma where the four-consumer tile does not fit, or where overrides.tile pins its tile.
  Sm90Facts no_wide_tile = all_available();
  no_wide_tile.wgmma_rs_wide_blocks_per_sm[0] = 0;
  const Sm90Config nw = selected(d, {}, no_wide_tile);
  EXPECT_EQ(nw.bucket(8192).gemm, G::kWgmma);
  EXPECT_EQ(nw.bucket(8192).block_m, wgmma_tile_shape(kWgmmaDefaultTile).block_m);
  const std::string nw_out = described(nw);
  EXPECT_NE(nw_out.find(fmt::format("auto from T = {}", decode_max + 1)), std::string::npos) << nw_out;
  EXPECT_NE(nw_out.find("not in auto (the kernels do not fit on this device)"), std::string::npos)
      << nw_out;
  KernelOverrides tile_pin;
  tile_pin.tile = {128, 128};
  const Sm90Config tp = selected(d, tile_pin);
  EXPECT_EQ(tp.bucket(8192).gemm, G::kWgmma);
  EXPECT_EQ(tp.bucket(8192).block_m, 128);

  MoeDesc exact = d;
  exact.numerics.exact_accumulation = true;
  EXPECT_EQ(selected(exact, {}).bucket(decode_max + 1).gemm, G::kMma);
  EXPECT_EQ(selected(exact, {}).bucket(1).gemm, G::kDecode);
  EXPECT_EQ(selected(exact, {}).bucket(1).decode_split, 1);  // the split's sums are not the CPU's

  KernelOverrides low;  // the decode limit below the wgmma threshold: mma.sync fills the gap
  low.decode_max_tokens = 16;
  const Sm90Config l = selected(d, low);
  EXPECT_EQ(l.bucket(16).gemm, G::kDecode);
  EXPECT_EQ(l.bucket(17).gemm, G::kMma);
  EXPECT_EQ(l.bucket(kWgmmaMinTokens - 1).gemm, G::kMma);
  EXPECT_EQ(l.bucket(kWgmmaMinTokens).gemm, G::kWgmmaRs);

  Sm90Facts unfolded = all_available();
  unfolded.w2_folded = false;
  EXPECT_EQ(selected(d, {}, unfolded).bucket(8192).gemm, G::kMma);
  Sm90Facts no_decode = all_available();
  no_decode.decode_unavailable = "too large";
  const Sm90Config nd = selected(d, {}, no_decode);
  EXPECT_EQ(nd.bucket(300).gemm, G::kMma);  // the decode range falls back to mma.sync
  EXPECT_EQ(nd.bucket(decode_max + 1).gemm, G::kWgmmaRs);

  KernelOverrides forced;
  for (const GemmKernel k : {GemmKernel::kDecode, GemmKernel::kMma, GemmKernel::kWgmma}) {
    forced.gemm = k;
    const Sm90Config f = selected(d, forced);
    ASSERT_EQ(f.buckets.size(), k == GemmKernel::kDecode ? 2u : 1u);  // decode: T = 1 splits K
    EXPECT_EQ(f.bucket(1).gemm, k == GemmKernel::kDecode ? G::kDecode : k == GemmKernel::kMma ? G::kMma : G::kWgmma);
    EXPECT_EQ(f.bucket(8192).gemm, f.bucket(1).gemm);
  }
  // wgmma-bf16 runs by override only (its gain at T = 8192 does not pay for its bf16 h), every
  // T, 128-row m tiles.
  EXPECT_FALSE(selected(d, {}).uses_16bit_activations());
  forced.gemm = GemmKernel::kWgmmaBf16;
  const Sm90Config bf16 = selected(d, forced);
  ASSERT_EQ(bf16.buckets.size(), 1u);
  EXPECT_EQ(bf16.bucket(1).gemm, G::kWgmmaBf16);
  EXPECT_EQ(bf16.bucket(8192).block_m, kRsBlockM);
  EXPECT_EQ(bf16.bucket(8192).block_n, 0);
  EXPECT_TRUE(bf16.uses_16bit_activations());
  // Its four-consumer form by overrides.tile = 64x256.
  forced.tile = {kRsWideBlockM, kRsWideBlockN};
  const Sm90Config bf16_wide = selected(d, forced);
  ASSERT_EQ(bf16_wide.buckets.size(), 1u);
  EXPECT_EQ(bf16_wide.bucket(1).gemm, G::kWgmmaBf16);
  EXPECT_EQ(bf16_wide.bucket(8192).block_m, kRsWideBlockM);
  EXPECT_EQ(bf16_wide.bucket(8192).block_n, kRsWideBlockN);
  EXPECT_NE(described(bf16_wide).find("wgmma_bf16 = available by override (overrides.gemm = wgmma-bf16): 64x256 "
                                         "tiles (four consumer warpgroups)"),
            std::string::npos);
  forced.tile = {};
  // wgmma-rs by override: 64-token m tiles below kWgmmaRsWideMinTokens, 96 from there (one
  // bucket each); overrides.tile pins one of them for every T.
  forced.gemm = GemmKernel::kWgmmaRs;
  const Sm90Config rs = selected(d, forced);
  ASSERT_EQ(rs.buckets.size(), 2u);
  EXPECT_EQ(rs.bucket(1).gemm, G::kWgmmaRs);
  EXPECT_EQ(rs.bucket(kWgmmaRsWideMinTokens - 1).block_m, 64);
  EXPECT_EQ(rs.bucket(kWgmmaRsWideMinTokens).gemm, G::kWgmmaRs);
  EXPECT_EQ(rs.bucket(8192).block_m, 96);
  EXPECT_FALSE(rs.uses_16bit_activations());
  forced.tile = {96, 128};
  const Sm90Config rs96 = selected(d, forced);
  ASSERT_EQ(rs96.buckets.size(), 1u);
  EXPECT_EQ(rs96.bucket(1).block_m, 96);
  // 64x256: four consumer warpgroups on 64-token tiles, every T; refused where they do not fit.
  forced.tile = {64, 256};
  const Sm90Config rs_wide = selected(d, forced);
  ASSERT_EQ(rs_wide.buckets.size(), 1u);
  EXPECT_FALSE(rs_wide.bucket(1024).narrow_tails);  // the override pins the plain form
  EXPECT_FALSE(rs_wide.bucket(8192).gemm1_bf16);    // and FP8 for both GEMMs
  EXPECT_EQ(rs_wide.bucket(8192).block_m, 64);
  EXPECT_EQ(rs_wide.wgmma_rs_block_n, kRsFp8WideBlockN);
  EXPECT_EQ(rs_wide.bucket(1).block_n, kRsFp8WideBlockN);
  EXPECT_EQ(rs.bucket(1).block_n, kRsFp8BlockN);
  const std::string wide_out = described(rs_wide);
  EXPECT_NE(wide_out.find("wgmma_rs = available by override (overrides.gemm = wgmma-rs): 64x256 tiles"),
            std::string::npos) << wide_out;
  Sm90Facts no_wide = all_available();
  no_wide.wgmma_rs_wide_blocks_per_sm[1] = 0;
  expect_refused([&] { selected(d, forced, no_wide); }, ErrorCode::kUnsupported,
                 "the wgmma-rs GEMMs cannot run this layer: the kernels do not fit on this device");
  MoeDesc narrow = d;
  narrow.intermediate_size = 1088;  // 2I = 2176: tiles of 128, not of 256
  expect_refused([&] { selected(narrow, forced); }, ErrorCode::kUnsupported,
                 "hidden = 4096 and 2 * intermediate = 2176 must be multiples of 256");
  forced.tile = {96, 256};
  expect_refused([&] { selected(d, forced); }, ErrorCode::kUnsupported,
                 "overrides.tile = 96x256 is not a wgmma-rs tile of SM90; allowed: 64x128, 96x128, 64x256");
  forced.tile = {};
  EXPECT_STREQ(sm90_gemm_name(G::kWgmmaRs), "wgmma-rs");
  // nvfp4 auto: its decode kernels below nvfp4_wgmma_min_tokens (22 rows per expert: flash T =
  // 938), its f16 wgmma kernels from there (64x256 tiles where they fit, else 128x128);
  // decode_max_tokens moves the boundary; mma.sync between where decode cannot run, and above the
  // decode bucket where wgmma cannot.
  const MoeDesc nv_flash = flash_desc(Recipe::kNvfp4);
  EXPECT_EQ(nvfp4_wgmma_min_tokens(nv_flash), 938);
  const Sm90Config nv = selected(nv_flash, {});
  expect_contiguous(nv, nv_flash);
  ASSERT_EQ(nv.buckets.size(), 3u);  // decode with K split in two at T = 1, decode, 64x256
  EXPECT_EQ(nv.bucket(1).gemm, G::kNvfp4Decode);
  EXPECT_EQ(nv.bucket(1).block_m, kDecodeBlockM);
  EXPECT_EQ(nv.bucket(1).decode_split, 2);
  EXPECT_EQ(nv.bucket(2).decode_split, 1);
  EXPECT_EQ(nv.bucket(937).gemm, G::kNvfp4Decode);
  EXPECT_EQ(nv.bucket(938).gemm, G::kNvfp4Wgmma);
  EXPECT_EQ(nv.bucket(938).min_tokens, 938);
  EXPECT_EQ(nv.bucket(938).block_m, kRsWideBlockM);
  EXPECT_EQ(nv.bucket(938).block_n, kRsWideBlockN);
  EXPECT_EQ(nv.bucket(8192).gemm, G::kNvfp4Wgmma);
  EXPECT_EQ(nv.bucket(8192).block_n, kRsWideBlockN);
  EXPECT_EQ(nv.bucket(8192).block_m, kRsWideBlockM);
  EXPECT_TRUE(nv.uses_16bit_activations());
  EXPECT_EQ(nv.decode_max_tokens, 937);  // the decode bucket's end, as described
  const std::string nv_out = described(nv);
  EXPECT_NE(nv_out.find("16x128 tiles, auto up to T = 937"), std::string::npos) << nv_out;
  EXPECT_NE(nv_out.find("auto from T = 938, 64x256 tiles: f16 wgmma"),
            std::string::npos) << nv_out;
  Sm90Facts nv_no_wide = all_available();  // no 64x256 form: 128x128 from T = 938
  nv_no_wide.nvfp4_wgmma_wide_blocks_per_sm[0] = 0;
  const Sm90Config nvt = selected(nv_flash, {}, nv_no_wide);
  expect_contiguous(nvt, nv_flash);
  ASSERT_EQ(nvt.buckets.size(), 3u);
  EXPECT_EQ(nvt.bucket(938).block_m, kRsBlockM);
  EXPECT_NE(described(nvt).find("auto from T = 938, 128x128 tiles"), std::string::npos) << described(nvt);
  MoeDesc nv_wide_shape = nv_flash;  // 2I = 4224: n tiles of 128, not of 256: 128x128 from T = 938
  nv_wide_shape.intermediate_size = 2048 + 64;
  const Sm90Config nvw_shape = selected(nv_wide_shape, {});
  expect_contiguous(nvw_shape, nv_wide_shape);
  EXPECT_EQ(nvw_shape.bucket(938).gemm, G::kNvfp4Wgmma);
  EXPECT_EQ(nvw_shape.bucket(938).block_n, 0);
  MoeDesc nv_mid = nv_flash;  // a fleet of 2048 tokens a rank: the 64x256 bucket ends there
  nv_mid.fleet.max_tokens_per_rank = 2048;
  const Sm90Config nvmid = selected(nv_mid, {});
  expect_contiguous(nvmid, nv_mid);
  ASSERT_EQ(nvmid.buckets.size(), 3u);
  EXPECT_EQ(nvmid.bucket(2048).block_n, kRsWideBlockN);
  EXPECT_NE(described(nvmid).find("auto from T = 938, 64x256 tiles:"), std::string::npos) << described(nvmid);
  MoeDesc nv_wide_e = nv_flash;  // E = 512, top_k 4: 22 rows per expert at T = 2816, past the decode end
  nv_wide_e.fleet.num_experts = 512;
  nv_wide_e.top_k = 4;
  const Sm90Config nve = selected(nv_wide_e, {});
  expect_contiguous(nve, nv_wide_e);
  EXPECT_EQ(nve.bucket(kNvfp4DecodeMaxTokens).gemm, G::kNvfp4Decode);
  EXPECT_EQ(nve.bucket(kNvfp4DecodeMaxTokens + 1).gemm, G::kNvfp4Mma);
  EXPECT_EQ(nve.bucket(2815).gemm, G::kNvfp4Mma);
  EXPECT_EQ(nve.bucket(2816).gemm, G::kNvfp4Wgmma);
  MoeDesc nv_pro = nv_flash;  // E = 384: 22 rows per expert at T = 1408
  nv_pro.fleet.num_experts = 384;
  EXPECT_EQ(selected(nv_pro, {}).bucket(1407).gemm, G::kNvfp4Decode);
  EXPECT_EQ(selected(nv_pro, {}).bucket(1408).gemm, G::kNvfp4Wgmma);
  KernelOverrides nv_boundary;
  nv_boundary.decode_max_tokens = 100;  // the decode end alone: mma.sync up to the wgmma bucket
  EXPECT_EQ(selected(nv_flash, nv_boundary).bucket(100).gemm, G::kNvfp4Decode);
  EXPECT_EQ(selected(nv_flash, nv_boundary).bucket(101).gemm, G::kNvfp4Mma);
  EXPECT_EQ(selected(nv_flash, nv_boundary).bucket(938).gemm, G::kNvfp4Wgmma);
  expect_contiguous(selected(nv_flash, nv_boundary), nv_flash);
  nv_boundary.decode_max_tokens = 1500;
  EXPECT_EQ(selected(nv_flash, nv_boundary).bucket(1500).gemm, G::kNvfp4Decode);
  EXPECT_EQ(selected(nv_flash, nv_boundary).bucket(1501).gemm, G::kNvfp4Wgmma);
  expect_contiguous(selected(nv_flash, nv_boundary), nv_flash);
  nv_boundary.decode_max_tokens = 6000;  // far past 938: 64x256 from T = 6001
  EXPECT_EQ(selected(nv_flash, nv_boundary).bucket(6000).gemm, G::kNvfp4Decode);
  EXPECT_EQ(selected(nv_flash, nv_boundary).bucket(6001).gemm, G::kNvfp4Wgmma);
  EXPECT_EQ(selected(nv_flash, nv_boundary).bucket(6001).block_n, kRsWideBlockN);
  expect_contiguous(selected(nv_flash, nv_boundary), nv_flash);
  Sm90Facts nv_no_decode = all_available();
  nv_no_decode.decode_unavailable = "16 rows of A do not fit";
  const Sm90Config nvm = selected(nv_flash, {}, nv_no_decode);
  expect_contiguous(nvm, nv_flash);
  ASSERT_EQ(nvm.buckets.size(), 2u);
  EXPECT_EQ(nvm.bucket(1).gemm, G::kNvfp4Mma);
  EXPECT_EQ(nvm.bucket(937).gemm, G::kNvfp4Mma);
  EXPECT_EQ(nvm.bucket(938).gemm, G::kNvfp4Wgmma);
  Sm90Facts nv_no_wgmma = all_available();
  nv_no_wgmma.nvfp4_wgmma_blocks_per_sm[1] = 0;
  const Sm90Config nvn = selected(nv_flash, {}, nv_no_wgmma);
  expect_contiguous(nvn, nv_flash);
  ASSERT_EQ(nvn.buckets.size(), 3u);
  EXPECT_EQ(nvn.bucket(kNvfp4DecodeMaxTokens).gemm, G::kNvfp4Decode);
  EXPECT_EQ(nvn.bucket(kNvfp4DecodeMaxTokens + 1).gemm, G::kNvfp4Mma);
  EXPECT_EQ(nvn.bucket(8192).block_m, kGemmBlockM);
  EXPECT_FALSE(nvn.uses_16bit_activations());
  MoeDesc nv_exact = nv_flash;  // exact accumulation: no wgmma bucket in auto
  nv_exact.numerics.exact_accumulation = true;
  EXPECT_EQ(selected(nv_exact, {}).bucket(8192).gemm, G::kNvfp4Mma);
  expect_contiguous(selected(nv_exact, {}), nv_exact);
  EXPECT_NE(described(selected(nv_exact, {})).find("by override (overrides.gemm = wgmma"), std::string::npos);
  EXPECT_FALSE(selected(nv_exact, {}).uses_16bit_activations());
  MoeDesc nv_small = nv_flash;  // a fleet of at most 512 tokens a rank never reaches the wgmma bucket
  nv_small.fleet.max_tokens_per_rank = 512;
  ASSERT_EQ(selected(nv_small, {}).buckets.size(), 2u);  // decode, with K split in two at T = 1
  expect_contiguous(selected(nv_small, {}), nv_small);
  EXPECT_FALSE(selected(nv_small, {}).uses_16bit_activations());
  KernelOverrides nv_mma;
  nv_mma.gemm = GemmKernel::kMma;
  ASSERT_EQ(selected(flash_desc(Recipe::kNvfp4), nv_mma).buckets.size(), 1u);
  EXPECT_EQ(selected(flash_desc(Recipe::kNvfp4), nv_mma).bucket(1).gemm, G::kNvfp4Mma);
  KernelOverrides nv_decode;
  nv_decode.gemm = GemmKernel::kDecode;
  const Sm90Config nvd = selected(flash_desc(Recipe::kNvfp4), nv_decode);
  ASSERT_EQ(nvd.buckets.size(), 2u);  // T = 1 splits K, as for mxfp4
  EXPECT_EQ(nvd.bucket(1).gemm, G::kNvfp4Decode);
  EXPECT_EQ(nvd.bucket(1).decode_split, 2);
  EXPECT_EQ(nvd.bucket(2).gemm, G::kNvfp4Decode);
  EXPECT_EQ(nvd.bucket(8192).block_m, kDecodeBlockM);
  EXPECT_STREQ(sm90_gemm_name(G::kNvfp4Decode), "nvfp4-decode");
  // nvfp4's f16 wgmma kernels by override (overrides.gemm = wgmma; fold_fp8 does not concern
  // nvfp4): every T, 128-row m tiles, 16-bit activations in the workspace.
  KernelOverrides nv_wgmma;
  nv_wgmma.gemm = GemmKernel::kWgmma;
  const Sm90Config nvw = selected(flash_desc(Recipe::kNvfp4), nv_wgmma);
  ASSERT_EQ(nvw.buckets.size(), 1u);
  EXPECT_EQ(nvw.bucket(1).gemm, G::kNvfp4Wgmma);
  EXPECT_EQ(nvw.bucket(8192).block_m, kRsBlockM);
  EXPECT_TRUE(nvw.uses_16bit_activations());
  nv_wgmma.fold_fp8 = false;
  EXPECT_EQ(selected(flash_desc(Recipe::kNvfp4), nv_wgmma).bucket(1).gemm, G::kNvfp4Wgmma);
  EXPECT_STREQ(sm90_gemm_name(G::kNvfp4Wgmma), "nvfp4-wgmma");

  KernelOverrides tile;
  tile.tile = {128, 128};
  EXPECT_EQ(selected(d, tile).wgmma_tile, WgmmaTile::k128x128);
  EXPECT_EQ(selected(d, tile).bucket(8192).block_m, 128);
}

TEST(Sm90Config, OverridesThatCannotBeHonouredAreRefusedNamingThem) {
  const MoeDesc d = flash_desc();
  KernelOverrides wgmma;
  wgmma.gemm = GemmKernel::kWgmma;
  MoeDesc exact = d;
  exact.numerics.exact_accumulation = true;
  // An explicit exact_accumulation is never beaten by a kernel override.
  expect_refused([&] { select_sm90_load_config(exact, wgmma); }, ErrorCode::kInvalidArgument,
                 "contradicts desc.numerics.exact_accumulation");
  Sm90Facts unfolded = all_available();
  unfolded.w13_folded = false;
  expect_refused([&] { selected(d, wgmma, unfolded); }, ErrorCode::kUnsupported, "overrides.gemm = wgmma");
  KernelOverrides no_fold = wgmma;
  no_fold.fold_fp8 = false;
  expect_refused([&] { select_sm90_load_config(d, no_fold); }, ErrorCode::kUnsupported, "fold_fp8 = false");
  KernelOverrides decode;
  decode.gemm = GemmKernel::kDecode;
  Sm90Facts no_decode = all_available();
  no_decode.decode_unavailable = "16 rows of A do not fit";
  expect_refused([&] { selected(d, decode, no_decode); }, ErrorCode::kUnsupported, "16 rows of A do not fit");
  // nvfp4 has its own decode kernels; they too can be unavailable.
  expect_refused([&] { selected(flash_desc(Recipe::kNvfp4), decode, no_decode); }, ErrorCode::kUnsupported,
                 "the nvfp4 decode GEMMs cannot run this layer: 16 rows of A do not fit");
  KernelOverrides nv_wgmma;
  nv_wgmma.gemm = GemmKernel::kWgmma;
  MoeDesc nv_exact = flash_desc(Recipe::kNvfp4);
  nv_exact.numerics.exact_accumulation = true;
  expect_refused([&] { select_sm90_load_config(nv_exact, nv_wgmma); }, ErrorCode::kInvalidArgument,
                 "overrides.gemm = wgmma contradicts desc.numerics.exact_accumulation");
  Sm90Facts nv_no_fit = all_available();
  nv_no_fit.nvfp4_wgmma_blocks_per_sm[1] = 0;
  expect_refused([&] { selected(flash_desc(Recipe::kNvfp4), nv_wgmma, nv_no_fit); }, ErrorCode::kUnsupported,
                 "overrides.gemm = wgmma: the nvfp4 wgmma GEMMs cannot run this layer: the kernels do not fit");
  MoeDesc nv_odd = flash_desc(Recipe::kNvfp4);
  nv_odd.intermediate_size = 2048 + 32;
  expect_refused([&] { selected(nv_odd, nv_wgmma); }, ErrorCode::kUnsupported,
                 "must be multiples of 128");
  KernelOverrides tile;
  tile.tile = {96, 96};
  expect_refused([&] { select_sm90_load_config(d, tile); }, ErrorCode::kUnsupported, "allowed: 64x256, 128x128");
  // nvfp4: a tile only with overrides.gemm = wgmma, one of its two.
  expect_refused([&] { select_sm90_load_config(flash_desc(Recipe::kNvfp4), tile); }, ErrorCode::kUnsupported,
                 "overrides.tile = 96x96: recipe 'nvfp4' has a tile choice on SM90 only with overrides.gemm = wgmma");
  KernelOverrides nv_tile = nv_wgmma;
  nv_tile.tile = {96, 128};
  expect_refused([&] { selected(flash_desc(Recipe::kNvfp4), nv_tile); }, ErrorCode::kUnsupported,
                 "overrides.tile = 96x128 is not an nvfp4 wgmma tile of SM90; allowed: 128x128, 64x256");
  nv_tile.tile = {64, 256};
  const Sm90Config nv_wide = selected(flash_desc(Recipe::kNvfp4), nv_tile);
  ASSERT_EQ(nv_wide.buckets.size(), 1u);
  EXPECT_EQ(nv_wide.bucket(1).block_n, kRsWideBlockN);
  EXPECT_EQ(nv_wide.bucket(8192).block_m, kRsWideBlockM);
  Sm90Facts nv_wide_no_fit = all_available();
  nv_wide_no_fit.nvfp4_wgmma_wide_blocks_per_sm[1] = 0;
  expect_refused([&] { selected(flash_desc(Recipe::kNvfp4), nv_tile, nv_wide_no_fit); }, ErrorCode::kUnsupported,
                 "the nvfp4 wgmma GEMMs cannot run this layer: the kernels do not fit");
  MoeDesc nv_odd_wide = flash_desc(Recipe::kNvfp4);  // 2I = 4224: no 64x256 tiles
  nv_odd_wide.intermediate_size = 2048 + 64;
  expect_refused([&] { selected(nv_odd_wide, nv_tile); }, ErrorCode::kUnsupported, "must be multiples of 256");
  nv_tile.tile = {128, 128};
  EXPECT_EQ(selected(flash_desc(Recipe::kNvfp4), nv_tile).bucket(1).block_m, kRsBlockM);
  EXPECT_NE(described(selected(flash_desc(Recipe::kNvfp4), nv_tile)).find("every T (overrides.gemm), 128x128 tiles"),
            std::string::npos);

  KernelOverrides bf16;
  bf16.gemm = GemmKernel::kWgmmaBf16;
  expect_refused([&] { select_sm90_load_config(exact, bf16); }, ErrorCode::kInvalidArgument,
                 "overrides.gemm = wgmma-bf16 contradicts desc.numerics.exact_accumulation");
  expect_refused([&] { selected(d, bf16, unfolded); }, ErrorCode::kUnsupported,
                 "overrides.gemm = wgmma-bf16: the wgmma-bf16 GEMMs cannot run this layer: the weights are "
                 "not inside the FP8 window");
  KernelOverrides bf16_no_fold = bf16;
  bf16_no_fold.fold_fp8 = false;
  expect_refused([&] { select_sm90_load_config(d, bf16_no_fold); }, ErrorCode::kUnsupported,
                 "overrides.gemm = wgmma-bf16 needs folded weights");
  expect_refused([&] { select_sm90_load_config(flash_desc(Recipe::kNvfp4), bf16); }, ErrorCode::kUnsupported,
                 "allowed: auto, decode, mma, wgmma");
  Sm90Facts no_fit = all_available();
  no_fit.wgmma_bf16_blocks_per_sm[1] = 0;
  expect_refused([&] { selected(d, bf16, no_fit); }, ErrorCode::kUnsupported, "do not fit on this device");
  KernelOverrides bf16_wide = bf16;
  bf16_wide.tile = {64, 256};
  EXPECT_NO_THROW(selected(d, bf16_wide, no_fit));  // the other form's fit
  Sm90Facts no_wide_fit = all_available();
  no_wide_fit.wgmma_bf16_wide_blocks_per_sm[0] = 0;
  expect_refused([&] { selected(d, bf16_wide, no_wide_fit); }, ErrorCode::kUnsupported,
                 "overrides.gemm = wgmma-bf16: the wgmma-bf16 GEMMs cannot run this layer: the kernels do not fit");
  KernelOverrides bf16_tile = bf16;
  bf16_tile.tile = {96, 128};
  expect_refused([&] { select_sm90_load_config(d, bf16_tile); }, ErrorCode::kUnsupported,
                 "overrides.tile = 96x128 is not a wgmma-bf16 tile of SM90; allowed: 128x128, 64x256");

  KernelOverrides rs;
  rs.gemm = GemmKernel::kWgmmaRs;
  expect_refused([&] { select_sm90_load_config(exact, rs); }, ErrorCode::kInvalidArgument,
                 "overrides.gemm = wgmma-rs contradicts desc.numerics.exact_accumulation");
  expect_refused([&] { selected(d, rs, unfolded); }, ErrorCode::kUnsupported,
                 "overrides.gemm = wgmma-rs: the wgmma-rs GEMMs cannot run this layer: the weights are "
                 "not inside the FP8 window");
  KernelOverrides rs_tile = rs;
  rs_tile.tile = {128, 128};
  expect_refused([&] { select_sm90_load_config(d, rs_tile); }, ErrorCode::kUnsupported,
                 "overrides.tile = 128x128 is not a wgmma-rs tile of SM90; allowed: 64x128, 96x128");
  Sm90Facts rs_no_fit = all_available();
  rs_no_fit.wgmma_rs_blocks_per_sm[0] = 0;
  expect_refused([&] { selected(d, rs, rs_no_fit); }, ErrorCode::kUnsupported,
                 "the wgmma-rs GEMMs cannot run this layer: the kernels do not fit on this device");
}

// decode_split_k = 2 takes the decode kernels with K split in two per block (mxfp4's auto at T = 1,
// nvfp4's too); refused naming it where the decode kernels cannot run or do not fit,
// for K not whole chunks (mxfp4) or k steps (nvfp4) per half, with the deep form or the fused
// combine, and for a part count other than 1 or 2.
TEST(Sm90Config, DecodeSplitKOverride) {
  const MoeDesc d = flash_desc();
  const Sm90Config plain = selected(d, {});  // auto: the T = 1 bucket splits where it fits
  EXPECT_FALSE(plain.decode_split.has_value());
  EXPECT_EQ(plain.bucket(1).decode_split, 2);
  EXPECT_EQ(plain.bucket(2).decode_split, 1);
  const std::string plain_out = described(plain);
  EXPECT_NE(plain_out.find("; K split in two per block up to T = 1 (auto), blocks/SM 3 / 3"), std::string::npos)
      << plain_out;
  MoeDesc narrow_auto = d;  // K not whole chunks per half: auto does not split
  narrow_auto.intermediate_size = 1536;
  EXPECT_EQ(selected(narrow_auto, {}).bucket(1).decode_split, 1);
  Sm90Facts no_split_auto = all_available();  // the split kernels do not fit: auto does not split
  no_split_auto.decode_split_blocks_per_sm[1] = 0;
  EXPECT_EQ(selected(d, {}, no_split_auto).bucket(1).decode_split, 1);
  KernelOverrides deep_auto;  // the deep form has no split: auto does not split
  deep_auto.decode_prefetch = kDecodeDeepPrefetch;
  EXPECT_EQ(selected(d, deep_auto).bucket(1).decode_split, 1);
  KernelOverrides split;
  split.decode_split_k = 2;
  EXPECT_EQ(split.str(), "decode_split_k=2");
  const Sm90Config c = selected(d, split);
  EXPECT_EQ(c.decode_split, 2);
  EXPECT_EQ(c.bucket(1).gemm, Sm90Gemm::kDecode);
  EXPECT_EQ(c.bucket(kDecodeMaxTokens).decode_split, 2);
  const std::string out = described(c);
  EXPECT_NE(out.find("16x128 tiles, auto up to T = 640, 2 k steps of weights in flight per warp, blocks/SM "
                           "2 / 2; K split in two per block (overrides.decode_split_k), blocks/SM 3 / 3"),
            std::string::npos) << out;
  KernelOverrides one;
  one.decode_split_k = 1;  // pinning the default is always honoured: no bucket splits
  EXPECT_EQ(selected(d, one).bucket(1).decode_split, 1);
  EXPECT_EQ(selected(flash_desc(Recipe::kNvfp4), one).bucket(1).decode_split, 1);
  const MoeDesc nv = flash_desc(Recipe::kNvfp4);
  const Sm90Config nv_auto = selected(nv, {});  // nvfp4's auto splits at T = 1 too
  EXPECT_EQ(nv_auto.bucket(1).gemm, Sm90Gemm::kNvfp4Decode);
  EXPECT_EQ(nv_auto.bucket(1).decode_split, 2);
  EXPECT_EQ(nv_auto.bucket(2).gemm, Sm90Gemm::kNvfp4Decode);
  EXPECT_EQ(nv_auto.bucket(2).decode_split, 1);
  EXPECT_EQ(nv_auto.bucket(937).decode_split, 1);
  EXPECT_EQ(nv_auto.bucket(938).gemm, Sm90Gemm::kNvfp4Wgmma);
  const std::string nv_auto_out = described(nv_auto);
  EXPECT_NE(nv_auto_out.find("; K split in two per block up to T = 1 (auto)"), std::string::npos) << nv_auto_out;
  MoeDesc nv_exact = nv;  // the split's sums are not the CPU's: not with exact accumulation
  nv_exact.numerics.exact_accumulation = true;
  EXPECT_EQ(selected(nv_exact, {}).bucket(1).decode_split, 1);
  Sm90Facts nv_no_split_fit = all_available();
  nv_no_split_fit.decode_split_blocks_per_sm[0] = 0;
  EXPECT_EQ(selected(nv, {}, nv_no_split_fit).bucket(1).decode_split, 1);
  MoeDesc nv_auto_small = nv;  // I = 384: no split form, auto keeps one part
  nv_auto_small.intermediate_size = 384;
  EXPECT_EQ(selected(nv_auto_small, {}).bucket(1).decode_split, 1);
  const Sm90Config nv_split = selected(nv, split);
  EXPECT_EQ(nv_split.bucket(1).gemm, Sm90Gemm::kNvfp4Decode);
  EXPECT_EQ(nv_split.bucket(1).decode_split, 2);
  EXPECT_EQ(nv_split.bucket(937).decode_split, 2);
  EXPECT_EQ(nv_split.bucket(938).gemm, Sm90Gemm::kNvfp4Wgmma);
  const std::string nv_out = described(nv_split);
  EXPECT_NE(nv_out.find("K split in two per block (overrides.decode_split_k), blocks/SM 3 / 3"), std::string::npos)
      << nv_out;
  MoeDesc nv_small = nv;  // K = 384: not whole k steps per half
  nv_small.intermediate_size = 384;
  expect_refused([&] { selected(nv_small, split); }, ErrorCode::kUnsupported,
                 "hidden = 4096 and intermediate = 384 must be multiples of 256, at least 512");
  nv_small.intermediate_size = 256;  // whole k steps, but too few A rows' bytes for the hand-over
  expect_refused([&] { selected(nv_small, split); }, ErrorCode::kUnsupported,
                 "hidden = 4096 and intermediate = 256 must be multiples of 256, at least 512");
  MoeDesc nv_narrow = nv;  // multiples of 256 are enough for nvfp4
  nv_narrow.intermediate_size = 1536;
  EXPECT_EQ(selected(nv_narrow, split).bucket(1).decode_split, 2);
  Sm90Facts no_decode = all_available();
  no_decode.decode_unavailable = "16 rows of A do not fit";
  expect_refused([&] { selected(d, split, no_decode); }, ErrorCode::kUnsupported,
                 "overrides.decode_split_k = 2: the decode GEMMs cannot run this layer: 16 rows of A do not fit");
  Sm90Facts no_split = all_available();
  no_split.decode_split_blocks_per_sm[0] = 0;
  expect_refused([&] { selected(d, split, no_split); }, ErrorCode::kUnsupported,
                 "overrides.decode_split_k = 2: the split decode kernels do not fit on this device");
  MoeDesc narrow = d;
  narrow.intermediate_size = 1536;
  expect_refused([&] { selected(narrow, split); }, ErrorCode::kUnsupported,
                 "hidden = 4096 and intermediate = 1536 must be multiples of 1024");
  KernelOverrides deep_split = split;
  deep_split.decode_prefetch = kDecodeDeepPrefetch;
  expect_refused([&] { selected(d, deep_split); }, ErrorCode::kUnsupported,
                 "overrides.decode_split_k = 2 has no form with overrides.decode_prefetch = 4");
  KernelOverrides combine_split = split;
  combine_split.fuse_combine = true;
  expect_refused([&] { selected(d, combine_split); }, ErrorCode::kUnsupported,
                 "or overrides.fuse_combine = true");
  KernelOverrides mma_split = split;
  mma_split.gemm = GemmKernel::kMma;
  expect_refused([&] { selected(d, mma_split); }, ErrorCode::kUnsupported,
                 "overrides.decode_split_k = 2: no T bucket runs the decode GEMMs it splits (overrides.gemm = mma");
  MoeDesc exact = d;
  exact.numerics.exact_accumulation = true;
  expect_refused([&] { selected(exact, split); }, ErrorCode::kUnsupported,
                 "not bitwise the CPU layer's, which exact_accumulation asks for");
  KernelOverrides three;
  three.decode_split_k = 3;
  expect_refused([&] { select_sm90_load_config(d, three); }, ErrorCode::kInvalidArgument,
                 "overrides.decode_split_k = 3 is invalid; expected 1 or 2 parts");
}

// decode_prefetch picks the decode kernels' form; fuse_quantize_route makes the quantization of x
// and the routing one launch; fuse_combine puts the combine inside the decode GEMM 2. Each is
// refused, naming it, where it cannot be honoured.
TEST(Sm90Config, DecodePrefetchAndFusedQuantizeRouteOverrides) {
  const MoeDesc d = flash_desc();
  const Sm90Config plain = selected(d, {});
  EXPECT_EQ(plain.decode_prefetch, kDecodePrefetch);
  EXPECT_FALSE(plain.fuse_quantize_route.has_value());  // auto: mxfp4's decode buckets fuse
  EXPECT_TRUE(plain.fuses_quantize_route(plain.bucket(1)));
  EXPECT_FALSE(plain.fuses_quantize_route(plain.bucket(8192)));
  EXPECT_FALSE(selected(flash_desc(Recipe::kNvfp4), {}).fuses_quantize_route(plain.bucket(1)));

  KernelOverrides deep;
  deep.decode_prefetch = kDecodeDeepPrefetch;
  for (const Recipe r : {Recipe::kMxfp4, Recipe::kNvfp4}) {
    const Sm90Config c = selected(flash_desc(r), deep);
    EXPECT_EQ(c.decode_prefetch, kDecodeDeepPrefetch);
    const std::string out = described(c);
    EXPECT_NE(out.find("4 k steps of weights in flight per warp (overrides.decode_prefetch)"),
              std::string::npos) << out;
    Sm90Facts no_deep = all_available();
    no_deep.decode_deep_blocks_per_sm[1] = 0;
    expect_refused([&] { selected(flash_desc(r), deep, no_deep); }, ErrorCode::kUnsupported,
                   "overrides.decode_prefetch = 4: the deep decode kernels do not fit on this device");
    Sm90Facts no_decode = all_available();
    no_decode.decode_unavailable = "16 rows of A do not fit";
    expect_refused([&] { selected(flash_desc(r), deep, no_decode); }, ErrorCode::kUnsupported,
                   "overrides.decode_prefetch = 4: the decode GEMMs cannot run this layer: 16 rows of A do not fit");
  }
  KernelOverrides odd;
  odd.decode_prefetch = 3;
  expect_refused([&] { select_sm90_load_config(d, odd); }, ErrorCode::kInvalidArgument,
                 "overrides.decode_prefetch = 3 is invalid; expected 2 or 4 k steps");
  EXPECT_EQ(deep.str(), "decode_prefetch=4");

  KernelOverrides fuse;
  fuse.fuse_quantize_route = true;
  const Sm90Config fused = selected(d, fuse);
  EXPECT_TRUE(fused.fuses_quantize_route(fused.bucket(8192)));
  const std::string out = described(fused);
  EXPECT_NE(out.find("quantize_route = one launch (overrides.fuse_quantize_route)"), std::string::npos)
      << out;
  const Sm90Config nv_fused = selected(flash_desc(Recipe::kNvfp4), fuse);
  EXPECT_TRUE(nv_fused.fuses_quantize_route(nv_fused.bucket(1)));  // NVFP4 of x fused likewise
  MoeDesc caller = d;
  caller.quantize_input = false;
  expect_refused([&] { select_sm90_load_config(caller, fuse); }, ErrorCode::kUnsupported,
                 "overrides.fuse_quantize_route = true: this layer does not quantize x");
  KernelOverrides unfused;
  unfused.fuse_quantize_route = false;  // pinning the default is always honoured
  const Sm90Config unfused_config = selected(d, unfused);
  EXPECT_FALSE(unfused_config.fuses_quantize_route(unfused_config.bucket(1)));
  EXPECT_FALSE(selected(caller, {}).fuses_quantize_route(plain.bucket(1)));  // x comes quantized
  const std::string caller_out = described(selected(caller, {}));
  EXPECT_EQ(caller_out.find("quantize_route"), std::string::npos) << "x comes quantized: nothing to fuse";

  KernelOverrides fuse_combine;
  fuse_combine.fuse_combine = true;
  for (const Recipe r : {Recipe::kMxfp4, Recipe::kNvfp4}) {
    const Sm90Config c = selected(flash_desc(r), fuse_combine);
    EXPECT_TRUE(c.fuse_combine);
    const std::string combine_out = described(c);
    EXPECT_NE(combine_out.find("combine = inside the decode GEMM 2 (overrides.fuse_combine)"), std::string::npos)
        << combine_out;
    MoeDesc with_shared = flash_desc(r);
    with_shared.shared_intermediate_size = 2048;
    expect_refused([&] { select_sm90_load_config(with_shared, fuse_combine); }, ErrorCode::kUnsupported,
                   "overrides.fuse_combine = true: the shared expert's output is added in the combine");
    Sm90Facts no_decode = all_available();
    no_decode.decode_unavailable = "16 rows of A do not fit";
    expect_refused([&] { selected(flash_desc(r), fuse_combine, no_decode); }, ErrorCode::kUnsupported,
                   "overrides.fuse_combine = true: the combine is fused into the decode GEMMs, which cannot run "
                   "this layer: 16 rows of A do not fit");
    KernelOverrides mma_combine = fuse_combine;
    mma_combine.gemm = GemmKernel::kMma;
    expect_refused([&] { selected(flash_desc(r), mma_combine); }, ErrorCode::kUnsupported,
                   "overrides.fuse_combine = true: no T bucket runs the decode GEMMs it is fused into "
                   "(overrides.gemm = mma");
    KernelOverrides no_decode_t = fuse_combine;
    no_decode_t.decode_max_tokens = 0;
    expect_refused([&] { selected(flash_desc(r), no_decode_t); }, ErrorCode::kUnsupported,
                   "decode up to T = 0)");
  }
}

// The plan's steps per bucket (host only: building the launch table launches nothing).
TEST(Sm90Config, PlanStepsFollowTheConfig) {
  MoeDesc d = flash_desc();
  d.fleet.max_tokens_per_rank = 1024;
  auto plan_of = [&](const MoeDesc& desc, const KernelOverrides& o) {
    const Sm90Config c = selected(desc, o);
    LayerShape shape{desc.fleet.num_experts, desc.fleet.hidden_size, desc.intermediate_size, desc.top_k,
                     desc.fleet.max_tokens_per_rank, desc.recipe};
    shape.activations_16bit = c.uses_16bit_activations();
    const Plan plan = make_plan(shape);
    // Host memory, left uninitialized: the launch table only forms pointers into it.
    const std::unique_ptr<std::byte[]> workspace(new std::byte[plan.workspace.total_bytes]);
    uint32_t counters = 0;  // fuse_combine's counters: only their address goes into the launches
    const Sm90Pipeline pipeline(c, plan, desc.quantize_input, 10.0f, {}, {}, workspace.get(), nullptr, &counters);
    return described(pipeline);
  };
  // Auto: mxfp4's decode bucket quantizes and routes in one launch, the wgmma-rs bucket in two.
  const std::string plain = plan_of(d, {});
  EXPECT_NE(plain.find("plan T=1..1: decode GEMMs (2 k steps of weights in flight, K split in two per block), "
                       "routing m tiles of 16 rows; gemm1 grid m_tiles16(T) x 1, gemm2 grid m_tiles16(T) x 1; 4 steps "
                       "(quantize x + routing (one launch), gemm1, gemm2, combine)"),
            std::string::npos) << plain;
  EXPECT_NE(plain.find("plan T=2..640: decode GEMMs (2 k steps of weights in flight), routing m tiles of 16 rows; "
                       "gemm1 grid m_tiles16(T) x 1, gemm2 grid m_tiles16(T) x 1; 4 steps (quantize x + routing (one "
                       "launch), gemm1, gemm2, combine)"),
            std::string::npos) << plain;
  EXPECT_NE(plain.find("plan T=641..1024: wgmma-rs GEMMs (n tiles of 256 weight rows, 4 consumer warpgroups, "
                       "tiles of <= 48 rows on n48 after the others), routing m tiles of 64 rows; gemm1 grid min(m_tiles64(T) x 16, 132)"),
            std::string::npos) << plain;
  EXPECT_NE(plain.find("5 steps (quantize x, routing, gemm1, gemm2, combine)"), std::string::npos) << plain;
  // Up to T = 8192: the gemm1_bf16 buckets quantize x straight to bf16 (no conversion launch).
  MoeDesc big = d;
  big.fleet.max_tokens_per_rank = 8192;
  const std::string big_plan = plan_of(big, {});
  EXPECT_NE(big_plan.find("plan T=2904..5482: wgmma-rs GEMMs (n tiles of 256 weight rows, 4 consumer warpgroups; "
                          "gemm1 on bf16 wgmma over 128x256 tiles, odd last 64-row tiles on 64x256)"),
            std::string::npos) << big_plan;
  EXPECT_NE(big_plan.find("5 steps (quantize x to bf16, routing, gemm1, gemm2, combine)"), std::string::npos)
      << big_plan;
  EXPECT_NE(big_plan.find("plan T=5483..7962: wgmma-rs GEMMs (n tiles of 256 weight rows, 4 consumer warpgroups), "),
            std::string::npos) << big_plan;
  KernelOverrides unfused;
  unfused.fuse_quantize_route = false;
  EXPECT_EQ(plan_of(d, unfused).find("(one launch)"), std::string::npos) << plan_of(d, unfused);
  KernelOverrides deep;
  deep.decode_prefetch = kDecodeDeepPrefetch;
  for (const Recipe r : {Recipe::kMxfp4, Recipe::kNvfp4}) {
    MoeDesc dr = flash_desc(r);
    dr.fleet.max_tokens_per_rank = 1024;
    const std::string deep_plan = plan_of(dr, deep);
    EXPECT_NE(deep_plan.find("decode GEMMs (4 k steps of weights in flight)"), std::string::npos) << deep_plan;
  }
  KernelOverrides split;
  split.decode_split_k = 2;
  const std::string split_plan = plan_of(d, split);
  EXPECT_NE(split_plan.find("plan T=1..640: decode GEMMs (2 k steps of weights in flight, K split in two per block), "
                            "routing m tiles of 16 rows"),
            std::string::npos) << split_plan;
  KernelOverrides fuse;
  fuse.fuse_quantize_route = true;
  const std::string fused = plan_of(d, fuse);
  EXPECT_NE(fused.find("4 steps (quantize x + routing (one launch), gemm1, gemm2, combine)"), std::string::npos)
      << fused;
  EXPECT_EQ(fused.find("routing, gemm1"), std::string::npos) << fused;
  KernelOverrides bf16_fused = fuse;
  bf16_fused.gemm = GemmKernel::kWgmmaBf16;
  EXPECT_NE(plan_of(d, bf16_fused).find("(quantize x to bf16 + routing (one launch), gemm1, h to bf16, gemm2, "
                                        "combine)"),
            std::string::npos) << plan_of(d, bf16_fused);
  // fuse_combine: the decode bucket's GEMM 2 combines; the wgmma bucket keeps its combine launch.
  KernelOverrides all_fused = fuse;
  all_fused.fuse_combine = true;
  const std::string fused_both = plan_of(d, all_fused);
  EXPECT_NE(fused_both.find("plan T=1..640: decode GEMMs (2 k steps of weights in flight), routing m tiles of 16 rows; "
                            "gemm1 grid m_tiles16(T) x 1, gemm2 grid m_tiles16(T) x 1; 3 steps (quantize x + routing "
                            "(one launch), gemm1, gemm2 + combine (one launch))"),
            std::string::npos) << fused_both;
  EXPECT_NE(fused_both.find("4 steps (quantize x + routing (one launch), gemm1, gemm2, combine)"), std::string::npos)
      << fused_both;
  KernelOverrides nv_combine;
  nv_combine.fuse_combine = true;
  nv_combine.decode_prefetch = kDecodeDeepPrefetch;
  const std::string nv_fused = plan_of(flash_desc(Recipe::kNvfp4), nv_combine);
  EXPECT_NE(nv_fused.find("nvfp4-decode GEMMs (4 k steps of weights in flight), routing m tiles of 16 rows; gemm1 "
                          "grid m_tiles16(T) x 1, gemm2 grid m_tiles16(T) x 1; 5 steps (quantize x, routing, gemm1, "
                          "nvfp4 of h, gemm2 + combine (one launch))"),
            std::string::npos) << nv_fused;
  EXPECT_NE(plan_of(flash_desc(Recipe::kNvfp4), fuse)
                .find("(quantize x + routing (one launch), gemm1, nvfp4 of h, gemm2, combine)"),
            std::string::npos) << plan_of(flash_desc(Recipe::kNvfp4), fuse);
  KernelOverrides nv_wgmma_fused = fuse;
  nv_wgmma_fused.gemm = GemmKernel::kWgmma;
  EXPECT_NE(plan_of(flash_desc(Recipe::kNvfp4), nv_wgmma_fused)
                .find("(quantize x + routing (one launch), x to f16, gemm1, nvfp4 of h, h to f16, gemm2, combine)"),
            std::string::npos) << plan_of(flash_desc(Recipe::kNvfp4), nv_wgmma_fused);
  const std::string nv = plan_of(flash_desc(Recipe::kNvfp4), {});
  EXPECT_NE(nv.find("(quantize x, routing, gemm1, nvfp4 of h, gemm2, combine)"), std::string::npos) << nv;
  MoeDesc caller = d;
  caller.quantize_input = false;
  EXPECT_NE(plan_of(caller, {}).find("4 steps (routing, gemm1, gemm2, combine)"), std::string::npos)
      << plan_of(caller, {});
}

TEST(Sm90Config, LaunchGridsCapPersistentKernelsAtTheResidentBlocks) {
  const Plan plan = make_plan({256, 4096, 2048, 6, 8192, Recipe::kMxfp4});
  for (const WgmmaTile tile : {WgmmaTile::k64x256, WgmmaTile::k128x128}) {
    const int block_n = wgmma_tile_shape(tile).block_n;
    const GridRule rule{kGemmBlockM, 4096 / block_n, 132};
    EXPECT_EQ(launch_grid(plan, rule, 1), std::min<int64_t>(132, plan.m_tile_bound(1) * 4096 / block_n));
    EXPECT_EQ(launch_grid(plan, rule, 8192), 132);
  }
  EXPECT_EQ(launch_grid(plan, GridRule{kDecodeBlockM, 1, 0}, 1), plan.m_tile_bound(1, kDecodeBlockM));
}

class Sm90WgmmaKernels : public ::testing::Test {
 protected:
  void SetUp() override { MOE_EP_REQUIRE_CUDA(); }
};

TEST_F(Sm90WgmmaKernels, TinyShapeMatchesTheMmaKernels) {
  const Shape s{"tiny", 16, 256, 128, 4};
  compare_kernels(s,
                  {{"random, 10% holes", 1, 0.1},
                   {"random, 10% holes", 7, 0.1},
                   {"random, 10% holes", 300, 0.1},
                   {"expert 3 idle", 300, 0.0, 3},
                   {"one expert, all rows", 300, 0.0, -1, 5},
                   {"random, 5% holes", 4096, 0.05}},
                  31);
}

TEST_F(Sm90WgmmaKernels, FlashShapeMatchesTheMmaKernels) {
  const Shape s{"flash/E32", 32, 4096, 2048, 6};
  compare_kernels(s,
                  {{"random, 5% holes", 1, 0.05},
                   {"random, 5% holes", 7, 0.05},
                   {"random, 5% holes", 300, 0.05},
                   {"one expert, all rows", 200, 0.0, -1, 9},
                   {"random", 1024, 0.0}},
                  47);
}

TEST_F(Sm90WgmmaKernels, BitwiseDeterministicOver20Reruns) {
  const Shape s{"flash/E32", 32, 4096, 2048, 6};
  const DeviceWeights& w = cached_device_weights(s, 47);
  const DeviceProblem p = make_problem(s, make_inputs(s, {"random", 700, 0.05}, 5));
  for (const Kernels& k : wgmma_variants()) {
    const std::string tile = k.name();
    GemmRun run(s, p, w, k);
    run.gemm1();
    run.gemm2();
    const GemmOutputs first = run.outputs();
    for (int rep = 0; rep < 20; ++rep) {
      run.poison();
      run.gemm1();
      run.gemm2();
      const GemmOutputs again = run.outputs();
      ASSERT_EQ(again.h, first.h) << tile << " rerun " << rep;
      ASSERT_EQ(again.h_scale, first.h_scale) << tile << " rerun " << rep;
      ASSERT_EQ(again.o, first.o) << tile << " rerun " << rep;
    }
  }
}

// The decode kernels with kDecodeDeepPrefetch k steps of weights in flight, and with the
// weights by bulk copies into rings of 2 or 3 chunks per warp (decode_variant_probe.h), compute
// what the regular ones do, in the same order: bitwise the same h, h scales and o (tiny and
// flash/E32 shapes, holes, an idle expert, one expert taking every row; outputs NaN-poisoned
// before each run).
TEST_F(Sm90WgmmaKernels, DeepAndBulkDecodeAreBitwiseTheDecodeKernels) {
  Kernels regular;
  regular.decode_prefetch = 2;
  std::vector<Kernels> forms(3, regular);  // 4 k steps ahead; bulk rings of 2 and 3 chunks
  forms[0].decode_prefetch = kDecodeDeepPrefetch;
  forms[1].decode_bulk_slots = 2;
  forms[2].decode_bulk_slots = 3;
  // tiny: K = 256 / 128, one partial chunk per GEMM; odd: K = 1664 / 640 (13 / 5 k steps), a
  // partial last chunk after the rings have wrapped; flash/E32: 8 / 4 whole chunks.
  for (const Shape& s : {Shape{"tiny", 16, 256, 128, 4}, Shape{"odd", 16, 1664, 640, 4},
                         Shape{"flash/E32", 32, 4096, 2048, 6}}) {
    const DeviceWeights& w = cached_device_weights(s, 47);
    for (const RoutingCase& c : std::vector<RoutingCase>{{"random", 1, 0.0},
                                                         {"random, 10% holes", 7, 0.1},
                                                         {"expert 3 idle", 64, 0.0, 3},
                                                         {"one expert, all rows", 40, 0.0, -1, 9},
                                                         {"random", 300, 0.05}}) {
      const DeviceProblem p = make_problem(s, make_inputs(s, c, 61 + static_cast<uint64_t>(c.T)));
      GemmRun a(s, p, w, regular);
      a.gemm1();
      a.gemm2();
      const GemmOutputs ra = a.outputs();
      ASSERT_FALSE(ra.o.empty());
      for (const Kernels& k : forms) {
        SCOPED_TRACE(fmt::format("{} {} T={} {}", s.name, c.name, c.T, k.name()));
        GemmRun b(s, p, w, k);
        b.gemm1();
        b.gemm2();
        const GemmOutputs rb = b.outputs();
        EXPECT_TRUE(ra.h == rb.h && ra.h_scale == rb.h_scale && ra.o == rb.o) << "differs from the decode kernels";
        int64_t nan = 0;
        for (uint16_t v : rb.o) nan += std::isnan(bf16_to_float(v));
        EXPECT_EQ(nan, 0) << "unwritten (NaN-poisoned) outputs";
      }
    }
  }
}

// The decode kernels with K split in two halves per block: the same products, summed as two
// halves (so within the recipe threshold of the regular decode kernels, not bitwise), every row
// written (NaN-poisoned outputs), the same bits on every rerun; K not whole chunks per half
// (tiny: 2 k steps) refused. Flash/E32 shape: tiles of 1, 7 and 16 rows, holes, one expert.
TEST_F(Sm90WgmmaKernels, SplitDecodeMatchesTheDecodeKernels) {
  const Shape s{"flash/E32", 32, 4096, 2048, 6};
  const DeviceWeights& w = cached_device_weights(s, 47);
  const double tol = cudatest::same_recipe_tolerance(Recipe::kMxfp4);  // fp32 sums, reordered
  Kernels regular, split;
  regular.decode_prefetch = split.decode_prefetch = kDecodePrefetch;
  split.decode_split = 2;
  for (const RoutingCase& c : std::vector<RoutingCase>{{"random", 1, 0.0},
                                                       {"random", 2, 0.0},
                                                       {"random, 10% holes", 7, 0.1},
                                                       {"one expert, all rows", 16, 0.0, -1, 9},
                                                       {"random", 300, 0.05}}) {
    SCOPED_TRACE(fmt::format("{} T={}", c.name, c.T));
    const DeviceProblem p = make_problem(s, make_inputs(s, c, 61 + static_cast<uint64_t>(c.T)));
    GemmRun a(s, p, w, regular), b(s, p, w, split);
    a.gemm1();
    a.gemm2();
    b.gemm1();
    b.gemm2(&a);  // GEMM 2 alone on the same h
    const GemmOutputs ra = a.outputs(), same_h = b.outputs();
    const double err_h = rel_err_h(same_h, ra), err_o = rel_err_o(same_h, ra);
    EXPECT_LE(err_h, tol) << "GEMM 1 h";
    EXPECT_LE(err_o, tol) << "GEMM 2 on the same h";
    int64_t nan = 0;
    for (uint16_t v : same_h.o) nan += std::isnan(bf16_to_float(v));
    EXPECT_EQ(nan, 0) << "unwritten (NaN-poisoned) outputs";
    b.poison();
    b.gemm1();
    b.gemm2();
    const GemmOutputs chain = b.outputs();
    EXPECT_LE(rel_err_o(chain, ra), tol) << "GEMM 1 + GEMM 2";
    b.poison();
    b.gemm1();
    b.gemm2();
    const GemmOutputs again = b.outputs();
    EXPECT_TRUE(again.h == chain.h && again.h_scale == chain.h_scale && again.o == chain.o) << "a rerun differs";
    fmt::print("[ split   ] {:<22} T={:<4} h err={:.2e} (bytes equal {:.4f})  o err={:.2e}\n", c.name, c.T, err_h,
               equal_share(same_h.h, ra.h), err_o);
  }
  Gemm1Params tiny;  // K = 256: 2 k steps, not whole chunks per half
  tiny.op.n = 256;
  tiny.op.k = 256;
  EXPECT_EQ(launch_sm90_mxfp4_decode_split_gemm1(tiny, 1, nullptr), cudaErrorInvalidValue);
}

// Small case for compute-sanitizer (racecheck / memcheck / synccheck): both tiles, a few tiles.
TEST_F(Sm90WgmmaKernels, SmallCaseForSanitizers) {
  const Shape s{"tiny", 16, 256, 128, 4};
  compare_kernels(s, {{"random, 10% holes", 150, 0.1}}, 77);
  // The decode kernels with bulk weight rings (mbarriers, the async proxy), against the regular ones.
  const DeviceWeights& w = cached_device_weights(s, 77);
  const DeviceProblem p = make_problem(s, make_inputs(s, {"random, 10% holes", 40, 0.1}, 78));
  Kernels regular, bulk;
  regular.decode_prefetch = bulk.decode_prefetch = kDecodePrefetch;
  bulk.decode_bulk_slots = 2;
  GemmRun a(s, p, w, regular), b(s, p, w, bulk);
  a.gemm1();
  a.gemm2();
  b.gemm1();
  b.gemm2();
  EXPECT_TRUE(a.outputs().o == b.outputs().o) << "the bulk decode kernels differ";
}

}  // namespace
}  // namespace moe_ep::cuda

// ---- layer level -------------------------------------------------------------------------------
namespace moe_ep::cudatest {
namespace {

using testsupport::Inputs;
using testsupport::Problem;

TEST(Sm90WgmmaLayer, TinyMatchesCpuWithStructuredRoutings) {
  MOE_EP_REQUIRE_CUDA();
  struct Variant {
    const char* name;
    GemmKernel gemm;
    const char* tile;  // "" = the kernel's own choice
  };
  for (const Variant v : {Variant{"64x256", GemmKernel::kWgmma, "64x256"}, Variant{"128x128", GemmKernel::kWgmma, "128x128"},
                          Variant{"wgmma-bf16", GemmKernel::kWgmmaBf16, ""},
                          Variant{"wgmma-bf16 64x256", GemmKernel::kWgmmaBf16, "64x256"},
                          Variant{"rs 64x128", GemmKernel::kWgmmaRs, ""},
                          Variant{"rs 96x128", GemmKernel::kWgmmaRs, "96x128"},
                          Variant{"rs 64x256", GemmKernel::kWgmmaRs, "64x256"}}) {
    const char* tile = v.name;
    Problem p = testsupport::tiny_problem("mxfp4");
    p.max_tokens = 4096;
    p.exact_accumulation = false;  // wgmma with exact accumulation is refused (Sm90Config tests)
    p.overrides.gemm = v.gemm;
    if (*v.tile) p.overrides.tile = parse_tile_shape(v.tile);
    const testsupport::WeightSet w = testsupport::random_weights(p, WeightFormat::kMXFP4, 12);
    auto check = [&](const Inputs& in, const std::string& what) {
      const std::vector<double> ref = cpu_reference(p, w.pack(), in);
      auto layer = make_gpu_layer(p, w.pack());
      const std::vector<uint16_t> y = run_on_gpu(*layer, to_device(p, in));
      EXPECT_EQ(layer->read_error_flags(), 0u) << what;
      const double err = relative_error_rows(y, ref, p.hidden);
      int64_t same = 0;
      for (size_t i = 0; i < y.size(); ++i) same += bf16_to_float(y[i]) == ref[i];
      EXPECT_LE(err, wgmma_recipe_tolerance()) << what << " tile " << tile << ": " << p.str();
      fmt::print("[ wgmma   ] layer tiny {:<10} {:<28} T={:<5} rel_err={:.3e} bitwise-equal={:.4f}\n", tile, what,
                 in.tokens, err, y.empty() ? 1.0 : static_cast<double>(same) / y.size());
    };
    for (int64_t T : {1, 7, 300, 4096})
      check(testsupport::random_inputs(p, T, 200 + T, {.skip_fraction = 0.1}), "random, 10% holes");
    Inputs in = testsupport::random_inputs(p, 300, 17);
    for (int64_t t = 0; t < in.tokens; ++t)
      for (int64_t k = 0; k < p.top_k; ++k)
        if (in.id(t, k) == 3) in.set_id(t, k, -1);
    check(in, "expert 3 idle");
    for (int64_t t = 0; t < in.tokens; ++t)
      for (int64_t k = 0; k < p.top_k; ++k) in.set_id(t, k, k == 0 ? 5 : -1);
    check(in, "one expert, all rows");
  }
}

// nvfp4's f16 wgmma kernels (overrides.gemm = wgmma) on the tiny preset against the CPU layer:
// its exact f16 products summed in fp32 in another order meet the nvfp4 threshold. Routings as
// above, plus 3 k steps per GEMM (H = I = 384: an odd count for the two fragment sets) and
// activations quantized by the caller (GEMM 1 then reads the caller's global factors).
TEST(Sm90WgmmaLayer, Nvfp4TinyMatchesCpuWithStructuredRoutings) {
  MOE_EP_REQUIRE_CUDA();
  auto problem = [](int64_t hidden, int64_t intermediate, bool quantize_input) {
    Problem p = testsupport::tiny_problem("nvfp4");
    p.max_tokens = 4096;
    p.exact_accumulation = false;
    p.overrides.gemm = GemmKernel::kWgmma;
    p.hidden = hidden;
    p.intermediate = intermediate;
    p.quantize_input = quantize_input;
    return p;
  };
  auto check = [](const Problem& p, const testsupport::WeightSet& w, const Inputs& in, const std::string& what) {
    const std::vector<double> ref = cpu_reference(p, w.pack(), in);
    auto layer = make_gpu_layer(p, w.pack());
    const std::vector<uint16_t> y = run_on_gpu(*layer, to_device(p, in));
    EXPECT_EQ(layer->read_error_flags(), 0u) << what;
    int64_t nan = 0;
    for (uint16_t v : y) nan += std::isnan(bf16_to_float(v));
    EXPECT_EQ(nan, 0) << what << ": unwritten (NaN-poisoned) outputs";
    const double err = relative_error_rows(y, ref, p.hidden);
    EXPECT_LE(err, same_recipe_tolerance(Recipe::kNvfp4)) << what << ": " << p.str();
    fmt::print("[ wgmma   ] layer tiny nvfp4-wgmma {:<36} T={:<5} rel_err={:.3e}\n", what, in.tokens, err);
  };
  const Problem p = problem(256, 128, true);
  const testsupport::WeightSet w = testsupport::random_weights(p, WeightFormat::kNVFP4, 14);
  for (int64_t T : {1, 7, 300, 4096})
    check(p, w, testsupport::random_inputs(p, T, 210 + T, {.skip_fraction = 0.1}), "random, 10% holes");
  Inputs in = testsupport::random_inputs(p, 300, 19);
  for (int64_t t = 0; t < in.tokens; ++t)
    for (int64_t k = 0; k < p.top_k; ++k)
      if (in.id(t, k) == 3) in.set_id(t, k, -1);
  check(p, w, in, "expert 3 idle");
  for (int64_t t = 0; t < in.tokens; ++t)
    for (int64_t k = 0; k < p.top_k; ++k) in.set_id(t, k, k == 0 ? 5 : -1);
  check(p, w, in, "one expert, all rows");
  const Problem odd = problem(384, 384, true);
  const testsupport::WeightSet wo = testsupport::random_weights(odd, WeightFormat::kNVFP4, 15);
  check(odd, wo, testsupport::random_inputs(odd, 200, 23, {.skip_fraction = 0.1}), "H = I = 384 (3 k steps)");
  const Problem caller = problem(256, 128, false);
  const testsupport::WeightSet wc = testsupport::random_weights(caller, WeightFormat::kNVFP4, 16);
  Inputs ci = testsupport::random_inputs(caller, 150, 29, {.skip_fraction = 0.1});
  testsupport::quantize_inputs_for_caller(caller, ci);
  check(caller, wc, ci, "quantize_input = false");
}

// A warpgroup family forced on the deepseek-v4-flash layer of one recipe.
struct FlashKernel {
  const char* name;
  GemmKernel gemm;
  Recipe recipe;
  const char* tile = "";  // "" = the family's own choice
};

void PrintTo(const FlashKernel& k, std::ostream* os) { *os << k.name; }

class Sm90WgmmaFlashLayer : public ::testing::TestWithParam<FlashKernel> {};

TEST_P(Sm90WgmmaFlashLayer, MatchesCpuAndIsBitwiseDeterministic) {
  MOE_EP_REQUIRE_CUDA();
  const FlashKernel& fk = GetParam();
  const testing::Preset& preset = testing::find_preset("deepseek-v4-flash");
  Problem p = preset_problem("deepseek-v4-flash", std::string(recipe_name(fk.recipe)), 6144);
  p.exact_accumulation = false;
  p.overrides.gemm = fk.gemm;
  if (*fk.tile) p.overrides.tile = parse_tile_shape(fk.tile);
  const bool mxfp4 = fk.recipe == Recipe::kMxfp4;
  const testing::HostWeights weights = preset_weights(p, mxfp4 ? WeightFormat::kMXFP4 : WeightFormat::kNVFP4, 2027);
  // The FP8 products have their own threshold; nvfp4's f16 ones are exact (the recipe's).
  const double tolerance = mxfp4 ? wgmma_recipe_tolerance() : same_recipe_tolerance(fk.recipe);

  struct Case {
    std::string name;
    Inputs in;
    std::vector<int64_t> rows;
    std::vector<double> ref;
  };
  std::vector<Case> cases;
  // auto: decode, decode, decode, 64x256 with GEMM 1 on bf16 128x256 (96 rows per expert: mostly
  // pairs of 64-row tiles), 64x256 with narrow tail tiles, the bf16 GEMM 1 again (144 rows: a pair
  // and an odd last tile for most experts)
  for (int64_t T : {1, 7, 300, 4096, 1024, 6144}) {
    testing::InputSpec is{T, p.hidden, p.num_experts, p.top_k, 0.05, preset.routed_scaling_factor,
                          static_cast<uint64_t>(900 + T), 0};
    cases.push_back({fmt::format("random T={}", T), from_synthetic(testing::make_inputs(is), p.top_k), row_subset(T, T, 40), {}});
  }
  {
    testing::InputSpec is{1024, p.hidden, p.num_experts, p.top_k, 0.0, preset.routed_scaling_factor, 1999, 0};
    Case c{"one expert, all rows", from_synthetic(testing::make_inputs(is), p.top_k), row_subset(1024, 3, 40), {}};
    for (int64_t t = 0; t < c.in.tokens; ++t)
      for (int64_t k = 0; k < p.top_k; ++k) c.in.set_id(t, k, k == 0 ? 11 : -1);
    cases.push_back(std::move(c));
  }
  for (Case& c : cases) c.ref = cpu_reference(p, weights.pack(), c.in, c.rows);
  auto layer = make_gpu_layer(p, weights.pack());
  if (*fk.tile) {  // the plan runs the pinned 64x256 tile (four consumers), not another form
    const std::string plan = layer->info().config.str();
    EXPECT_NE(plan.find("(n tiles of 256 weight rows, 4 consumer warpgroups"), std::string::npos) << plan;
  }
  for (const Case& c : cases) {
    const std::vector<uint16_t> y = run_on_gpu(*layer, to_device(p, c.in));
    const double err = relative_error_rows(y, c.ref, p.hidden, c.rows);
    int64_t nan = 0;
    for (uint16_t v : y) nan += std::isnan(bf16_to_float(v));
    EXPECT_EQ(nan, 0) << c.name << ": unwritten (NaN-poisoned) outputs";
    EXPECT_LE(err, tolerance) << c.name << ": " << p.str();
    fmt::print("[ wgmma   ] layer flash {:<12} {:<24} rows checked={:<5} rel_err={:.3e}\n", fk.name, c.name,
               c.rows.empty() ? c.in.tokens : static_cast<int64_t>(c.rows.size()), err);
  }
  EXPECT_EQ(layer->read_error_flags(), 0u);
  for (const int c : {3, 5}) {  // T = 4096, 6144
    const DeviceInputs d = to_device(p, cases[c].in);
    const uint64_t h = hash_bits(run_on_gpu(*layer, d));
    for (int rep = 0; rep < 20; ++rep) ASSERT_EQ(hash_bits(run_on_gpu(*layer, d)), h) << cases[c].name << " rerun " << rep;
  }
}

INSTANTIATE_TEST_SUITE_P(Kernels, Sm90WgmmaFlashLayer,
                         ::testing::Values(FlashKernel{"auto", GemmKernel::kAuto, Recipe::kMxfp4},
                                           FlashKernel{"wgmma", GemmKernel::kWgmma, Recipe::kMxfp4},
                                           FlashKernel{"wgmma_bf16", GemmKernel::kWgmmaBf16, Recipe::kMxfp4},
                                           FlashKernel{"wgmma_bf16_64x256", GemmKernel::kWgmmaBf16, Recipe::kMxfp4, "64x256"},
                                           FlashKernel{"wgmma_rs", GemmKernel::kWgmmaRs, Recipe::kMxfp4},
                                           FlashKernel{"wgmma_rs_64x256", GemmKernel::kWgmmaRs, Recipe::kMxfp4, "64x256"},
                                           FlashKernel{"nvfp4_wgmma", GemmKernel::kWgmma, Recipe::kNvfp4},
                                           FlashKernel{"nvfp4_wgmma_64x256", GemmKernel::kWgmma, Recipe::kNvfp4, "64x256"}),
                         [](const ::testing::TestParamInfo<FlashKernel>& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace moe_ep::cudatest
