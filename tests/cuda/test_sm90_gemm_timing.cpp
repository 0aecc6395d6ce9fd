// Opt-in kernel times of the grouped-GEMM forms at the deepseek-v4-flash size on random bytes
// (gemm_harness.h; MOE_EP_WGMMA_TIMING=1, scripts/device_wgmma.sh steps timing, decode): the
// mxfp4 warpgroup forms against mma.sync, and the decode forms at small T, K in one part against
// K split in two. Each run's outputs are checked (against mma.sync, or against the decode form);
// the times are printed.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "cuda/policy/sm90_forms.h"
#include "cuda_test_util.h"
#include "gemm_harness.h"

namespace moe_ep::cuda {
namespace {

using namespace gemmtest;

TEST(Sm90WgmmaTiming, FlashSizeRandomBytesMatchMmaAndKernelTimes) {
  MOE_EP_REQUIRE_WGMMA_TIMING();
  const Shape s = kFlashShape;
  const DeviceWeights w = random_device_weights(s);
  const double tol = cudatest::wgmma_recipe_tolerance();
  const std::vector<int64_t> tokens = timing_tokens({2048, 8192});
  fmt::print("[ wgmma   ] {:>5} {:<52} {:>10} {:>10} {:>9} {:>9}  {}\n", "T", "kernels", "gemm1 us", "gemm2 us",
             "TFLOP/s1", "TFLOP/s2", "vs mma.sync");
  for (int64_t T : tokens) {
    const DeviceProblem p = random_problem(s, T, 100 + T);
    GemmRun mma(s, p, w, Kernels{});
    const double mma1 = median_us([&] { mma.gemm1(); });
    const double mma2 = median_us([&] { mma.gemm2(); });
    const GemmOutputs ref = mma.outputs();
    const double rows = static_cast<double>(mma.rows());
    const double flop1 = 2.0 * rows * 2 * s.I * s.H, flop2 = 2.0 * rows * s.H * s.I;
    fmt::print("[ wgmma   ] {:>5} {:<52} {:>10.1f} {:>10.1f} {:>9.1f} {:>9.1f}\n", T, "mma.sync", mma1, mma2,
               flop1 / mma1 * 1e-6, flop2 / mma2 * 1e-6);
    for (const Kernels& k : wgmma_variants()) {
      if (!timing_variant_selected(k.name())) continue;
      const std::string tile = k.name();
      GemmRun run(s, p, w, k);
      const double t1 = median_us([&] { run.gemm1(); });
      const double t2 = median_us([&] { run.gemm2(&mma); });
      const GemmOutputs got = run.outputs();
      const double err_h = rel_err_h(got, ref);
      const double err_o = rel_err_o(got, ref);
      EXPECT_LE(err_h, tol) << "T=" << T << " " << tile;
      EXPECT_LE(err_o, tol) << "T=" << T << " " << tile;
      fmt::print("[ wgmma   ] {:>5} {:<52} {:>10.1f} {:>10.1f} {:>9.1f} {:>9.1f}  h err {:.2e} (bytes equal "
                 "{:.4f}), o err {:.2e} (equal {:.4f})\n",
                 T, tile, t1, t2, flop1 / t1 * 1e-6, flop2 / t2 * 1e-6, err_h,
                 equal_share(got.h, ref.h), err_o, equal_share(got.o, ref.o));
    }
  }
}

// The decode forms at small T, K in one part against K split in two halves per block (L2 flushed
// before each run), at the flash size (random bytes; the split form's outputs within the recipe
// threshold of the decode form's, mxfp4 on o, nvfp4 on o from the same NVFP4 h). Weight TB/s = the
// active experts' FP4 weights and scale bytes over the time; the floor is the copy rate.
TEST(Sm90WgmmaTiming, DecodeFormsAtSmallT) {
  MOE_EP_REQUIRE_WGMMA_TIMING();
  const Shape s = kFlashShape;
  const DeviceWeights w = random_device_weights(s);
  // Written before each timed run so none of the weights are in L2 (as in a layer, where the
  // other GEMM's weights stream through it in between).
  DeviceBuffer flush(size_t{256} << 20);
  const auto flush_l2 = [&] { MOE_EP_CUDA_CHECK(cudaMemsetAsync(flush.get(), 0, flush.bytes())); };
  fmt::print("[ decode  ] {:>5} {:<28} {:>10} {:>10} {:>8} {:>8}\n", "T", "kernels", "gemm1 us", "gemm2 us", "TB/s 1",
             "TB/s 2");
  for (int64_t T : timing_tokens({1, 2, 4, 8, 32, 128})) {
    const DeviceProblem p = random_problem(s, T, 300 + T);
    std::optional<GemmOutputs> first;
    for (const Sm90Form form : {Sm90Form::kMxfp4Decode, Sm90Form::kMxfp4DecodeSplit}) {
      const Kernels k(form);
      GemmRun run(s, p, w, k);
      const double t1 = median_us([&] { run.gemm1(); }, flush_l2);
      const double t2 = median_us([&] { run.gemm2(); }, flush_l2);
      const GemmOutputs got = run.outputs();
      if (!first) first = got;
      else EXPECT_LE(rel_err_o(got, *first), cudatest::same_recipe_tolerance(Recipe::kMxfp4)) << "T=" << T << ": K split";
      const double experts = static_cast<double>(run.active_experts());
      const double bytes1 = experts * 2 * s.I * s.H * (0.5 + 1.0 / 32), bytes2 = experts * s.H * s.I * (0.5 + 1.0 / 32);
      fmt::print("[ decode  ] {:>5} {:<28} {:>10.1f} {:>10.1f} {:>8.2f} {:>8.2f}\n", T, k.name(), t1, t2,
                 bytes1 / t1 * 1e-6, bytes2 / t2 * 1e-6);
    }
  }
  // nvfp4's decode forms, the same comparison (weights 0.5 + 1/16 bytes per element); GEMM 2 of
  // both on the decode form's NVFP4 h.
  const Nvfp4DeviceWeights nw = random_nvfp4_weights(s);
  for (int64_t T : timing_tokens({1, 2, 4, 8, 32, 128})) {
    const Nvfp4DeviceProblem p = random_nvfp4_problem(s, T, 500 + T);
    Nvfp4GemmRun decode(s, p, nw, Sm90Form::kNvfp4Decode), split(s, p, nw, Sm90Form::kNvfp4DecodeSplit);
    for (Nvfp4GemmRun* run : {&decode, &split}) {
      const Sm90Form form = run == &decode ? Sm90Form::kNvfp4Decode : Sm90Form::kNvfp4DecodeSplit;
      const double t1 = median_us([&] { run->gemm1(); }, flush_l2);
      const double t2 = median_us([&] { run->gemm2(decode); }, flush_l2);
      const double experts = static_cast<double>(run->active_experts());
      const double bytes1 = experts * 2 * s.I * s.H * (0.5 + 1.0 / 16), bytes2 = experts * s.H * s.I * (0.5 + 1.0 / 16);
      fmt::print("[ decode  ] {:>5} {:<28} {:>10.1f} {:>10.1f} {:>8.2f} {:>8.2f}\n", T, sm90_form_name(form), t1, t2,
                 bytes1 / t1 * 1e-6, bytes2 / t2 * 1e-6);
    }
    const std::vector<uint16_t> o_ref = decode.o(), o_split = split.o();
    ASSERT_EQ(o_split.size(), o_ref.size());
    EXPECT_LE(rel_err_of(o_ref.size(), [&](size_t i) { return double{bf16_to_float(o_split[i])}; },
                         [&](size_t i) { return double{bf16_to_float(o_ref[i])}; }),
              cudatest::same_recipe_tolerance(Recipe::kNvfp4))
        << "T=" << T << ": nvfp4 K split";
  }
}

}  // namespace
}  // namespace moe_ep::cuda
