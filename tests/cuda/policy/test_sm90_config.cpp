// The SM90 selection policy (src/cuda/policy/): the form table and which forms auto picks per T
// bucket, from a descriptor and facts alone. Host arithmetic: runs without a GPU or the CUDA
// toolkit. A bucket list reads as "lo..hi form[+form2] | ...".
#include <set>
#include <string>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "cuda/policy/sm90_config.h"
#include "cuda/policy/sm90_policy_fixtures.h"
#include "cuda/policy/sm90_tiles.h"
#include "moe_ep/error.h"

namespace moe_ep::cuda {
namespace {

using F = Sm90Form;

using policytest::all_available;
using policytest::flash_desc;
using policytest::selected;

// "0..1 mxfp4.decode-split.16x64 | 2..640 mxfp4.decode.16x128 | ..."
std::string plan_of(const Sm90Config& c) {
  std::string out;
  for (const Sm90Bucket& b : c.buckets) {
    out += fmt::format("{}{}..{} {}", out.empty() ? "" : " | ", b.min_tokens, b.max_tokens, sm90_form_name(b.gemm1));
    if (b.gemm2 != b.gemm1) out += fmt::format("+{}", sm90_form_name(b.gemm2));
  }
  return out;
}

// The buckets cover T = 0 .. max_tokens_per_rank once, in order, each with two forms of the
// layer's recipe on one routing list; no two neighbours run the same forms.
void expect_well_formed(const Sm90Config& c, const MoeDesc& d) {
  ASSERT_FALSE(c.buckets.empty());
  EXPECT_EQ(c.buckets.front().min_tokens, 0);
  for (size_t i = 0; i < c.buckets.size(); ++i) {
    const Sm90Bucket& b = c.buckets[i];
    EXPECT_LE(b.min_tokens, b.max_tokens) << i;
    EXPECT_EQ(sm90_form(b.gemm1).recipe, d.recipe) << i;
    EXPECT_EQ(sm90_form(b.gemm2).recipe, d.recipe) << i;
    EXPECT_TRUE(sm90_form(b.gemm2).has_gemm2) << i;
    EXPECT_EQ(sm90_form(b.gemm1).list_block_m, sm90_form(b.gemm2).list_block_m) << i;
    EXPECT_TRUE(c.available(b.gemm1) && c.available(b.gemm2)) << i;
    if (i > 0) {
      EXPECT_EQ(b.min_tokens, c.buckets[i - 1].max_tokens + 1) << i;
      EXPECT_FALSE(b.gemm1 == c.buckets[i - 1].gemm1 && b.gemm2 == c.buckets[i - 1].gemm2) << i;
    }
  }
  EXPECT_EQ(c.buckets.back().max_tokens, d.fleet.max_tokens_per_rank);
}

std::string described(const Sm90Config& c) {
  SelectedConfig out;
  c.describe(out);
  return out.str();
}

template <class Fn>
void expect_refused(Fn&& f, ErrorCode code, const std::string& part) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one naming '" << part << "'";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << e.message();
    EXPECT_NE(e.message().find(part), std::string::npos) << e.message();
  }
}

TEST(Sm90Forms, TableRowsAreUniqueParseableAndConsistent) {
  std::set<std::string_view> names;
  for (const Sm90FormInfo& f : sm90_forms()) {
    EXPECT_TRUE(names.insert(f.name).second) << f.name;
    EXPECT_EQ(parse_sm90_form(f.name), f.form) << f.name;
    EXPECT_EQ(f.name.substr(0, 6), std::string(recipe_name(f.recipe)) + ".") << f.name;
    EXPECT_NE(f.name.find(fmt::format(".{}x{}", f.block_m, f.block_n)), std::string_view::npos) << f.name;
    EXPECT_EQ(f.block_m % f.list_block_m, 0) << f.name;
    EXPECT_TRUE(f.persistent || sm90_decode_family(f.family)) << f.name;
    EXPECT_TRUE(!f.folded_only || f.recipe == Recipe::kMxfp4) << f.name;
    EXPECT_TRUE(f.has_gemm2 || f.x_16bit) << f.name;  // the only GEMM 1 form reads bf16 x
  }
  EXPECT_FALSE(parse_sm90_form("mxfp4.decode"));
  EXPECT_EQ(sm90_family_tiles(Recipe::kMxfp4, GemmKernel::kWgmma), "64x256");
  EXPECT_EQ(sm90_family_tiles(Recipe::kMxfp4, GemmKernel::kWgmmaRs), "64x256");
  EXPECT_EQ(sm90_family_tiles(Recipe::kNvfp4, GemmKernel::kWgmma), "128x128, 64x256");
  EXPECT_EQ(sm90_family_tiles(Recipe::kNvfp4, GemmKernel::kWgmmaRs), "");
  EXPECT_EQ(sm90_family_form(Recipe::kMxfp4, GemmKernel::kDecode), F::kMxfp4Decode);  // whole K, not the split
  EXPECT_EQ(sm90_family_form(Recipe::kMxfp4, GemmKernel::kDecodeWgmma), F::kMxfp4DecodeWgmma);
  EXPECT_FALSE(sm90_family_form(Recipe::kNvfp4, GemmKernel::kDecodeWgmma));
  EXPECT_EQ(sm90_family_tiles(Recipe::kMxfp4, GemmKernel::kDecodeWgmma), "");
  EXPECT_EQ(sm90_family_form(Recipe::kMxfp4, GemmKernel::kWgmmaRs), F::kMxfp4RsFp8);  // not the tails form
  EXPECT_EQ(sm90_family_form(Recipe::kNvfp4, GemmKernel::kWgmma), F::kNvfp4RsF16);
  EXPECT_EQ(sm90_family_form(Recipe::kNvfp4, GemmKernel::kWgmma, {64, 256}), F::kNvfp4RsF16Wide);
  EXPECT_FALSE(sm90_family_form(Recipe::kNvfp4, GemmKernel::kWgmma, {96, 256}));
  EXPECT_FALSE(sm90_family_form(Recipe::kNvfp4, GemmKernel::kWgmmaRs));
  const std::string table = sm90_form_table_markdown();
  for (const Sm90FormInfo& f : sm90_forms()) EXPECT_NE(table.find(fmt::format("`{}`", f.name)), std::string::npos);
}

TEST(Sm90Forms, UnavailableNamesTheReason) {
  const MoeDesc d = flash_desc();
  Sm90Facts f = all_available();
  EXPECT_EQ(sm90_form_unavailable(F::kMxfp4RsFp8, d, f), "");
  EXPECT_NE(sm90_form_unavailable(F::kNvfp4Mma, d, f).find("recipe 'nvfp4'"), std::string::npos);
  f.w2_folded = false;
  EXPECT_NE(sm90_form_unavailable(F::kMxfp4RsFp8, d, f).find("not inside the FP8 window"), std::string::npos);
  EXPECT_NE(sm90_form_unavailable(F::kMxfp4RsFp8, d, f, /*fold=*/false).find("overrides.fold_fp8 = false"),
            std::string::npos);
  EXPECT_EQ(sm90_form_unavailable(F::kMxfp4Mma, d, f), "");  // E8M0 block scales
  f = all_available();
  f.per_sm(F::kMxfp4RsFp8, 1) = 0;
  EXPECT_EQ(sm90_form_unavailable(F::kMxfp4RsFp8, d, f), "its kernels do not fit on this device");
  f.per_sm(F::kMxfp4RsBf16Pairs, 1) = 0;  // a GEMM 1 form needs no GEMM 2 kernel
  EXPECT_EQ(sm90_form_unavailable(F::kMxfp4RsBf16Pairs, d, f), "");
  MoeDesc odd = d;
  odd.intermediate_size = 1088;  // 2I = 2176: n tiles of 128, not of 256
  EXPECT_EQ(sm90_form_unavailable(F::kMxfp4RsFp8, odd, all_available()),
            "hidden = 4096 and 2 * intermediate = 2176 must be multiples of 256");
  EXPECT_NE(sm90_form_unavailable(F::kMxfp4DecodeSplit, odd, all_available()).find("multiples of 1024"),
            std::string::npos);
  MoeDesc exact = d;
  exact.numerics.exact_accumulation = true;
  EXPECT_NE(sm90_form_unavailable(F::kMxfp4WgmmaFp8, exact, all_available()).find("exact_accumulation"),
            std::string::npos);
  EXPECT_NE(sm90_form_unavailable(F::kMxfp4DecodeSplit, exact, all_available()).find("exact_accumulation"),
            std::string::npos);
  EXPECT_EQ(sm90_form_unavailable(F::kMxfp4Decode, exact, all_available()), "");
  Sm90Facts no_decode = all_available();
  no_decode.decode_unavailable = "16 rows of A do not fit";
  EXPECT_EQ(sm90_form_unavailable(F::kNvfp4DecodeSplit, flash_desc(Recipe::kNvfp4), no_decode),
            "16 rows of A do not fit");
}

TEST(Sm90Config, Mxfp4AutoFollowsTheThresholds) {
  const MoeDesc d = flash_desc();
  EXPECT_EQ(mxfp4_decode_max_tokens(d), kDecodeMaxRowsPerExpert * 256 / 6);  // T = 640
  MoeDesc pro_like = d;
  pro_like.fleet.num_experts = 384;
  EXPECT_EQ(mxfp4_decode_max_tokens(pro_like), 960);
  MoeDesc few = d;
  few.fleet.num_experts = 8;
  EXPECT_EQ(mxfp4_decode_max_tokens(few), kDecodeMaxTokens);

  // Split decode at T = 1, decode to 640 (both on FP8 wgmma), rs-fp8 with tails to 64 rows per expert (T = 2730),
  // then rs-fp8 with GEMM 1 on the bf16 pairs form where gemm1_bf16_pays (68.1-128.5 and from
  // 186.6 rows per expert), else plain.
  const Sm90Config c = selected(d);
  expect_well_formed(c, d);
  ASSERT_EQ(c.buckets.size(), 7u) << plan_of(c);
  EXPECT_TRUE(plan_of(c).starts_with(
      "0..1 mxfp4.decode-wgmma-split.16x64 | 2..640 mxfp4.decode-wgmma.16x128 | 641..2730 mxfp4.rs-fp8-tails.64x256 | 2731.."))
      << plan_of(c);
  // The decode buckets on FP8 wgmma; exact_accumulation, or pinned decode, keeps mma.sync's forms.
  MoeDesc exact = d;
  exact.numerics.exact_accumulation = true;
  EXPECT_EQ(plan_of(selected(exact)), "0..640 mxfp4.decode.16x128 | 641..8192 mxfp4.mma.64x128");
  KernelOverrides mma_decode;
  mma_decode.gemm = GemmKernel::kDecode;
  EXPECT_EQ(plan_of(selected(d, mma_decode)), "0..1 mxfp4.decode-split.16x64 | 2..8192 mxfp4.decode.16x128");
  const double per_token = 6.0 / 256.0;  // rows per expert per token
  for (size_t i = 3; i < c.buckets.size(); ++i) {
    const Sm90Bucket& b = c.buckets[i];
    const bool pairs = b.gemm1 == F::kMxfp4RsBf16Pairs;
    EXPECT_EQ(b.gemm2, F::kMxfp4RsFp8);
    EXPECT_EQ(gemm1_bf16_pays(b.min_tokens * per_token), pairs) << plan_of(c);
    EXPECT_EQ(gemm1_bf16_pays(b.max_tokens * per_token), pairs) << plan_of(c);
  }
  EXPECT_EQ(c.bucket(2731).gemm1, F::kMxfp4RsFp8);          // 64 rows: the 64-row tiles are as few
  EXPECT_EQ(c.bucket(4096).gemm1, F::kMxfp4RsBf16Pairs);    // 96 rows: one 128-token tile for two
  EXPECT_EQ(c.bucket(6144).gemm1, F::kMxfp4RsFp8);          // 144 rows: a pair and an odd tile cost three
  EXPECT_EQ(c.bucket(8192).gemm1, F::kMxfp4RsBf16Pairs);    // 192 rows
  EXPECT_EQ(c.bucket(8192).block_m(), 64);
  EXPECT_EQ(c.bucket(1).block_m(), kDecodeBlockM);
  EXPECT_FALSE(c.uses_16bit_activations());
  for (double rows = 69; rows < 128; rows += 0.5) EXPECT_TRUE(gemm1_bf16_pays(rows)) << rows;
  for (double rows = 130; rows < 186; rows += 0.5) EXPECT_FALSE(gemm1_bf16_pays(rows)) << rows;
  for (double rows = 187; rows < 400; rows += 0.5) EXPECT_TRUE(gemm1_bf16_pays(rows)) << rows;
  EXPECT_FALSE(gemm1_bf16_pays(60));
  EXPECT_NEAR(expected_gemm1_bf16_cost(96), kGemm1Bf16TileCost, 0.01);
  EXPECT_NEAR(expected_gemm1_bf16_cost(160), kGemm1Bf16TileCost + kGemm1Bf16OddTileCost, 0.01);
  EXPECT_NEAR(expected_expert_tiles(96, 64), 2.0, 0.01);
  EXPECT_NEAR(expected_expert_tiles(96, 128), 1.0, 0.01);
  EXPECT_NEAR(expected_expert_tiles(192, 64), 3.5, 0.02);

  const std::string out = described(c);
  EXPECT_NE(out.find("mxfp4.rs-fp8-tails.64x256 = T = 641..2730; blocks/SM 1 / 1"), std::string::npos) << out;
  EXPECT_NE(out.find("mxfp4.decode-wgmma-split.16x64 = T = 1..1; blocks/SM 3 / 3"), std::string::npos) << out;
  EXPECT_NE(out.find("mxfp4.wgmma-fp8.64x256 = available, not selected"), std::string::npos) << out;
  EXPECT_NE(out.find(fmt::format("mxfp4.rs-bf16-pairs.128x256 = GEMM 1 at T = {}..{}, ", c.bucket(4096).min_tokens,
                                 c.bucket(4096).max_tokens)),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("quantize_route = one launch at T = 1..640"), std::string::npos) << out;
  EXPECT_EQ(out.find("nvfp4."), std::string::npos) << out;  // the recipe's forms only
}

TEST(Sm90Config, Mxfp4AutoFallsBackWhereFormsCannotRun) {
  const MoeDesc d = flash_desc();
  // Without the pairs form, or with caller-quantized x: rs-fp8 throughout above the tails.
  Sm90Facts no_pairs = all_available();
  no_pairs.per_sm(F::kMxfp4RsBf16Pairs, 0) = 0;
  EXPECT_EQ(plan_of(selected(d, {}, no_pairs)),
            "0..1 mxfp4.decode-wgmma-split.16x64 | 2..640 mxfp4.decode-wgmma.16x128 | 641..2730 mxfp4.rs-fp8-tails.64x256 | "
            "2731..8192 mxfp4.rs-fp8.64x256");
  MoeDesc caller = d;
  caller.quantize_input = false;
  EXPECT_EQ(selected(caller).bucket(8192).gemm1, F::kMxfp4RsFp8);
  EXPECT_EQ(selected(caller).bucket(1).gemm1, F::kMxfp4DecodeWgmmaSplit);
  // FP8 wgmma where rs-fp8 does not fit.
  Sm90Facts no_rs = all_available();
  no_rs.per_sm(F::kMxfp4RsFp8, 0) = 0;
  const Sm90Config nw = selected(d, {}, no_rs);
  EXPECT_EQ(plan_of(nw),
            "0..1 mxfp4.decode-wgmma-split.16x64 | 2..640 mxfp4.decode-wgmma.16x128 | 641..8192 mxfp4.wgmma-fp8.64x256");
  EXPECT_NE(described(nw).find("mxfp4.rs-fp8.64x256 = unavailable: its kernels do not fit"), std::string::npos);
  // The tails form alone not fitting: rs-fp8 from the decode end.
  Sm90Facts no_tails = all_available();
  no_tails.per_sm(F::kMxfp4RsFp8Tails, 0) = 0;
  EXPECT_EQ(selected(d, {}, no_tails).bucket(1000).gemm1, F::kMxfp4RsFp8);
  expect_well_formed(selected(d, {}, no_tails), d);
  // Exact accumulation: decode (unsplit) and mma.sync.
  MoeDesc exact = d;
  exact.numerics.exact_accumulation = true;
  EXPECT_EQ(plan_of(selected(exact)), "0..640 mxfp4.decode.16x128 | 641..8192 mxfp4.mma.64x128");
  // The decode limit below the wgmma threshold: mma.sync fills the gap.
  KernelOverrides low;
  low.decode_max_tokens = 16;
  EXPECT_TRUE(plan_of(selected(d, low)).starts_with("0..1 mxfp4.decode-wgmma-split.16x64 | 2..16 mxfp4.decode-wgmma.16x128 | 17..255 mxfp4.mma.64x128 | 256..2730 ")) << plan_of(selected(d, low));
  // Unfolded weights: decode and mma.sync only.
  Sm90Facts unfolded = all_available();
  unfolded.w2_folded = false;
  EXPECT_EQ(plan_of(selected(d, {}, unfolded)),
            "0..1 mxfp4.decode-wgmma-split.16x64 | 2..640 mxfp4.decode-wgmma.16x128 | 641..8192 mxfp4.mma.64x128");
  EXPECT_NE(described(selected(d, {}, unfolded)).find("fold_fp8 = on (W13 folded, W2 E8M0 block scales)"),
            std::string::npos);
  // No decode: mma.sync over its range.
  Sm90Facts no_decode = all_available();
  no_decode.decode_unavailable = "too large";
  EXPECT_TRUE(plan_of(selected(d, {}, no_decode)).starts_with("0..640 mxfp4.mma.64x128 | 641..2730 mxfp4.rs-fp8-tails")) << plan_of(selected(d, {}, no_decode));
  EXPECT_NE(described(selected(d, {}, no_decode)).find("mxfp4.decode.16x128 = unavailable: too large"),
            std::string::npos);
  // A fleet that never leaves the decode range.
  MoeDesc small = d;
  small.fleet.max_tokens_per_rank = 64;
  EXPECT_EQ(plan_of(selected(small)), "0..1 mxfp4.decode-wgmma-split.16x64 | 2..64 mxfp4.decode-wgmma.16x128");
}

TEST(Sm90Config, Nvfp4AutoFollowsTheThresholds) {
  const MoeDesc nv = flash_desc(Recipe::kNvfp4);
  EXPECT_EQ(nvfp4_wgmma_min_tokens(nv), 938);
  const Sm90Config c = selected(nv);
  expect_well_formed(c, nv);
  EXPECT_EQ(plan_of(c),
            "0..1 nvfp4.decode-split.16x64 | 2..937 nvfp4.decode.16x128 | 938..8192 nvfp4.rs-f16.64x256");
  EXPECT_EQ(c.decode_max_tokens, 937);  // the decode bucket's end, as described
  EXPECT_TRUE(c.uses_16bit_activations());
  EXPECT_NE(described(c).find("quantize_route = two launches"), std::string::npos);
  // Without the 64x256 form, or where 2I is no multiple of 256: 128x128.
  Sm90Facts no_wide = all_available();
  no_wide.per_sm(F::kNvfp4RsF16Wide, 0) = 0;
  EXPECT_EQ(selected(nv, {}, no_wide).bucket(938).gemm1, F::kNvfp4RsF16);
  EXPECT_EQ(selected(nv, {}, no_wide).bucket(938).block_m(), kRsBlockM);
  MoeDesc odd = nv;
  odd.intermediate_size = 2048 + 64;
  EXPECT_EQ(selected(odd).bucket(938).gemm1, F::kNvfp4RsF16);
  // E = 512, top_k 4: 22 rows per expert at T = 2816, past the decode end: mma.sync between.
  MoeDesc wide_e = nv;
  wide_e.fleet.num_experts = 512;
  wide_e.top_k = 4;
  EXPECT_EQ(plan_of(selected(wide_e)),
            "0..1 nvfp4.decode-split.16x64 | 2..1536 nvfp4.decode.16x128 | 1537..2815 nvfp4.mma.64x128 | "
            "2816..8192 nvfp4.rs-f16.64x256");
  // decode_max_tokens moves the decode end alone: mma.sync up to the wgmma bucket, or wgmma after.
  KernelOverrides boundary;
  boundary.decode_max_tokens = 100;
  EXPECT_EQ(plan_of(selected(nv, boundary)),
            "0..1 nvfp4.decode-split.16x64 | 2..100 nvfp4.decode.16x128 | 101..937 nvfp4.mma.64x128 | "
            "938..8192 nvfp4.rs-f16.64x256");
  boundary.decode_max_tokens = 6000;
  EXPECT_EQ(plan_of(selected(nv, boundary)),
            "0..1 nvfp4.decode-split.16x64 | 2..6000 nvfp4.decode.16x128 | 6001..8192 nvfp4.rs-f16.64x256");
  // No decode; no wgmma; exact accumulation; a small fleet.
  Sm90Facts no_decode = all_available();
  no_decode.decode_unavailable = "16 rows of A do not fit";
  EXPECT_EQ(plan_of(selected(nv, {}, no_decode)), "0..937 nvfp4.mma.64x128 | 938..8192 nvfp4.rs-f16.64x256");
  Sm90Facts no_wgmma = all_available();
  no_wgmma.per_sm(F::kNvfp4RsF16, 1) = 0;
  EXPECT_EQ(plan_of(selected(nv, {}, no_wgmma)),
            "0..1 nvfp4.decode-split.16x64 | 2..1536 nvfp4.decode.16x128 | 1537..8192 nvfp4.mma.64x128");
  EXPECT_FALSE(selected(nv, {}, no_wgmma).uses_16bit_activations());
  MoeDesc exact = nv;
  exact.numerics.exact_accumulation = true;
  EXPECT_EQ(plan_of(selected(exact)), "0..1536 nvfp4.decode.16x128 | 1537..8192 nvfp4.mma.64x128");
  MoeDesc small = nv;
  small.fleet.max_tokens_per_rank = 512;
  EXPECT_EQ(plan_of(selected(small)), "0..1 nvfp4.decode-split.16x64 | 2..512 nvfp4.decode.16x128");
}

TEST(Sm90Config, PinnedFamiliesRunOneFormAtEveryT) {
  const MoeDesc d = flash_desc(), nv = flash_desc(Recipe::kNvfp4);
  KernelOverrides o;
  o.gemm = GemmKernel::kDecode;
  EXPECT_EQ(plan_of(selected(d, o)), "0..1 mxfp4.decode-split.16x64 | 2..8192 mxfp4.decode.16x128");
  EXPECT_EQ(plan_of(selected(nv, o)), "0..1 nvfp4.decode-split.16x64 | 2..8192 nvfp4.decode.16x128");
  o.gemm = GemmKernel::kMma;
  EXPECT_EQ(plan_of(selected(d, o)), "0..8192 mxfp4.mma.64x128");
  EXPECT_EQ(plan_of(selected(nv, o)), "0..8192 nvfp4.mma.64x128");
  o.gemm = GemmKernel::kWgmma;
  EXPECT_EQ(plan_of(selected(d, o)), "0..8192 mxfp4.wgmma-fp8.64x256");
  EXPECT_EQ(plan_of(selected(nv, o)), "0..8192 nvfp4.rs-f16.128x128");  // the family's first tile
  EXPECT_TRUE(selected(nv, o).uses_16bit_activations());
  o.tile = {64, 256};
  EXPECT_EQ(plan_of(selected(nv, o)), "0..8192 nvfp4.rs-f16.64x256");
  EXPECT_EQ(plan_of(selected(d, o)), "0..8192 mxfp4.wgmma-fp8.64x256");
  EXPECT_NE(described(selected(d, o)).find("gemm = wgmma 64x256 (overrides)"), std::string::npos);
  o.gemm = GemmKernel::kWgmmaRs;
  EXPECT_EQ(plan_of(selected(d, o)), "0..8192 mxfp4.rs-fp8.64x256");  // no tails, no pairs: the one form
  o.tile = {};
  EXPECT_EQ(plan_of(selected(d, o)), "0..8192 mxfp4.rs-fp8.64x256");
  o.fold_fp8 = false;  // fold_fp8 does not concern nvfp4
  o.gemm = GemmKernel::kWgmma;
  EXPECT_EQ(plan_of(selected(nv, o)), "0..8192 nvfp4.rs-f16.128x128");
}

TEST(Sm90Config, OverridesThatCannotBeHonouredAreRefusedNamingThem) {
  const MoeDesc d = flash_desc(), nv = flash_desc(Recipe::kNvfp4);
  MoeDesc exact = d;
  exact.numerics.exact_accumulation = true;
  for (const GemmKernel g : {GemmKernel::kWgmma, GemmKernel::kWgmmaRs}) {
    KernelOverrides o;
    o.gemm = g;
    expect_refused([&] { select_sm90_load_config(exact, o); }, ErrorCode::kInvalidArgument,
                   "contradicts desc.numerics.exact_accumulation = true");
    Sm90Facts unfolded = all_available();
    unfolded.w13_folded = false;
    expect_refused([&] { selected(d, o, unfolded); }, ErrorCode::kUnsupported, "not inside the FP8 window");
    o.fold_fp8 = false;
    expect_refused([&] { select_sm90_load_config(d, o); }, ErrorCode::kUnsupported, "needs folded weights");
  }
  KernelOverrides rs;
  rs.gemm = GemmKernel::kWgmmaRs;
  Sm90Facts no_fit = all_available();
  no_fit.per_sm(F::kMxfp4RsFp8, 1) = 0;
  expect_refused([&] { selected(d, rs, no_fit); }, ErrorCode::kUnsupported,
                 "overrides.gemm = wgmma-rs: mxfp4.rs-fp8.64x256 cannot run this layer: its kernels do not fit");
  MoeDesc odd = d;
  odd.intermediate_size = 1088;
  expect_refused([&] { selected(odd, rs); }, ErrorCode::kUnsupported,
                 "hidden = 4096 and 2 * intermediate = 2176 must be multiples of 256");
  expect_refused([&] { select_sm90_load_config(nv, rs); }, ErrorCode::kUnsupported,
                 "overrides.gemm = wgmma-rs: recipe 'nvfp4' has no such kernel family on SM90; allowed: auto, "
                 "decode, mma, wgmma");
  // decode-wgmma: not with exact accumulation, not for nvfp4; E8M0 block scales allowed.
  KernelOverrides dw;
  dw.gemm = GemmKernel::kDecodeWgmma;
  expect_refused([&] { select_sm90_load_config(exact, dw); }, ErrorCode::kInvalidArgument,
                 "overrides.gemm = decode-wgmma contradicts desc.numerics.exact_accumulation = true");
  expect_refused([&] { select_sm90_load_config(nv, dw); }, ErrorCode::kUnsupported,
                 "overrides.gemm = decode-wgmma: recipe 'nvfp4' has no such kernel family on SM90");
  Sm90Facts e8m0 = all_available();
  e8m0.w13_folded = e8m0.w2_folded = false;
  KernelOverrides dw_unfolded = dw;
  dw_unfolded.fold_fp8 = false;
  EXPECT_EQ(plan_of(selected(d, dw_unfolded, e8m0)),
            "0..1 mxfp4.decode-wgmma-split.16x64 | 2..8192 mxfp4.decode-wgmma.16x128");
  KernelOverrides decode;
  decode.gemm = GemmKernel::kDecode;
  Sm90Facts no_decode = all_available();
  no_decode.decode_unavailable = "16 rows of A do not fit";
  expect_refused([&] { selected(d, decode, no_decode); }, ErrorCode::kUnsupported, "16 rows of A do not fit");
  expect_refused([&] { selected(nv, decode, no_decode); }, ErrorCode::kUnsupported,
                 "nvfp4.decode.16x128 cannot run this layer: 16 rows of A do not fit");
  // Tiles: only with a warpgroup family, only that family's tiles.
  KernelOverrides tile;
  tile.tile = {64, 256};
  expect_refused([&] { select_sm90_load_config(d, tile); }, ErrorCode::kUnsupported,
                 "a tile is pinned together with overrides.gemm = wgmma or wgmma-rs");
  tile.gemm = GemmKernel::kWgmma;
  tile.tile = {128, 128};
  expect_refused([&] { select_sm90_load_config(d, tile); }, ErrorCode::kUnsupported,
                 "overrides.tile = 128x128 is not a tile of wgmma for recipe 'mxfp4' on SM90; allowed: 64x256");
  tile.tile = {96, 256};
  expect_refused([&] { select_sm90_load_config(nv, tile); }, ErrorCode::kUnsupported, "allowed: 128x128, 64x256");
  tile.tile = {64, 256};
  Sm90Facts nv_wide_no_fit = all_available();
  nv_wide_no_fit.per_sm(F::kNvfp4RsF16Wide, 0) = 0;
  expect_refused([&] { selected(nv, tile, nv_wide_no_fit); }, ErrorCode::kUnsupported,
                 "overrides.gemm = wgmma, overrides.tile = 64x256: nvfp4.rs-f16.64x256 cannot run");
  MoeDesc nv_odd = nv;
  nv_odd.intermediate_size = 2048 + 64;
  expect_refused([&] { selected(nv_odd, tile); }, ErrorCode::kUnsupported, "must be multiples of 256");
}

TEST(Sm90Config, DecodeSplitKOverride) {
  const MoeDesc d = flash_desc(), nv = flash_desc(Recipe::kNvfp4);
  KernelOverrides split;
  split.decode_split_k = 2;  // every decode bucket
  EXPECT_TRUE(plan_of(selected(d, split)).starts_with("0..640 mxfp4.decode-wgmma-split.16x64 | 641..2730 mxfp4.rs-fp8-t")) << plan_of(selected(d, split));
  EXPECT_TRUE(plan_of(selected(nv, split)).starts_with("0..937 nvfp4.decode-split.16x64 | ")) << plan_of(selected(nv, split));
  split.decode_split_k = 1;  // none
  EXPECT_TRUE(plan_of(selected(d, split)).starts_with("0..640 mxfp4.decode-wgmma.16x128 |")) << plan_of(selected(d, split));
  // Auto does not split where the split forms cannot run; a pin to 2 is refused naming why.
  split.decode_split_k = 2;
  MoeDesc narrow = d;
  narrow.fleet.hidden_size = 1536;  // not a multiple of 1024
  EXPECT_EQ(selected(narrow).bucket(1).gemm1, F::kMxfp4DecodeWgmma);
  expect_refused([&] { selected(narrow, split); }, ErrorCode::kUnsupported,
                 "overrides.decode_split_k = 2: mxfp4.decode-wgmma-split.16x64 cannot run this layer: each half of K");
  MoeDesc nv_small = nv;
  nv_small.intermediate_size = 256;  // below 512
  EXPECT_EQ(selected(nv_small).bucket(1).gemm1, F::kNvfp4Decode);
  expect_refused([&] { selected(nv_small, split); }, ErrorCode::kUnsupported, "at least 512");
  Sm90Facts no_split = all_available();
  no_split.per_sm(F::kMxfp4DecodeWgmmaSplit, 0) = 0;
  EXPECT_EQ(selected(d, {}, no_split).bucket(1).gemm1, F::kMxfp4DecodeWgmma);
  expect_refused([&] { selected(d, split, no_split); }, ErrorCode::kUnsupported, "do not fit on this device");
  MoeDesc exact = d;
  exact.numerics.exact_accumulation = true;
  expect_refused([&] { selected(exact, split); }, ErrorCode::kUnsupported, "exact_accumulation");
  KernelOverrides mma_split = split;
  mma_split.gemm = GemmKernel::kMma;
  expect_refused([&] { selected(d, mma_split); }, ErrorCode::kUnsupported,
                 "no T bucket runs the decode GEMMs it splits");
  KernelOverrides three;
  three.decode_split_k = 3;
  expect_refused([&] { select_sm90_load_config(d, three); }, ErrorCode::kInvalidArgument,
                 "overrides.decode_split_k = 3 is invalid; expected 1 or 2 parts");
}

TEST(Sm90Config, FusedQuantizeRouteIsAutoInMxfp4DecodeBucketsOrPinned) {
  const MoeDesc d = flash_desc();
  const Sm90Config c = selected(d);
  EXPECT_TRUE(c.fuses_quantize_route(c.bucket(1)));
  EXPECT_TRUE(c.fuses_quantize_route(c.bucket(640)));
  EXPECT_FALSE(c.fuses_quantize_route(c.bucket(641)));
  const Sm90Config nv = selected(flash_desc(Recipe::kNvfp4));
  EXPECT_FALSE(nv.fuses_quantize_route(nv.bucket(1)));
  KernelOverrides on;
  on.fuse_quantize_route = true;
  const Sm90Config pinned = selected(d, on);
  EXPECT_TRUE(pinned.fuses_quantize_route(pinned.bucket(8192)));
  EXPECT_NE(described(pinned).find("quantize_route = one launch at T = 1..8192"), std::string::npos)
      << described(pinned);
  KernelOverrides off;
  off.fuse_quantize_route = false;
  const Sm90Config unpinned = selected(d, off);
  EXPECT_FALSE(unpinned.fuses_quantize_route(unpinned.bucket(1)));
  MoeDesc caller = d;
  caller.quantize_input = false;
  EXPECT_FALSE(selected(caller).fuses_quantize_route(selected(caller).bucket(1)));
  expect_refused([&] { select_sm90_load_config(caller, on); }, ErrorCode::kUnsupported,
                 "overrides.fuse_quantize_route = true: this layer does not quantize x");
  KernelOverrides negative;
  negative.decode_max_tokens = -1;
  expect_refused([&] { select_sm90_load_config(d, negative); }, ErrorCode::kInvalidArgument,
                 "overrides.decode_max_tokens = -1 is invalid");
}

// The one-token layer (a whole-layer form) runs T = 1 of mxfp4 where it fits and the layer
// quantizes x: pinned on, or by auto where one token's experts hold at most
// kOneTokenAutoMaxWeightBytes, unless pinned off or the decode split is pinned; pinned on, it is
// refused naming why where it cannot run.
TEST(Sm90Config, OneTokenLayerRunsTEqualsOneWhereItCan) {
  const MoeDesc d = flash_desc();
  EXPECT_EQ(one_token_weight_bytes(d), 6 * 3 * int64_t{4096} * 2048 * 17 / 32);  // 76.5 MiB
  EXPECT_EQ(selected(d).bucket(1).gemm1, F::kMxfp4DecodeWgmmaSplit);
  // The tiny preset's shape: 0.2 MiB, on the one-token layer; the decode forms from T = 2.
  MoeDesc tiny = d;
  tiny.fleet = {16, 256, 256};
  tiny.intermediate_size = 128;
  tiny.top_k = 4;
  ASSERT_LE(one_token_weight_bytes(tiny), kOneTokenAutoMaxWeightBytes);
  EXPECT_EQ(selected(tiny).bucket(1).gemm1, F::kMxfp4OneToken);
  EXPECT_EQ(selected(tiny).bucket(2).gemm1, F::kMxfp4DecodeWgmma);
  EXPECT_FALSE(selected(tiny).fuses_quantize_route(selected(tiny).bucket(1)));  // it quantizes x itself
  // At the bound and one expert row past it.
  MoeDesc at = d;
  at.top_k = 1;
  at.intermediate_size = 2560;
  ASSERT_LE(one_token_weight_bytes(at), kOneTokenAutoMaxWeightBytes);
  EXPECT_EQ(selected(at, {}).bucket(1).gemm1, F::kMxfp4OneToken) << one_token_weight_bytes(at);
  at.intermediate_size += 128;  // not whole K halves of 512: the unsplit decode
  EXPECT_EQ(selected(at, {}).bucket(1).gemm1, F::kMxfp4DecodeWgmma) << one_token_weight_bytes(at);
  KernelOverrides tiny_off;
  tiny_off.one_token_layer = false;
  EXPECT_EQ(selected(tiny, tiny_off).bucket(1).gemm1, F::kMxfp4DecodeWgmma);  // the split forms need K halves of 512
  KernelOverrides on;
  on.one_token_layer = true;
  const Sm90Config c = selected(d, on);
  EXPECT_EQ(c.bucket(1).gemm1, F::kMxfp4OneToken);
  EXPECT_EQ(c.bucket(1).max_tokens, 1);
  EXPECT_EQ(c.bucket(2).gemm1, F::kMxfp4DecodeWgmma);
  EXPECT_TRUE(c.uses_one_token_layer());
  MoeDesc exact = d;
  exact.numerics.exact_accumulation = true;  // the decode chain's bits: allowed
  EXPECT_EQ(selected(exact, on).bucket(1).gemm1, F::kMxfp4OneToken);
  // Where it cannot run: the split decode at T = 1, and the reason in the config.
  Sm90Facts no_fit = all_available();
  no_fit.per_sm(F::kMxfp4OneToken, 0) = no_fit.per_sm(F::kMxfp4OneToken, 1) = 0;
  const Sm90Config nf = selected(d, {}, no_fit);
  EXPECT_EQ(nf.bucket(1).gemm1, F::kMxfp4DecodeWgmmaSplit);
  EXPECT_FALSE(nf.uses_one_token_layer());
  EXPECT_NE(described(nf).find("mxfp4.one-token.1x16 = unavailable: its down kernel's 12 groups of 16 W2 rows x I "
                               "per block and its gate_up kernel do not fit on one SM together"),
            std::string::npos)
      << described(nf);
  MoeDesc caller = d;
  caller.quantize_input = false;
  EXPECT_EQ(selected(caller).bucket(1).gemm1, F::kMxfp4DecodeWgmmaSplit);
  EXPECT_NE(sm90_form_unavailable(F::kMxfp4OneToken, caller, all_available()).find("x comes quantized"),
            std::string::npos);
  MoeDesc odd = d;
  odd.intermediate_size = 2048 + 64;
  EXPECT_EQ(sm90_form_unavailable(F::kMxfp4OneToken, odd, all_available()),
            "hidden = 4096 and intermediate = 2112 must be multiples of 128");
  MoeDesc many_slots = d;
  many_slots.top_k = kOneTokenMaxTopK + 1;
  EXPECT_EQ(sm90_form_unavailable(F::kMxfp4OneToken, many_slots, all_available()),
            fmt::format("top_k = {}: its down kernel keeps at most {} slots", kOneTokenMaxTopK + 1, kOneTokenMaxTopK));
  EXPECT_NE(sm90_form_unavailable(F::kMxfp4OneToken, flash_desc(Recipe::kNvfp4), all_available()).find("recipe 'mxfp4'"),
            std::string::npos);
  EXPECT_EQ(selected(flash_desc(Recipe::kNvfp4)).bucket(1).gemm1, F::kNvfp4DecodeSplit);
  // Pinned off, or the decode split pinned: the decode chain at T = 1.
  KernelOverrides off;
  off.one_token_layer = false;
  EXPECT_EQ(selected(d, off).bucket(1).gemm1, F::kMxfp4DecodeWgmmaSplit);
  KernelOverrides split;
  split.decode_split_k = 1;
  EXPECT_EQ(selected(d, split).bucket(1).gemm1, F::kMxfp4DecodeWgmma);
  // Pinned on where it cannot run, or with another pin it contradicts: refused, naming it.
  on.decode_split_k = 2;
  EXPECT_EQ(selected(d, on).bucket(1).gemm1, F::kMxfp4OneToken);  // the split from T = 2
  EXPECT_EQ(selected(d, on).bucket(2).gemm1, F::kMxfp4DecodeWgmmaSplit);
  on.decode_split_k.reset();
  expect_refused([&] { selected(d, on, no_fit); }, ErrorCode::kUnsupported,
                 "overrides.one_token_layer = true: mxfp4.one-token.1x16 cannot run this layer: its down kernel's");
  expect_refused([&] { select_sm90_load_config(caller, on); }, ErrorCode::kUnsupported,
                 "overrides.one_token_layer = true: the one-token layer runs the mxfp4 recipe on a layer that "
                 "quantizes x");
  KernelOverrides on_mma = on;
  on_mma.gemm = GemmKernel::kMma;
  expect_refused([&] { select_sm90_load_config(d, on_mma); }, ErrorCode::kUnsupported, "gemm = mma");
  expect_refused([&] { select_sm90_load_config(flash_desc(Recipe::kNvfp4), on); }, ErrorCode::kUnsupported,
                 "recipe 'nvfp4'");
  EXPECT_EQ(on.str(), "one_token_layer=true");
}

}  // namespace
}  // namespace moe_ep::cuda
