// The SM90 grouped-GEMM forms (cuda/policy/sm90_forms.h) of mxfp4 on the device, and the plans
// that run them.
//
// Kernel level (gemm_harness.h): routing + GEMM 1 + GEMM 2 run on the same routed rows once with
// the mma.sync form on unfolded weights (E8M0 block scales), the reference, and once with each
// other form on folded weights (shifts + column factors): FP8 wgmma, rs-fp8 (the weights decoded
// into registers, four consumers), rs-fp8 with narrow tail tiles, the bf16 pairs GEMM 1
// (128-token tiles over 64-row list tiles, its x converted from the same Q8 to bf16) with rs-fp8's
// GEMM 2, and the decode forms; on the tiny shape and the deepseek-v4-flash shape (fewer
// experts), at T = 1, 7, 300 and more, with -1 holes, an idle expert and one expert taking every
// row; outputs NaN-poisoned before each run. h (dequantized) and o agree with mma.sync to the
// wgmma threshold (the warpgroup forms) or the same-recipe one (the mma.sync-based decode forms);
// GEMM 2 is compared on the same h (isolating it) and along the whole chain; the share of
// bitwise-equal bytes is printed. rs-fp8 with tails must give bitwise rs-fp8's outputs, and the
// pairs run's GEMM 2 (rs-fp8's kernel) bitwise rs-fp8's on the same h. Each form reruns 20 times
// bitwise identically; the decode form with K split in two stays within the threshold of the
// decode form; a small case runs under compute-sanitizer.
//
// Plan level (host only): the steps, forms and grids of the Sm90Pipeline built from a selected
// config (cuda/policy/sm90_config.h), and the persistent grids' cap.
//
// Layer level: the layer forced onto the warpgroup families (KernelOverrides::gemm = wgmma,
// wgmma-rs) or on auto (which reaches the bf16 pairs GEMM 1 at large T) against the CPU layer on
// the tiny preset and deepseek-v4-flash (T = 1, 7, 300, 1024, 4096, 6144, a subset of rows for the
// large ones), structured routings, and 20 bitwise reruns; nvfp4's f16 wgmma forms likewise.
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "cuda/plan.h"
#include "cuda/policy/sm90_config.h"
#include "cuda/policy/sm90_policy_fixtures.h"
#include "cuda/sm90_pipeline.h"
#include "cuda_test_util.h"
#include "gemm_harness.h"
#include "moe_ep/backend.h"
#include "moe_ep/formats.h"
#include "testing/presets.h"

namespace moe_ep::cuda {
namespace {

using namespace gemmtest;

// Every mxfp4 form on folded weights a shape can run: the warpgroup forms (wgmma_variants()), the
// decode forms (mma.sync and FP8 wgmma), and each with K split in two where each half of K is whole
// 512-wide chunks.
std::vector<Kernels> compared_forms(const Shape& s) {
  std::vector<Kernels> forms = wgmma_variants();
  forms.emplace_back(Sm90Form::kMxfp4Decode);
  forms.emplace_back(Sm90Form::kMxfp4DecodeWgmma);
  if (s.H % 1024 == 0 && s.I % 1024 == 0) {
    forms.emplace_back(Sm90Form::kMxfp4DecodeSplit);
    forms.emplace_back(Sm90Form::kMxfp4DecodeWgmmaSplit);
  }
  return forms;
}

// The threshold of a form against mma.sync: the warpgroup forms' k32 sums (FP8 wgmma promotion,
// bf16 products summed over K, the decode-wgmma k32 sums) have their own; the mma.sync decode forms
// run mma.sync's products.
double tolerance_of(const Kernels& k) {
  const bool warpgroup = sm90_form(k.gemm1).consumers > 0 || sm90_form(k.gemm2).consumers > 0;
  return warpgroup ? cudatest::wgmma_recipe_tolerance() : cudatest::same_recipe_tolerance(Recipe::kMxfp4);
}

bool bitwise_equal(const GemmOutputs& a, const GemmOutputs& b) {
  return a.h == b.h && a.h_scale == b.h_scale && a.o == b.o;
}

void compare_kernels(const Shape& s, const std::vector<RoutingCase>& cases, uint64_t seed) {
  const DeviceWeights& w = cached_device_weights(s, seed);
  for (const RoutingCase& c : cases) {
    const DeviceProblem p = make_problem(s, make_inputs(s, c, seed + static_cast<uint64_t>(c.T)));
    GemmRun mma(s, p, w, Kernels{});
    mma.gemm1();
    mma.gemm2();
    const GemmOutputs ref = mma.outputs();
    ASSERT_FALSE(ref.o.empty());
    std::optional<GemmOutputs> rs_fp8_chain, rs_fp8_same_h;  // the plain rs-fp8 form's outputs
    for (const Kernels& k : compared_forms(s)) {
      SCOPED_TRACE(fmt::format("{} {} T={} {}", s.name, c.name, c.T, k.name()));
      const double tol = tolerance_of(k);
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
      // Narrow tail tiles compute their rows' columns alone with the same k32 sums: rs-fp8's bits.
      // The pairs run's GEMM 2 is rs-fp8's kernel on the same routed rows: on the same h, its bits.
      if (k.gemm1 == Sm90Form::kMxfp4RsFp8 && k.gemm2 == Sm90Form::kMxfp4RsFp8) {
        rs_fp8_chain = chain;
        rs_fp8_same_h = same_h;
      } else if (k.gemm1 == Sm90Form::kMxfp4RsFp8Tails) {
        ASSERT_TRUE(rs_fp8_chain.has_value()) << "the rs-fp8 form runs first";
        EXPECT_TRUE(bitwise_equal(chain, *rs_fp8_chain)) << "the narrow tail tiles changed rs-fp8's outputs";
      } else if (k.gemm1 == Sm90Form::kMxfp4RsBf16Pairs) {
        ASSERT_TRUE(rs_fp8_same_h.has_value()) << "the rs-fp8 form runs first";
        EXPECT_TRUE(same_h.o == rs_fp8_same_h->o) << "GEMM 2 (rs-fp8) on the same h differs from rs-fp8's";
      }
      fmt::print("[ wgmma   ] {:<10} {:<22} T={:<5} {:<52} rows={:<6} h err={:.2e} (bytes equal {:.4f}, scales "
                 "{:.4f})  o err={:.2e} (equal {:.4f})  chain err={:.2e}\n",
                 s.name, c.name, c.T, k.name(), ref.h.size() / s.I, err_h, equal_share(same_h.h, ref.h),
                 equal_share(same_h.h_scale, ref.h_scale), err_o2, equal_share(same_h.o, ref.o), err_chain);
    }
  }
}

using policytest::all_available;
using policytest::flash_desc;
using policytest::selected;

// The plan lines of a pipeline as `Layer::info().config` prints them.
template <class Described>
std::string described(const Described& d) {
  SelectedConfig out;
  d.describe(out);
  return out.str();
}

// The plan's steps, forms and grids per bucket (host only: building the launch table launches
// nothing).
TEST(Sm90Config, PlanStepsFollowTheConfig) {
  MoeDesc d = flash_desc();
  d.fleet.max_tokens_per_rank = 1024;
  auto plan_of = [&](const MoeDesc& desc, const KernelOverrides& o) {
    const Sm90Config c = selected(desc, o);
    LayerShape shape{desc.fleet.num_experts, desc.fleet.hidden_size, desc.intermediate_size, desc.top_k,
                     desc.fleet.max_tokens_per_rank, desc.recipe};
    shape.activations_16bit = c.uses_16bit_activations();
    shape.one_token = c.uses_one_token_layer();
    const Plan plan = make_plan(shape);
    // Host memory, left uninitialized: the launch table only forms pointers into it.
    const std::unique_ptr<std::byte[]> workspace(new std::byte[plan.workspace.total_bytes]);
    const Sm90Pipeline pipeline(c, plan, desc.quantize_input, 10.0f, {}, {}, workspace.get(), nullptr);
    return described(pipeline);
  };
  // Auto: mxfp4's decode buckets (K split in two at T = 1) quantize and route in one launch, the
  // rs-fp8 bucket with narrow tails in two; the persistent grids are capped at 1 block x 132 SMs,
  // n tiles of 256 rows (2I = H = 4096: 16 each).
  const std::string plain = plan_of(d, {});
  EXPECT_NE(plain.find("plan T=1..1: mxfp4.decode-wgmma-split.16x64, routing m tiles of 16 rows; gemm1 grid m_tiles16(T) x 1, "
                       "gemm2 grid m_tiles16(T) x 1; 4 steps (quantize x + routing (one launch), gemm1, gemm2, combine)"),
            std::string::npos) << plain;
  // The one-token layer's two launches at T = 1 (down: 256 column groups of 16, 2 per block).
  KernelOverrides one_token;
  one_token.one_token_layer = true;
  EXPECT_NE(plan_of(d, one_token).find("plan T=1..1: mxfp4.one-token.1x16; gate_up grid 132 (SMs), down grid 128 (2 "
                                       "column groups of 16 per block); 2 steps (quantize x + gate_up + SwiGLU (one "
                                       "token), W2 to shared memory + Q8 of h + down + combine (one token))"),
            std::string::npos) << plan_of(d, one_token);
  EXPECT_NE(plain.find("plan T=2..640: mxfp4.decode-wgmma.16x128, routing m tiles of 16 rows; gemm1 grid m_tiles16(T) x 1, "
                       "gemm2 grid m_tiles16(T) x 1; 4 steps (quantize x + routing (one launch), gemm1, gemm2, combine)"),
            std::string::npos) << plain;
  EXPECT_NE(plain.find("plan T=641..1024: mxfp4.rs-fp8-tails.64x256, routing m tiles of 64 rows; gemm1 grid "
                       "min(m_tiles64(T) x 16, 132), gemm2 grid min(m_tiles64(T) x 16, 132); 5 steps (quantize x, "
                       "routing, gemm1, gemm2, combine)"),
            std::string::npos) << plain;
  // Up to T = 8192: the buckets with GEMM 1 on the bf16 pairs form quantize x straight to bf16
  // (no conversion launch) and route in 64-row list tiles for both forms.
  MoeDesc big = d;
  big.fleet.max_tokens_per_rank = 8192;
  const Sm90Config big_config = selected(big, {});
  const Sm90Bucket& pairs = big_config.bucket(4096);
  ASSERT_EQ(pairs.gemm1, Sm90Form::kMxfp4RsBf16Pairs);
  ASSERT_EQ(pairs.gemm2, Sm90Form::kMxfp4RsFp8);
  const std::string big_plan = plan_of(big, {});
  EXPECT_NE(big_plan.find(fmt::format("plan T={}..{}: mxfp4.rs-bf16-pairs.128x256 + mxfp4.rs-fp8.64x256, routing m "
                                      "tiles of 64 rows; gemm1 grid min(m_tiles64(T) x 16, 132), gemm2 grid "
                                      "min(m_tiles64(T) x 16, 132); 5 steps (quantize x to bf16, routing, gemm1, gemm2, "
                                      "combine)",
                                      pairs.min_tokens, pairs.max_tokens)),
            std::string::npos) << big_plan;
  const Sm90Bucket& plain_fp8 = big_config.bucket(6144);
  ASSERT_EQ(plain_fp8.gemm1, Sm90Form::kMxfp4RsFp8);
  EXPECT_NE(big_plan.find(fmt::format("plan T={}..{}: mxfp4.rs-fp8.64x256, routing m tiles of 64 rows; ",
                                      plain_fp8.min_tokens, plain_fp8.max_tokens)),
            std::string::npos) << big_plan;
  KernelOverrides unfused;
  unfused.fuse_quantize_route = false;
  EXPECT_EQ(plan_of(d, unfused).find("(one launch)"), std::string::npos) << plan_of(d, unfused);
  KernelOverrides split;
  split.decode_split_k = 2;
  const std::string split_plan = plan_of(d, split);
  EXPECT_NE(split_plan.find("plan T=1..640: mxfp4.decode-wgmma-split.16x64, routing m tiles of 16 rows"), std::string::npos)
      << split_plan;
  KernelOverrides fuse;
  fuse.fuse_quantize_route = true;
  const std::string fused = plan_of(d, fuse);
  EXPECT_NE(fused.find("4 steps (quantize x + routing (one launch), gemm1, gemm2, combine)"), std::string::npos)
      << fused;
  EXPECT_EQ(fused.find("routing, gemm1"), std::string::npos) << fused;
  // The pairs bucket fused: x quantized to bf16 and routed in one launch.
  const std::string big_fused = plan_of(big, fuse);
  EXPECT_NE(big_fused.find("mxfp4.rs-bf16-pairs.128x256 + mxfp4.rs-fp8.64x256, routing m tiles of 64 rows"),
            std::string::npos) << big_fused;
  EXPECT_NE(big_fused.find("4 steps (quantize x to bf16 + routing (one launch), gemm1, gemm2, combine)"),
            std::string::npos) << big_fused;
  // The families pinned: one form at every T.
  KernelOverrides wgmma;
  wgmma.gemm = GemmKernel::kWgmma;
  EXPECT_NE(plan_of(d, wgmma).find("plan T=1..1024: mxfp4.wgmma-fp8.64x256, routing m tiles of 64 rows; gemm1 grid "
                                   "min(m_tiles64(T) x 16, 132), gemm2 grid min(m_tiles64(T) x 16, 132); 5 steps "
                                   "(quantize x, routing, gemm1, gemm2, combine)"),
            std::string::npos) << plan_of(d, wgmma);
  KernelOverrides wgmma_rs;
  wgmma_rs.gemm = GemmKernel::kWgmmaRs;
  EXPECT_NE(plan_of(d, wgmma_rs).find("plan T=1..1024: mxfp4.rs-fp8.64x256, routing m tiles of 64 rows"),
            std::string::npos) << plan_of(d, wgmma_rs);
  KernelOverrides mma;
  mma.gemm = GemmKernel::kMma;
  EXPECT_NE(plan_of(d, mma).find("plan T=1..1024: mxfp4.mma.64x128, routing m tiles of 64 rows; gemm1 grid "
                                 "min(m_tiles64(T) x 32, 132), gemm2 grid min(m_tiles64(T) x 32, 132)"),
            std::string::npos) << plan_of(d, mma);
  // nvfp4: NVFP4 of h between the GEMMs; the f16 wgmma forms convert x and h to f16.
  const MoeDesc nv_desc = flash_desc(Recipe::kNvfp4);
  EXPECT_NE(plan_of(nv_desc, fuse).find("(quantize x + routing (one launch), gemm1, nvfp4 of h, gemm2, combine)"),
            std::string::npos) << plan_of(nv_desc, fuse);
  KernelOverrides nv_wgmma_fused = fuse;
  nv_wgmma_fused.gemm = GemmKernel::kWgmma;
  const std::string nv_wgmma_plan = plan_of(nv_desc, nv_wgmma_fused);
  EXPECT_NE(nv_wgmma_plan.find("nvfp4.rs-f16.128x128, routing m tiles of 128 rows; gemm1 grid min(m_tiles64(T) x 32, "
                               "132), gemm2 grid min(m_tiles64(T) x 32, 132); 7 steps (quantize x + routing (one "
                               "launch), x to f16, gemm1, nvfp4 of h, h to f16, gemm2, combine)"),
            std::string::npos) << nv_wgmma_plan;
  const std::string nv = plan_of(nv_desc, {});
  EXPECT_NE(nv.find("nvfp4.decode-split.16x64, routing m tiles of 16 rows"), std::string::npos) << nv;
  EXPECT_NE(nv.find("(quantize x, routing, gemm1, nvfp4 of h, gemm2, combine)"), std::string::npos) << nv;
  EXPECT_NE(nv.find("nvfp4.rs-f16.64x256, routing m tiles of 64 rows"), std::string::npos) << nv;
  MoeDesc caller = d;
  caller.quantize_input = false;
  EXPECT_NE(plan_of(caller, {}).find("4 steps (routing, gemm1, gemm2, combine)"), std::string::npos)
      << plan_of(caller, {});
}

// A persistent form's grid: m tiles x its n tiles, capped at its resident blocks; a decode form's:
// the 16-row m-tile bound.
TEST(Sm90Config, LaunchGridsCapPersistentKernelsAtTheResidentBlocks) {
  const Plan plan = make_plan({256, 4096, 2048, 6, 8192, Recipe::kMxfp4});
  for (const Sm90Form form : {Sm90Form::kMxfp4Mma, Sm90Form::kMxfp4WgmmaFp8, Sm90Form::kMxfp4RsFp8,
                              Sm90Form::kNvfp4RsF16}) {
    SCOPED_TRACE(sm90_form_name(form));
    const int block_n = sm90_form(form).block_n;
    ASSERT_TRUE(sm90_form(form).persistent);
    const GridRule rule{kGemmBlockM, 4096 / block_n, 132};
    EXPECT_EQ(launch_grid(plan, rule, 1), std::min<int64_t>(132, plan.m_tile_bound(1) * 4096 / block_n));
    EXPECT_EQ(launch_grid(plan, rule, 8192), 132);
  }
  EXPECT_FALSE(sm90_form(Sm90Form::kMxfp4Decode).persistent);
  EXPECT_EQ(launch_grid(plan, GridRule{kDecodeBlockM, 1, 0}, 1), plan.m_tile_bound(1, kDecodeBlockM));
  EXPECT_EQ(launch_grid(plan, GridRule{kDecodeBlockM, 1, 0}, 8192), plan.m_tile_bound(8192, kDecodeBlockM));
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
  for (const Kernels& k : compared_forms(s)) {
    const std::string name = k.name();
    GemmRun run(s, p, w, k);
    run.gemm1();
    run.gemm2();
    const GemmOutputs first = run.outputs();
    ASSERT_FALSE(first.o.empty()) << name;
    for (int rep = 0; rep < 20; ++rep) {
      run.poison();
      run.gemm1();
      run.gemm2();
      const GemmOutputs again = run.outputs();
      ASSERT_EQ(again.h, first.h) << name << " rerun " << rep;
      ASSERT_EQ(again.h_scale, first.h_scale) << name << " rerun " << rep;
      ASSERT_EQ(again.o, first.o) << name << " rerun " << rep;
    }
  }
}

// The decode form with K split in two halves per block: the same products, summed as two halves
// (so within the recipe threshold of the decode form, not bitwise), every row written
// (NaN-poisoned outputs), the same bits on every rerun; K not whole chunks per half (tiny: 2 k
// steps) refused. Flash/E32 shape: tiles of 1, 7 and 16 rows, holes, one expert.
TEST_F(Sm90WgmmaKernels, SplitDecodeMatchesTheDecodeKernels) {
  const Shape s{"flash/E32", 32, 4096, 2048, 6};
  const DeviceWeights& w = cached_device_weights(s, 47);
  const double tol = cudatest::same_recipe_tolerance(Recipe::kMxfp4);  // fp32 sums, reordered
  const Kernels regular(Sm90Form::kMxfp4Decode), split(Sm90Form::kMxfp4DecodeSplit);
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
    ASSERT_FALSE(ra.o.empty());
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
    EXPECT_TRUE(bitwise_equal(again, chain)) << "a rerun differs";
    fmt::print("[ split   ] {:<22} T={:<4} h err={:.2e} (bytes equal {:.4f})  o err={:.2e}\n", c.name, c.T, err_h,
               equal_share(same_h.h, ra.h), err_o);
  }
  Gemm1Params tiny;  // K = 256: 2 k steps, not whole chunks per half
  tiny.op.n = 256;
  tiny.op.k = 256;
  EXPECT_EQ(sm90_form_kernels(Sm90Form::kMxfp4DecodeSplit).launch1(tiny, 1, nullptr), cudaErrorInvalidValue);
}

// Small case for compute-sanitizer (racecheck / memcheck / synccheck): every form the tiny shape
// runs (the warpgroup forms and the decode form) against mma.sync, a few tiles.
TEST_F(Sm90WgmmaKernels, SmallCaseForSanitizers) {
  const Shape s{"tiny", 16, 256, 128, 4};
  compare_kernels(s, {{"random, 10% holes", 150, 0.1}}, 77);
}

}  // namespace
}  // namespace moe_ep::cuda

// ---- layer level -------------------------------------------------------------------------------
namespace moe_ep::cudatest {
namespace {

using testsupport::Inputs;
using testsupport::Problem;

// The mxfp4 layer on the tiny preset forced onto each warpgroup family (FP8 wgmma; rs-fp8, also
// with its one tile pinned) and on auto (decode, then rs-fp8 and, at T = 4096, GEMM 1 on the bf16
// pairs form) against the CPU layer, at the wgmma threshold.
TEST(Sm90WgmmaLayer, TinyMatchesCpuWithStructuredRoutings) {
  MOE_EP_REQUIRE_CUDA();
  struct Variant {
    const char* name;
    GemmKernel gemm;
    const char* tile;  // "" = the family's own choice
  };
  for (const Variant v : {Variant{"wgmma", GemmKernel::kWgmma, ""}, Variant{"wgmma 64x256", GemmKernel::kWgmma, "64x256"},
                          Variant{"wgmma-rs", GemmKernel::kWgmmaRs, ""},
                          Variant{"wgmma-rs 64x256", GemmKernel::kWgmmaRs, "64x256"},
                          Variant{"auto", GemmKernel::kAuto, ""}}) {
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
      int64_t nan = 0;
      for (uint16_t b : y) nan += std::isnan(bf16_to_float(b));
      EXPECT_EQ(nan, 0) << what << " " << tile << ": unwritten (NaN-poisoned) outputs";
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

// A warpgroup family forced on the deepseek-v4-flash layer of one recipe (or auto), and a form
// (or pair of forms) its plan must run.
struct FlashKernel {
  const char* name;
  GemmKernel gemm;
  Recipe recipe;
  const char* tile;  // "" = the family's own choice
  const char* plan_runs;
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
  const std::string plan = layer->info().config.str();
  EXPECT_NE(plan.find(fk.plan_runs), std::string::npos) << plan;
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
                         ::testing::Values(
                             // auto: T = 4096 (96 rows per expert) runs GEMM 1 on the bf16 pairs form
                             FlashKernel{"auto", GemmKernel::kAuto, Recipe::kMxfp4, "",
                                         "mxfp4.rs-bf16-pairs.128x256 + mxfp4.rs-fp8.64x256, routing m tiles of 64 rows"},
                             FlashKernel{"wgmma", GemmKernel::kWgmma, Recipe::kMxfp4, "",
                                         "T=1..6144: mxfp4.wgmma-fp8.64x256, routing m tiles of 64 rows"},
                             FlashKernel{"wgmma_rs", GemmKernel::kWgmmaRs, Recipe::kMxfp4, "",
                                         "T=1..6144: mxfp4.rs-fp8.64x256, routing m tiles of 64 rows"},
                             FlashKernel{"nvfp4_wgmma", GemmKernel::kWgmma, Recipe::kNvfp4, "",
                                         "T=1..6144: nvfp4.rs-f16.128x128, routing m tiles of 128 rows"},
                             FlashKernel{"nvfp4_wgmma_64x256", GemmKernel::kWgmma, Recipe::kNvfp4, "64x256",
                                         "T=1..6144: nvfp4.rs-f16.64x256, routing m tiles of 64 rows"}),
                         [](const ::testing::TestParamInfo<FlashKernel>& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace moe_ep::cudatest
