// The decode (small-batch) forms of both recipes in the layer, forced with KernelOverrides::gemm =
// decode: against the CPU layer and bit for bit against the 64 x 128 mma.sync form of the recipe
// (the same products, the same k order, and for mxfp4 the same per-k32 fp32 promotion), on
// routings that exercise the 16-row tiles: one row per expert, experts with 16, 17 and hundreds
// of rows (many tiles of one expert), holes, tokens without slots; mxfp4 with folded weights and
// with E8M0 block scales, nvfp4 with its e4m3 block and global scales; then the flash shape at
// decode sizes. The fused quantize + routing launch gives the two-launch plan's bits; the split
// decode form (decode_split_k = 2) stays within the CPU threshold, reruns and graph replays equal.
#include <utility>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "cuda_test_util.h"
#include "moe_ep/formats.h"
#include "testing/presets.h"
#include "testing/synthetic.h"

namespace moe_ep::cudatest {
namespace {

using testsupport::Inputs;
using testsupport::Problem;
using testsupport::WeightSet;

struct Outputs {
  std::vector<uint16_t> decode, mma;
};

// The layer's output with the decode kernels and with the mma.sync kernels.
Outputs run_both(const Problem& p, const WeightPack& w, const Inputs& in) {
  Outputs o;
  {
    Problem decode = p;
    decode.overrides.gemm = GemmKernel::kDecode;
    auto layer = make_gpu_layer(decode, w);
    const std::string config = layer->info().config.str();
    EXPECT_NE(config.find(fmt::format("{}.decode.16x128, routing m tiles of 16 rows", recipe_name(p.recipe))),
              std::string::npos)
        << config;
    o.decode = run_on_gpu(*layer, to_device(p, in));
    EXPECT_EQ(layer->read_error_flags(), 0u);
  }
  {
    Problem mma = p;
    mma.overrides.gemm = GemmKernel::kMma;
    auto layer = make_gpu_layer(mma, w);
    o.mma = run_on_gpu(*layer, to_device(p, in));
  }
  return o;
}

void check(const Problem& p, const WeightSet& w, const Inputs& in, const std::string& what) {
  const std::vector<double> ref = cpu_reference(p, w.pack(), in);
  const Outputs o = run_both(p, w.pack(), in);
  const double err = relative_error_rows(o.decode, ref, p.hidden);
  int64_t same_mma = 0, same_cpu = 0;
  for (size_t i = 0; i < o.decode.size(); ++i) {
    same_mma += o.decode[i] == o.mma[i];
    same_cpu += bf16_to_float(o.decode[i]) == ref[i];
  }
  EXPECT_LE(err, same_recipe_tolerance(p.recipe)) << what << ": " << p.str() << " T=" << in.tokens;
  EXPECT_EQ(same_mma, static_cast<int64_t>(o.decode.size())) << what << ": decode and mma.sync kernels differ";
  const double n = o.decode.empty() ? 1.0 : static_cast<double>(o.decode.size());
  fmt::print("[ decode  ] {:<36} T={:<5} rel_err={:.3e} bitwise-equal: cpu {:.4f} mma {:.4f}\n", what, in.tokens,
             err, same_cpu / n, same_mma / n);
}

struct DecodeCase {
  const char* family;
  bool folded;  // mxfp4 only
  const char* name;
};

void PrintTo(const DecodeCase& c, std::ostream* os) { *os << c.name; }

class Sm90Decode : public ::testing::TestWithParam<DecodeCase> {
 protected:
  void SetUp() override { MOE_EP_REQUIRE_CUDA(); }
};

TEST_P(Sm90Decode, TinyMatchesCpuAndTheMmaKernels) {
  const DecodeCase& dc = GetParam();
  const std::string kind = dc.name;
  Problem p = testsupport::tiny_problem(dc.family);
  if (!dc.folded) p.overrides.fold_fp8 = false;
  p.max_tokens = 400;
  const WeightSet w = testsupport::random_weights(p, p.traits().native_format, 31);
  for (int64_t T : {0, 1, 2, 7, 64, 128, 400})
    check(p, w, testsupport::random_inputs(p, T, 500 + T, {.skip_fraction = 0.1}), kind + " random, 10% holes");
  // Experts 2, 3, 4 get exactly 16, 17 and 8 rows (one full tile, a full and a one-row tile, a
  // half tile); the rest of the slots are holes.
  Inputs in = testsupport::random_inputs(p, 41, 77);
  for (int64_t t = 0; t < in.tokens; ++t)
    for (int64_t k = 0; k < p.top_k; ++k) in.set_id(t, k, k == 0 ? (t < 16 ? 2 : t < 33 ? 3 : 4) : -1);
  check(p, w, in, kind + " tiles of 16, 16+1 and 8 rows");
  // One expert takes every slot: 1600 rows, 100 tiles of the same weights.
  Inputs all = testsupport::random_inputs(p, 400, 78);
  for (int64_t t = 0; t < all.tokens; ++t)
    for (int64_t k = 0; k < p.top_k; ++k) all.set_id(t, k, 9);
  check(p, w, all, kind + " one expert in every slot");
  // Every ninth token has no valid slot: its output row must be zeros.
  Inputs holes = testsupport::random_inputs(p, 90, 79, {.skip_fraction = 0.5, .ids_i32 = true});
  for (int64_t t = 0; t < holes.tokens; t += 9)
    for (int64_t k = 0; k < p.top_k; ++k) holes.set_id(t, k, -1);
  check(p, w, holes, kind + " 50% holes, int32 ids");
}

// Shapes the presets do not reach: 3 k steps in both GEMMs (an odd count past the weight ring's
// depth of 2, so the ring refills mid-loop), K = 7168 (the pro preset's hidden size: the nvfp4
// tile's A needs 67 KB of shared memory, past the 48 KB default), and activations quantized by
// the caller (the layer's quantize_input = false).
TEST_P(Sm90Decode, OddStepCountsLargeKAndCallerQuantizedActivations) {
  const DecodeCase& dc = GetParam();
  Problem p = testsupport::tiny_problem(dc.family);
  if (!dc.folded) p.overrides.fold_fp8 = false;
  p.hidden = p.intermediate = 384;
  p.max_tokens = 64;
  const WeightSet odd = testsupport::random_weights(p, p.traits().native_format, 41);
  check(p, odd, testsupport::random_inputs(p, 40, 501, {.skip_fraction = 0.1}), std::string(dc.name) + " H = I = 384");
  Problem wide = testsupport::tiny_problem(dc.family);
  if (!dc.folded) wide.overrides.fold_fp8 = false;
  wide.hidden = 7168;
  wide.num_experts = 8;
  wide.top_k = 2;
  wide.max_tokens = 32;
  const WeightSet ww = testsupport::random_weights(wide, wide.traits().native_format, 42);
  for (int64_t T : {1, 24})
    check(wide, ww, testsupport::random_inputs(wide, T, 502 + T), std::string(dc.name) + " H = 7168");
  Problem caller = testsupport::tiny_problem(dc.family);
  if (!dc.folded) caller.overrides.fold_fp8 = false;
  caller.quantize_input = false;
  caller.max_tokens = 64;
  const WeightSet cw = testsupport::random_weights(caller, caller.traits().native_format, 43);
  Inputs in = testsupport::random_inputs(caller, 50, 503, {.skip_fraction = 0.1});
  testsupport::quantize_inputs_for_caller(caller, in);
  check(caller, cw, in, std::string(dc.name) + " quantize_input = false");
}

// KernelOverrides::fuse_quantize_route (Q8 or NVFP4 of x and the routing in one launch) changes
// how the layer runs, not what it computes: outputs bitwise those of the two-launch plan on random
// and structured routings (tokens without slots, a repeated expert), for the decode and the
// mma.sync buckets (the fused launch feeds both), and within the recipe's threshold of the CPU;
// graph replays equal the eager forward. Every case runs after the others on the same layer.
// Shapes: the tiny preset (2 and 1 k steps), H = I = 640 and 896 (5 and 7 k steps: the decode
// form's weight ring refilled, then a partial last round).
struct PlanCase {
  std::string what;
  Inputs in;
  std::vector<double> cpu;
};

std::vector<PlanCase> plan_cases(const Problem& p, const WeightSet& w, bool structured) {
  std::vector<PlanCase> cases;
  for (int64_t T : structured ? std::vector<int64_t>{1, 7, 128, 400} : std::vector<int64_t>{1, 7, 64})
    cases.push_back({fmt::format("random T={}, 10% holes", T),
                     testsupport::random_inputs(p, T, 600 + T, {.skip_fraction = 0.1}), {}});
  if (structured) {
    Inputs tiles = testsupport::random_inputs(p, 41, 677, {.ids_i32 = true});
    for (int64_t t = 0; t < tiles.tokens; ++t)
      for (int64_t k = 0; k < p.top_k; ++k) tiles.set_id(t, k, k == 0 ? (t < 16 ? 2 : t < 33 ? 3 : 4) : -1);
    cases.push_back({"tiles of 16, 16+1 and 8 rows, int32 ids", tiles, {}});
    Inputs all = testsupport::random_inputs(p, 300, 678);
    for (int64_t t = 0; t < all.tokens; ++t)
      for (int64_t k = 0; k < p.top_k; ++k) all.set_id(t, k, 9);
    cases.push_back({"one expert in every slot", all, {}});
    // Tokens without a valid slot (zeros in y), and one expert twice in a token's slots (two rows
    // of one token in one m tile).
    Inputs odd = testsupport::random_inputs(p, 37, 679, {.skip_fraction = 0.3});
    for (int64_t t = 0; t < odd.tokens; ++t) {
      if (t % 5 == 0)
        for (int64_t k = 0; k < p.top_k; ++k) odd.set_id(t, k, -1);
      if (t % 5 == 1) {
        odd.set_id(t, 0, 6);
        odd.set_id(t, 1, 6);
      }
    }
    cases.push_back({"unslotted tokens, a repeated expert", odd, {}});
    Inputs none = testsupport::random_inputs(p, 5, 680);
    for (int64_t t = 0; t < none.tokens; ++t)
      for (int64_t k = 0; k < p.top_k; ++k) none.set_id(t, k, -1);
    cases.push_back({"no valid slot at all", none, {}});
  }
  for (PlanCase& c : cases) c.cpu = cpu_reference(p, w.pack(), c.in);
  return cases;
}

// Three CUDA-graph replays of the layer's forward on d equal its eager forward.
template <class L>
void expect_replays_equal_eager(L& layer, const DeviceInputs& d, const std::string& what) {
  const std::vector<uint16_t> eager = run_on_gpu(layer, d);
  cudaStream_t stream;
  MOE_EP_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  for (const std::vector<uint16_t>& replay : replay_forward_graph(layer, d, stream, 3))
    EXPECT_EQ(replay, eager) << what << ": graph replay";
  MOE_EP_CUDA_CHECK(cudaStreamDestroy(stream));
}

TEST_P(Sm90Decode, FusedQuantizeRouteGivesTheDefaultBits) {
  const DecodeCase& dc = GetParam();
  for (const int64_t size : {0, 640, 896}) {  // 0: the tiny preset's H = 256, I = 128
    Problem p = testsupport::tiny_problem(dc.family);
    if (!dc.folded) p.overrides.fold_fp8 = false;
    if (size > 0) p.hidden = p.intermediate = size;
    p.max_tokens = 400;
    const WeightSet w = testsupport::random_weights(p, p.traits().native_format, 33 + size);
    const std::vector<PlanCase> cases = plan_cases(p, w, size == 0);
    for (const GemmKernel gemm : {GemmKernel::kDecode, GemmKernel::kMma}) {
      Problem base = p;
      base.overrides.gemm = gemm;
      base.overrides.fuse_quantize_route = false;  // the reference: two launches (auto fuses mxfp4's decode)
      Problem fused = base;
      fused.overrides.fuse_quantize_route = true;
      // What the fused plan must say: the pinned family's form, and the one launch.
      const std::string form = fmt::format("{}.{}", recipe_name(p.recipe),
                                           gemm == GemmKernel::kDecode ? "decode.16x128" : "mma.64x128");
      const std::vector<std::string> markers = {
          fmt::format("{}, routing m tiles of {} rows; ", form, gemm == GemmKernel::kDecode ? 16 : 64),
          "(quantize x + routing (one launch), gemm1"};
      const std::vector<std::pair<Problem, std::vector<std::string>>> variants = {{fused, markers}};
      auto ref_layer = make_gpu_layer(base, w.pack());
      for (const auto& [v, plan_markers] : variants) {
        auto layer = make_gpu_layer(v, w.pack());
        const std::string config = layer->info().config.str();
        for (const std::string& marker : plan_markers) EXPECT_NE(config.find(marker), std::string::npos) << config;
        for (const PlanCase& c : cases) {
          const DeviceInputs d = to_device(p, c.in);
          const std::vector<uint16_t> ref = run_on_gpu(*ref_layer, d), got = run_on_gpu(*layer, d);
          int64_t same = 0;
          for (size_t i = 0; i < got.size(); ++i) same += got[i] == ref[i];
          const std::string what = fmt::format("{} H={} I={} {}: {}", dc.name, p.hidden, p.intermediate,
                                               v.overrides.str(), c.what);
          EXPECT_EQ(same, static_cast<int64_t>(got.size())) << what;
          const double err = relative_error_rows(got, c.cpu, p.hidden);
          EXPECT_LE(err, same_recipe_tolerance(p.recipe)) << what;
          fmt::print("[ decode  ] {:<84} rel_err={:.3e} bitwise-equal to the default plan: {:.4f}\n", what, err,
                     got.empty() ? 1.0 : same / static_cast<double>(got.size()));
        }
        EXPECT_EQ(layer->read_error_flags(), 0u);
        // Graph replays equal the eager forward.
        expect_replays_equal_eager(*layer, to_device(p, cases[1].in),  // random, T = 7
                                   std::string(dc.name) + " " + v.overrides.str());
      }
    }
  }
}

// KernelOverrides::decode_split_k = 2 (K split in two halves per decode block) changes the order
// of the fp32 sums, so it is checked against the CPU at the recipe's threshold (not bitwise
// against the default plan), on the structured cases above at H = 3072, I = 1024 (mxfp4 GEMM 1:
// 3 A chunks per half, the ring refilled; GEMM 2: one), mxfp4 folded and with E8M0 block scales,
// and nvfp4; reruns and graph replays are bitwise equal to the first forward.
TEST(Sm90DecodeSplit, LayerWithinThresholdOfTheCpuRerunsAndReplaysEqual) {
  MOE_EP_REQUIRE_CUDA();
  for (const auto& [recipe, folded] : {std::pair{"mxfp4", true}, {"mxfp4", false}, {"nvfp4", true}}) {
    Problem p = testsupport::tiny_problem(recipe);
    if (!folded) p.overrides.fold_fp8 = false;
    p.exact_accumulation = false;  // the split adds two fp32 sums: refused with exact accumulation
    p.hidden = 3072;
    p.intermediate = 1024;
    p.max_tokens = 400;
    const WeightSet w = testsupport::random_weights(p, p.traits().native_format, 35);
    const std::vector<PlanCase> cases = plan_cases(p, w, true);
    Problem split = p;
    split.overrides.gemm = GemmKernel::kDecode;
    split.overrides.decode_split_k = 2;
    auto layer = make_gpu_layer(split, w.pack());
    const std::string config = layer->info().config.str();
    EXPECT_NE(config.find(fmt::format("{}.decode-split.16x64, routing m tiles of 16 rows", recipe)), std::string::npos)
        << config;
    for (const PlanCase& c : cases) {
      const DeviceInputs d = to_device(p, c.in);
      const std::vector<uint16_t> got = run_on_gpu(*layer, d), again = run_on_gpu(*layer, d);
      const std::string what = fmt::format("{} folded={} {}: {}", recipe, folded, split.overrides.str(), c.what);
      const double err = relative_error_rows(got, c.cpu, p.hidden);
      EXPECT_LE(err, same_recipe_tolerance(p.recipe)) << what;
      EXPECT_EQ(again, got) << what << ": rerun";
      fmt::print("[ split   ] {:<72} rel_err={:.3e}\n", what, err);
    }
    EXPECT_EQ(layer->read_error_flags(), 0u);
    expect_replays_equal_eager(*layer, to_device(p, cases[1].in), fmt::format("{} folded={}", recipe, folded));  // T = 7
  }
}

// The decode forms on FP8 wgmma (overrides.gemm = decode-wgmma, mxfp4): the decode tiles and
// weight stream with each k32 block on an m64 n8 / n16 wgmma, so not bitwise the mma.sync decode
// (the FP8 tensor cores' k32 sums are not fp32-exact): within the wgmma threshold of the CPU and
// close to the mma.sync decode, on the structured cases (one-row tiles on n8, 9..16-row tiles on
// n16, tokens without slots, a repeated expert) at 1, 2 and 3 k steps (the weight ring refilled
// mid-loop and the next step's block 0 decoded across a chunk), K = 1152 (9 k steps: a partial
// chunk copied inside the main loop), K = 7168 (the A ring refilled many times) and with K split
// in two (decode_split_k = 2); folded and E8M0 block-scale weights; rerun and graph replays bitwise
// equal to the first forward.
struct WgmmaDecodeShape {
  int64_t hidden, intermediate;
  int split;
};

TEST(Sm90DecodeWgmma, LayerWithinThresholdOfTheCpuRerunsAndReplaysEqual) {
  MOE_EP_REQUIRE_CUDA();
  for (const bool folded : {true, false}) {
    for (const WgmmaDecodeShape shape :
         {WgmmaDecodeShape{256, 128, 1}, {384, 384, 1}, {1152, 640, 1}, {7168, 1024, 1}, {3072, 1024, 2}}) {
      Problem p = testsupport::tiny_problem("mxfp4");
      if (!folded) p.overrides.fold_fp8 = false;
      p.exact_accumulation = false;  // the FP8 wgmma: refused with exact accumulation
      p.hidden = shape.hidden;
      p.intermediate = shape.intermediate;
      p.max_tokens = 400;
      if (shape.hidden > 4096) {
        p.num_experts = 8;
        p.top_k = 2;
      }
      const WeightSet w = testsupport::random_weights(p, p.traits().native_format, 37 + shape.hidden);
      const std::vector<PlanCase> cases = plan_cases(p, w, shape.hidden < 4096);
      Problem wg = p, mma = p;
      wg.overrides.gemm = GemmKernel::kDecodeWgmma;
      mma.overrides.gemm = GemmKernel::kDecode;
      wg.overrides.decode_split_k = mma.overrides.decode_split_k = shape.split;
      auto layer = make_gpu_layer(wg, w.pack());
      auto mma_layer = make_gpu_layer(mma, w.pack());
      const std::string config = layer->info().config.str();
      EXPECT_NE(config.find(shape.split == 2 ? "mxfp4.decode-wgmma-split.16x64, routing m tiles of 16 rows"
                                             : "mxfp4.decode-wgmma.16x128, routing m tiles of 16 rows"),
                std::string::npos)
          << config;
      for (const PlanCase& c : cases) {
        const DeviceInputs d = to_device(p, c.in);
        const std::vector<uint16_t> got = run_on_gpu(*layer, d), again = run_on_gpu(*layer, d);
        const std::vector<uint16_t> exact = run_on_gpu(*mma_layer, d);
        const std::string what = fmt::format("folded={} H={} I={} {}: {}", folded, p.hidden, p.intermediate,
                                             wg.overrides.str(), c.what);
        const double err = relative_error_rows(got, c.cpu, p.hidden);
        const double err_mma = relative_error_rows(exact, c.cpu, p.hidden);
        std::vector<double> exact_d(exact.size());
        for (size_t i = 0; i < exact.size(); ++i) exact_d[i] = bf16_to_float(exact[i]);
        const double vs_mma = relative_error_rows(got, exact_d, p.hidden);
        EXPECT_LE(err, wgmma_recipe_tolerance()) << what;
        EXPECT_LE(vs_mma, wgmma_recipe_tolerance()) << what << ": against the mma.sync decode";
        EXPECT_EQ(again, got) << what << ": rerun";
        fmt::print("[ dwgmma  ] {:<80} rel_err={:.3e} (mma.sync decode {:.3e}; between them {:.3e})\n", what, err,
                   err_mma, vs_mma);
      }
      EXPECT_EQ(layer->read_error_flags(), 0u);
      expect_replays_equal_eager(*layer, to_device(p, cases[1].in),
                                 fmt::format("decode-wgmma folded={} H={}", folded, p.hidden));  // T = 7
    }
  }
}

// deepseek-v4-flash inputs of T tokens (the preset's routing scale, 5% holes).
Inputs flash_inputs(const Problem& p, int64_t T, uint64_t seed) {
  const testing::Preset& preset = testing::find_preset("deepseek-v4-flash");
  const testing::InputSpec is{T, p.hidden, p.num_experts, p.top_k, 0.05, preset.routed_scaling_factor, seed, 0};
  return from_synthetic(testing::make_inputs(is), p.top_k);
}

// deepseek-v4-flash at decode sizes on decode-wgmma (K split in two at T = 1, as auto's decode
// buckets), against the CPU on a subset of rows.
TEST(Sm90DecodeWgmma, FlashWithinThresholdOfTheCpu) {
  MOE_EP_REQUIRE_CUDA();
  Problem p = preset_problem("deepseek-v4-flash", "mxfp4", 512);
  p.exact_accumulation = false;
  p.overrides.gemm = GemmKernel::kDecodeWgmma;
  const testing::HostWeights weights = preset_weights(p, p.traits().native_format, 2029);
  for (int64_t T : {1, 5, 64, 512}) {
    const Inputs in = flash_inputs(p, T, static_cast<uint64_t>(1200 + T));
    const std::vector<int64_t> rows = row_subset(T, 16);
    // The CPU layer first: a process holds one runtime world at a time, the GPU layer's after it.
    const std::vector<double> ref = cpu_reference(p, weights.pack(), in, rows);
    auto layer = make_gpu_layer(p, weights.pack());
    const std::vector<uint16_t> got = run_on_gpu(*layer, to_device(p, in));
    const double err = relative_error_rows(got, ref, p.hidden, rows);
    EXPECT_LE(err, wgmma_recipe_tolerance()) << "T=" << T << ": " << p.str();
    fmt::print("[ dwgmma  ] flash random T={:<5} rows checked={:<3} rel_err={:.3e}\n", T,
               static_cast<int64_t>(rows.empty() ? T : rows.size()), err);
    EXPECT_EQ(layer->read_error_flags(), 0u);
  }
}

INSTANTIATE_TEST_SUITE_P(Weights, Sm90Decode,
                         ::testing::Values(DecodeCase{"mxfp4", true, "Folded"},
                                           DecodeCase{"mxfp4", false, "BlockScales"},
                                           DecodeCase{"nvfp4", true, "Nvfp4"}),
                         [](const auto& info) { return std::string(info.param.name); });

// deepseek-v4-flash (H = 4096, I = 2048, E = 256, K = 6) at decode sizes, each family's native
// weights (mxfp4 folded by default).
class Sm90DecodeFlash : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override { MOE_EP_REQUIRE_CUDA(); }
};

TEST_P(Sm90DecodeFlash, MatchesCpuAndTheMmaKernels) {
  const Problem p = preset_problem("deepseek-v4-flash", GetParam(), 256);
  const testing::HostWeights weights = preset_weights(p, p.traits().native_format, 2028);
  for (int64_t T : {1, 5, 64, 256}) {
    const Inputs in = flash_inputs(p, T, static_cast<uint64_t>(1100 + T));
    const std::vector<int64_t> rows = row_subset(T, 16);
    const std::vector<double> ref = cpu_reference(p, weights.pack(), in, rows);
    const Outputs o = run_both(p, weights.pack(), in);
    const double err = relative_error_rows(o.decode, ref, p.hidden, rows);
    int64_t same_mma = 0;
    for (size_t i = 0; i < o.decode.size(); ++i) same_mma += o.decode[i] == o.mma[i];
    EXPECT_LE(err, same_recipe_tolerance(p.recipe)) << "T=" << T << ": " << p.str();
    EXPECT_EQ(same_mma, static_cast<int64_t>(o.decode.size())) << "T=" << T << ": decode and mma.sync kernels differ";
    fmt::print("[ decode  ] flash {} random T={:<5} rows checked={:<3} rel_err={:.3e} bitwise-equal mma {:.4f}\n",
               GetParam(), T, static_cast<int64_t>(rows.empty() ? T : rows.size()), err,
               o.decode.empty() ? 1.0 : static_cast<double>(same_mma) / o.decode.size());
  }
}

INSTANTIATE_TEST_SUITE_P(Recipes, Sm90DecodeFlash, ::testing::Values("mxfp4", "nvfp4"));

}  // namespace
}  // namespace moe_ep::cudatest
