// The SM90 layer against the CPU layer on the tiny preset (H=256, I=128, E=16, K=4): both
// recipes, T = 0, 1, 7, 128, 4096, structured routings (an idle expert, one expert taking every
// row, -1 holes, tokens with no valid slot, repeated experts), caller-quantized activations,
// int32/int64 ids, bf16 and device-resident weights, fast math; then determinism, graph replay,
// the device error flag, and a small case for compute-sanitizer on every GEMM family pinned in turn.
#include <cmath>
#include <random>

#include <fmt/format.h>
#include <cstdlib>

#include <gtest/gtest.h>

#include "cuda/errors.h"
#include "cuda_test_util.h"
#include "moe_ep/formats.h"

namespace moe_ep::cudatest {
namespace {

using testsupport::Inputs;
using testsupport::Problem;
using testsupport::WeightSet;

WeightFormat native_format(const Problem& p) {
  return p.traits().native_format;
}

Problem tiny(const std::string& family, int64_t max_tokens) {
  Problem p = testsupport::tiny_problem(family);
  p.max_tokens = max_tokens;
  return p;
}

// Runs `in` on the CPU (reference) and then on the GPU; checks every element was written and
// the relative error. Returns the GPU output.
std::vector<uint16_t> expect_matches_cpu(const Problem& p, const WeightSet& w, const Inputs& in,
                                         const std::string& what, double tolerance = -1.0) {
  const std::vector<double> ref = cpu_reference(p, w.pack(), in);
  auto layer = make_gpu_layer(p, w.pack());
  const DeviceInputs d = to_device(p, in);
  const std::vector<uint16_t> y = run_on_gpu(*layer, d);
  EXPECT_EQ(layer->read_error_flags(), 0u) << what;
  const double err = relative_error_rows(y, ref, p.hidden);
  int64_t same = 0;
  for (size_t i = 0; i < y.size(); ++i) same += bf16_to_float(y[i]) == ref[i];
  EXPECT_LE(err, tolerance < 0 ? same_recipe_tolerance(p.recipe) : tolerance) << what << ": " << p.str() << " T=" << in.tokens;
  fmt::print("[ sm90    ] {:<44} T={:<5} rel_err={:.3e} bitwise-equal={:.4f}\n", what, in.tokens,
             err, y.empty() ? 1.0 : static_cast<double>(same) / y.size());
  return y;
}

class Sm90LayerTiny : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override { MOE_EP_REQUIRE_CUDA(); }
};

TEST_P(Sm90LayerTiny, MatchesCpuAcrossTokenCounts) {
  const Problem p = tiny(GetParam(), 4096);
  const WeightSet w = testsupport::random_weights(p, native_format(p), 1);
  for (int64_t T : {0, 1, 7, 128, 4096}) {
    const Inputs in = testsupport::random_inputs(p, T, 100 + T, {.skip_fraction = 0.1});
    expect_matches_cpu(p, w, in, fmt::format("{} random routing", p.name()));
  }
}

TEST_P(Sm90LayerTiny, IdleExpertAndOneExpertTakingEveryRow) {
  const Problem p = tiny(GetParam(), 512);
  const WeightSet w = testsupport::random_weights(p, native_format(p), 2);
  Inputs in = testsupport::random_inputs(p, 300, 7);
  // Expert 3 gets nothing: its slots become holes.
  for (int64_t t = 0; t < in.tokens; ++t)
    for (int64_t k = 0; k < p.top_k; ++k)
      if (in.id(t, k) == 3) in.set_id(t, k, -1);
  expect_matches_cpu(p, w, in, fmt::format("{} expert 3 idle", p.name()));
  // Every slot 0 goes to expert 5 (300 rows: 4 full tiles and a partial one), others skipped.
  for (int64_t t = 0; t < in.tokens; ++t)
    for (int64_t k = 0; k < p.top_k; ++k) in.set_id(t, k, k == 0 ? 5 : -1);
  expect_matches_cpu(p, w, in, fmt::format("{} one expert, all rows", p.name()));
  // The same expert in every slot of every token (1200 rows of one expert).
  for (int64_t t = 0; t < in.tokens; ++t)
    for (int64_t k = 0; k < p.top_k; ++k) in.set_id(t, k, 9);
  expect_matches_cpu(p, w, in, fmt::format("{} one expert in every slot", p.name()));
}

TEST_P(Sm90LayerTiny, HolesAndTokensWithoutValidSlotsGiveZerosWhereDue) {
  const Problem p = tiny(GetParam(), 256);
  const WeightSet w = testsupport::random_weights(p, native_format(p), 3);
  Inputs in = testsupport::random_inputs(p, 200, 8, {.skip_fraction = 0.5, .ids_i32 = true});
  for (int64_t t = 0; t < in.tokens; t += 9)
    for (int64_t k = 0; k < p.top_k; ++k) in.set_id(t, k, -1);
  const std::vector<uint16_t> y = expect_matches_cpu(p, w, in, fmt::format("{} 50% holes, int32 ids", p.name()));
  for (int64_t t = 0; t < in.tokens; t += 9)
    for (int64_t j = 0; j < p.hidden; ++j) ASSERT_EQ(y[t * p.hidden + j], 0) << "token " << t;
}

TEST_P(Sm90LayerTiny, CallerQuantizedActivations) {
  Problem p = tiny(GetParam(), 256);
  p.quantize_input = false;
  const WeightSet w = testsupport::random_weights(p, native_format(p), 4);
  Inputs in = testsupport::random_inputs(p, 129, 9, {.skip_fraction = 0.1});
  testsupport::quantize_inputs_for_caller(p, in);
  expect_matches_cpu(p, w, in, fmt::format("{} quantize_input=false", p.name()));
}

TEST_P(Sm90LayerTiny, Bf16AndDeviceResidentWeights) {
  const Problem p = tiny(GetParam(), 128);
  const Inputs in = testsupport::random_inputs(p, 100, 10, {.skip_fraction = 0.1});
  const WeightSet bf16 = testsupport::random_weights(p, WeightFormat::kBF16, 5);
  expect_matches_cpu(p, bf16, in, fmt::format("{} bf16 weights", p.name()));

  const WeightSet w = testsupport::random_weights(p, native_format(p), 6,
                                                  {.distinct_gate_up_global = true});
  const std::vector<double> ref = cpu_reference(p, w.pack(), in);
  const WeightPack host = w.pack();
  DeviceTensor t13 = to_device(host.w13), t13s = to_device(host.w13_scale), t13g = to_device(host.w13_global),
               t2 = to_device(host.w2), t2s = to_device(host.w2_scale), t2g = to_device(host.w2_global);
  const WeightPack dev{host.format, t13.view, t13s.view, t13g.view, t2.view, t2s.view, t2g.view, {}, {}};
  auto layer = make_gpu_layer(p, dev);
  const std::vector<uint16_t> y = run_on_gpu(*layer, to_device(p, in));
  const double err = relative_error_rows(y, ref, p.hidden);
  EXPECT_LE(err, same_recipe_tolerance(p.recipe)) << "device-resident weights: " << p.str();
  fmt::print("[ sm90    ] {:<44} T={:<5} rel_err={:.3e}\n", std::string(p.name()) + " weights on the device", in.tokens, err);
}

TEST_P(Sm90LayerTiny, FastMathStaysWithinTheTolerance) {
  Problem p = tiny(GetParam(), 256);
  const WeightSet w = testsupport::random_weights(p, native_format(p), 7);
  const Inputs in = testsupport::random_inputs(p, 256, 11);
  const std::vector<double> ref = cpu_reference(p, w.pack(), in);
  MoeDesc desc = p.desc();
  desc.numerics.fast_math = true;
  auto layer = Layer::create(gpu_runtime(), desc, w.pack(), p.overrides);
  const std::vector<uint16_t> y = run_on_gpu(*layer, to_device(p, in));
  const double err = relative_error_rows(y, ref, p.hidden);
  EXPECT_LE(err, same_recipe_tolerance(p.recipe)) << "fast_math: " << p.str();
  fmt::print("[ sm90    ] {:<44} T={:<5} rel_err={:.3e}\n", std::string(p.name()) + " fast_math", in.tokens, err);
}

TEST_P(Sm90LayerTiny, BitwiseDeterministicOver20RerunsAndGraphReplayEqualsEager) {
  const Problem p = tiny(GetParam(), 1024);
  const WeightSet w = testsupport::random_weights(p, native_format(p), 8);
  const Inputs in = testsupport::random_inputs(p, 1000, 12, {.skip_fraction = 0.2});
  auto layer = make_gpu_layer(p, w.pack());
  const DeviceInputs d = to_device(p, in);
  cudaStream_t stream;
  MOE_EP_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  const std::vector<uint16_t> first = run_on_gpu(*layer, d, stream);
  const uint64_t h = hash_bits(first);
  for (int rep = 0; rep < 20; ++rep) ASSERT_EQ(hash_bits(run_on_gpu(*layer, d, stream)), h) << "rerun " << rep;

  // Graph: capture one forward, poison y, replay twice.
  const auto replays = replay_forward_graph(*layer, d, stream, 2);
  for (size_t rep = 0; rep < replays.size(); ++rep) ASSERT_EQ(hash_bits(replays[rep]), h) << "graph replay " << rep;
  MOE_EP_CUDA_CHECK(cudaStreamDestroy(stream));
  EXPECT_EQ(layer->read_error_flags(), 0u);
}

TEST_P(Sm90LayerTiny, OutOfRangeIdsAreSkippedFlaggedAndTheLayerStaysUsable) {
  const Problem p = tiny(GetParam(), 64);
  const WeightSet w = testsupport::random_weights(p, native_format(p), 9);
  Inputs bad = testsupport::random_inputs(p, 40, 13);
  bad.set_id(3, 1, p.num_experts);
  bad.set_id(17, 0, -5);
  Inputs skipped = bad;  // what the layer must compute: those slots as -1
  skipped.set_id(3, 1, -1);
  skipped.set_id(17, 0, -1);
  const Inputs good = testsupport::random_inputs(p, 40, 14);
  const std::vector<double> ref_skipped = cpu_reference(p, w.pack(), skipped);
  const std::vector<double> ref_good = cpu_reference(p, w.pack(), good);

  auto layer = make_gpu_layer(p, w.pack());
  const std::vector<uint16_t> y_bad = run_on_gpu(*layer, to_device(p, bad));
  EXPECT_LE(relative_error_rows(y_bad, ref_skipped, p.hidden), same_recipe_tolerance(p.recipe));
  EXPECT_EQ(layer->read_error_flags(false), kErrorExpertIdOutOfRange);  // sticky until cleared
  try {
    layer->check_error_flags();
    ADD_FAILURE() << "check_error_flags did not throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kDevice);
  }
  EXPECT_EQ(layer->read_error_flags(), 0u);
  const std::vector<uint16_t> y_good = run_on_gpu(*layer, to_device(p, good));
  EXPECT_LE(relative_error_rows(y_good, ref_good, p.hidden), same_recipe_tolerance(p.recipe));
  EXPECT_EQ(layer->read_error_flags(), 0u);
}

// Negative control: the GPU layer gets weights where one block scale of expert 5's W2 is doubled
// (all H rows, the first 32 or 16 k); the comparison with the CPU layer on the true weights must
// fail the threshold, so the threshold is shown to catch a small, local weight bug.
TEST_P(Sm90LayerTiny, ThresholdCatchesOneWrongBlockScale) {
  const Problem p = tiny(GetParam(), 128);
  const WeightSet w = testsupport::random_weights(p, native_format(p), 12);
  const Inputs in = testsupport::random_inputs(p, 128, 16);
  const std::vector<double> ref = cpu_reference(p, w.pack(), in);
  WeightSet bad = w;
  const bool nvfp4 = p.recipe == Recipe::kNvfp4;
  const int64_t blocks_per_row = p.intermediate / (nvfp4 ? 16 : 32);
  for (int64_t n = 0; n < p.hidden; ++n) {
    uint8_t& s = bad.w2_scale[(5 * p.hidden + n) * blocks_per_row];
    if (nvfp4)
      s = (s & 0x78) < 0x70 ? static_cast<uint8_t>(s + 8) : s;  // exponent + 1 = x2
    else
      s = s < 0xFE ? static_cast<uint8_t>(s + 1) : s;
  }
  auto layer = make_gpu_layer(p, bad.pack());
  const std::vector<uint16_t> y = run_on_gpu(*layer, to_device(p, in));
  const double err = relative_error_rows(y, ref, p.hidden);
  EXPECT_GT(err, same_recipe_tolerance(p.recipe)) << "a doubled block scale went unnoticed: " << p.str();
  fmt::print("[ sm90    ] {:<44} T={:<5} rel_err={:.3e} (must exceed {:.0e})\n",
             std::string(p.name()) + " negative control (wrong scale)", in.tokens, err, same_recipe_tolerance(p.recipe));
}

// mxfp4 rows whose block exponents span more than 15 octaves cannot be folded into the FP8
// window: the layer keeps E8M0 block scales for that GEMM (the per-k-block fp32 path) and
// must still match the CPU layer. One W13 row and one W2 row get a block 2^-16 smaller
// (codes unchanged), pushing their spans past 14.
TEST(Sm90LayerMxfp4, WeightsOutsideTheFp8WindowTakeTheBlockScalePath) {
  MOE_EP_REQUIRE_CUDA();
  const Problem p = tiny("mxfp4", 256);
  WeightSet w = testsupport::random_weights(p, WeightFormat::kMXFP4, 21);
  const int64_t h_blocks = p.hidden / 32, i_blocks = p.intermediate / 32;
  for (uint8_t* s : {&w.w13_scale[(2 * (2 * p.intermediate) + 5) * h_blocks + 1],
                     &w.w2_scale[(3 * p.hidden + 7) * i_blocks + 2]})
    *s = static_cast<uint8_t>(*s - 16);
  {  // released before the CPU reference below: one runtime per process
    auto layer = make_gpu_layer(p, w.pack());
    EXPECT_NE(layer->info().config.str().find("W13 E8M0 block scales, W2 E8M0 block scales"), std::string::npos)
        << layer->info().config.str();
  }
  for (int64_t T : {1, 37, 256}) {
    const Inputs in = testsupport::random_inputs(p, T, 300 + T, {.skip_fraction = 0.1});
    expect_matches_cpu(p, w, in, "mxfp4 weights outside the FP8 window");
  }
}

// Weights inside the window are folded by default (shift tables, column factors);
// KernelOverrides::fold_fp8 = false keeps the E8M0 block scales. Every folded term is the unfolded one times a
// power of two, so both must match the CPU layer bit for bit on the mma.sync kernels.
TEST(Sm90LayerMxfp4, FoldedAndBlockScaleWeightsMatchTheCpuLayer) {
  MOE_EP_REQUIRE_CUDA();
  Problem p = tiny("mxfp4", 512);
  const WeightSet w = testsupport::random_weights(p, WeightFormat::kMXFP4, 22);
  for (const bool fold : {true, false}) {
    p.overrides.fold_fp8 = fold;
    const char* expected = fold ? "W13 folded, W2 folded" : "W13 E8M0 block scales, W2 E8M0 block scales";
    {  // released before the CPU reference below: one runtime per process
      auto layer = make_gpu_layer(p, w.pack());
      EXPECT_NE(layer->info().config.str().find(expected), std::string::npos) << layer->info().config.str();
    }
    for (int64_t T : {1, 7, 128, 512}) {
      const Inputs in = testsupport::random_inputs(p, T, 400 + T, {.skip_fraction = 0.1});
      expect_matches_cpu(p, w, in, fold ? "mxfp4 folded into the FP8 window" : "mxfp4 E8M0 block scales (FOLD=0)");
    }
  }
}

// A small forward for compute-sanitizer (memcheck, racecheck): partial tiles, holes, an
// expert with one row. scripts/device_test.sh runs it under the sanitizer tools.
// A kernel's dynamic shared-memory limit belongs to the process and device: a layer created
// after others, with fewer experts (routing) and a smaller K (the decode tile's rows of A), must
// leave them able to run. E = 384 takes the routing (and the fused quantize + routing launch) past
// the 48 KB default, K = 7168 the nvfp4 decode tile.
TEST_P(Sm90LayerTiny, ASmallerLayerLeavesLargerOnesTheirSharedMemoryLimits) {
  auto fused = [](Problem p) {
    p.overrides.fuse_quantize_route = true;
    return p;
  };
  Problem many = tiny(GetParam(), 64), wide = tiny(GetParam(), 64);
  many.num_experts = 384;
  wide.hidden = 7168;
  struct Case {
    Problem p;
    WeightSet w;
    Inputs in;
    std::vector<double> ref;
  };
  // The larger layers, then the smaller one. CPU references first: one runtime per process, so no
  // GPU layer may live while they run.
  std::vector<Case> cases;
  for (const Problem& p : {many, fused(many), wide, fused(tiny(GetParam(), 64))}) {
    Case c{p, testsupport::random_weights(p, native_format(p), 21 + cases.size()), {}, {}};
    c.in = testsupport::random_inputs(p, 9, 30 + cases.size());
    c.ref = cpu_reference(p, c.w.pack(), c.in);
    cases.push_back(std::move(c));
  }
  std::vector<std::unique_ptr<Layer>> layers;
  for (const Case& c : cases) layers.push_back(make_gpu_layer(c.p, c.w.pack()));
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    const std::vector<uint16_t> y = run_on_gpu(*layers[i], to_device(c.p, c.in));
    EXPECT_LE(relative_error_rows(y, c.ref, c.p.hidden), same_recipe_tolerance(c.p.recipe))
        << c.p.str() << " " << c.p.overrides.str();
  }
}

TEST_P(Sm90LayerTiny, SmallCaseForSanitizers) {
  const Problem p = tiny(GetParam(), 80);
  const WeightSet w = testsupport::random_weights(p, native_format(p), 10);
  Inputs in = testsupport::random_inputs(p, 70, 15, {.skip_fraction = 0.2});
  in.set_id(69, 0, 15);
  expect_matches_cpu(p, w, in, fmt::format("{} sanitizer case", p.name()));
}

INSTANTIATE_TEST_SUITE_P(Recipes, Sm90LayerTiny, ::testing::Values("mxfp4", "nvfp4"));

// The sanitizer case on each GEMM family pinned in turn (the auto choice at T = 70 is decode only),
// so compute-sanitizer covers the decode (also with K split in two, and with x's quantization and
// the routing in one launch), mma.sync, wgmma and wgmma-rs forms of mxfp4 and the nvfp4 families
// (decode, mma.sync, the f16 wgmma forms on both tiles).
TEST(Sm90Sanitizer, SmallCaseOfEveryGemmFamily) {
  MOE_EP_REQUIRE_CUDA();
  struct Case {
    const char* family;
    GemmKernel kernel;
    bool fused = false;  // decode: x's quantization and the routing in one launch
    bool wide = false;   // wgmma: the 64x256 tile (four consumers)
    bool split = false;  // decode: K split in two per block (H = I = 1024, whole halves for both recipes)
  };
  for (const Case c : {Case{"mxfp4", GemmKernel::kDecode}, Case{"mxfp4", GemmKernel::kDecode, true},
                       Case{"mxfp4", GemmKernel::kMma}, Case{"mxfp4", GemmKernel::kWgmma},
                       Case{"mxfp4", GemmKernel::kWgmmaRs}, Case{"nvfp4", GemmKernel::kDecode},
                       Case{"nvfp4", GemmKernel::kDecode, true}, Case{"nvfp4", GemmKernel::kMma},
                       Case{"nvfp4", GemmKernel::kWgmma}, Case{"nvfp4", GemmKernel::kWgmma, false, true},
                       Case{"mxfp4", GemmKernel::kDecode, false, false, true},
                       Case{"nvfp4", GemmKernel::kDecode, false, false, true}}) {
    Problem p = tiny(c.family, 80);
    p.overrides.gemm = c.kernel;
    if (c.wide) p.overrides.tile = {64, 256};
    if (c.split) {
      p.hidden = p.intermediate = 1024;
      p.overrides.decode_split_k = 2;
    }
    if (c.fused) p.overrides.fuse_quantize_route = true;
    // The warpgroup kernels and the split decode kernels are refused with exact accumulation.
    const bool warpgroup = c.kernel == GemmKernel::kWgmma || c.kernel == GemmKernel::kWgmmaRs;
    p.exact_accumulation = !warpgroup && !c.split;
    const WeightSet w = testsupport::random_weights(p, native_format(p), 10);
    if (c.fused) {  // the plan runs what the case names
      const std::string plan = make_gpu_layer(p, w.pack())->info().config.str();
      EXPECT_NE(plan.find(fmt::format("{}.decode.16x128, routing m tiles of 16 rows", c.family)), std::string::npos)
          << plan;
      EXPECT_NE(plan.find("(quantize x + routing (one launch), gemm1"), std::string::npos) << plan;
    }
    if (c.split) {
      const std::string plan = make_gpu_layer(p, w.pack())->info().config.str();
      EXPECT_NE(plan.find(fmt::format("{}.decode-split.16x64, routing m tiles of 16 rows", c.family)),
                std::string::npos) << plan;
    }
    if (c.wide) {
      const std::string plan = make_gpu_layer(p, w.pack())->info().config.str();
      EXPECT_NE(plan.find("nvfp4.rs-f16.64x256, routing m tiles of 64 rows"), std::string::npos) << plan;
    }
    const Inputs in = testsupport::random_inputs(p, 70, 15, {.skip_fraction = 0.2});
    // nvfp4's wgmma products are exact f16 ones: its own threshold.
    const bool fp8_warpgroup = warpgroup && p.recipe == Recipe::kMxfp4;
    expect_matches_cpu(p, w, in,
                       fmt::format("{} sanitizer case, {} GEMMs{}{}", c.family, gemm_kernel_name(c.kernel),
                                   c.fused ? " (fused quantize + routing)" : "", c.wide ? " (64x256)" : ""),
                       fp8_warpgroup ? wgmma_recipe_tolerance() : -1.0);
  }
}

TEST(Sm90LayerErrors, NoDeviceGivesAClearErrorAtCreation) {
  if (cuda_unavailable_reason().empty()) GTEST_SKIP() << "a CUDA device is present; this checks the message without one";
  const Problem p = tiny("mxfp4", 16);
  const WeightSet w = testsupport::random_weights(p, WeightFormat::kMXFP4, 1);
  try {
    make_gpu_layer(p, w.pack());
    FAIL() << "a CUDA layer was created without a CUDA device";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnsupported) << e.what();
    EXPECT_NE(std::string(e.what()).find("cuda:0"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace moe_ep::cudatest
