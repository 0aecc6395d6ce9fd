// Opt-in kernel times of the grouped GEMMs at the deepseek-v4-flash size on random bytes
// (gemm_harness.h; MOE_EP_WGMMA_TIMING=1, scripts/device_wgmma.sh steps timing, split, decode):
// the warpgroup kernels against mma.sync, the rs fp8 kernels split by work and weight path,
// and the decode kernels at small T by weight prefetch depth. Each run's outputs are checked
// (against mma.sync, or bitwise against the other form); the times are printed.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "cuda/sm90_config.h"
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
  fmt::print("[ wgmma   ] {:>5} {:<14} {:>10} {:>10} {:>9} {:>9}  {}\n", "T", "kernels", "gemm1 us", "gemm2 us",
             "TFLOP/s1", "TFLOP/s2", "vs mma.sync");
  for (int64_t T : tokens) {
    const DeviceProblem p = random_problem(s, T, 100 + T);
    GemmRun mma(s, p, w, Kernels{});
    const double mma1 = median_us([&] { mma.gemm1(); });
    const double mma2 = median_us([&] { mma.gemm2(); });
    const GemmOutputs ref = mma.outputs();
    const double rows = static_cast<double>(mma.rows());
    const double flop1 = 2.0 * rows * 2 * s.I * s.H, flop2 = 2.0 * rows * s.H * s.I;
    fmt::print("[ wgmma   ] {:>5} {:<14} {:>10.1f} {:>10.1f} {:>9.1f} {:>9.1f}\n", T, "mma.sync", mma1, mma2,
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
      fmt::print("[ wgmma   ] {:>5} {:<14} {:>10.1f} {:>10.1f} {:>9.1f} {:>9.1f}  h err {:.2e} (bytes equal "
                 "{:.4f}), o err {:.2e} (equal {:.4f})\n",
                 T, tile, t1, t2, flop1 / t1 * 1e-6, flop2 / t2 * 1e-6, err_h,
                 equal_share(got.h, ref.h), err_o, equal_share(got.o, ref.o));
    }
  }
}

// The decode kernels at small T, 2 against kDecodeDeepPrefetch k steps of weights in flight per
// warp, against K split in two halves per block and against the weights by bulk copies into
// rings of 2 or 3 chunks per warp (L2 flushed before each run), at the flash size (random bytes, outputs checked bitwise
// against each other; the split form within the recipe threshold). Weight TB/s
// = the active experts' FP4 weights and shift words over the time; the floor is the copy rate.
TEST(Sm90WgmmaTiming, DecodePrefetchDepthAtSmallT) {
  MOE_EP_REQUIRE_WGMMA_TIMING();
  const Shape s = kFlashShape;
  const DeviceWeights w = random_device_weights(s);
  // Written before each timed run so none of the weights are in L2 (as in a layer, where the
  // other GEMM's weights stream through it in between).
  DeviceBuffer flush(size_t{256} << 20);
  const auto flush_l2 = [&] { MOE_EP_CUDA_CHECK(cudaMemsetAsync(flush.get(), 0, flush.bytes())); };
  fmt::print("[ decode  ] {:>5} {:<24} {:>10} {:>10} {:>8} {:>8}\n", "T", "kernels", "gemm1 us", "gemm2 us", "TB/s 1",
             "TB/s 2");
  for (int64_t T : timing_tokens({1, 2, 4, 8, 32, 128})) {
    const DeviceProblem p = random_problem(s, T, 300 + T);
    std::optional<GemmOutputs> first;
    // 2 ahead, 4 ahead, 2 ahead with K split in two, bulk rings of 2 and 3 chunks per warp
    for (int form = 0; form < 5; ++form) {
      Kernels k;
      k.decode_prefetch = form == 1 ? kDecodeDeepPrefetch : kDecodePrefetch;
      k.decode_split = form == 2 ? 2 : 1;
      k.decode_bulk_slots = form == 3 ? 2 : form == 4 ? 3 : 0;
      GemmRun run(s, p, w, k);
      const double t1 = median_us([&] { run.gemm1(); }, flush_l2);
      const double t2 = median_us([&] { run.gemm2(); }, flush_l2);
      const GemmOutputs got = run.outputs();
      if (!first) first = got;
      else if (form != 2) EXPECT_TRUE(got.h == first->h && got.o == first->o) << "T=" << T << ": " << k.name() << " differs";
      else EXPECT_LE(rel_err_o(got, *first), cudatest::same_recipe_tolerance(Recipe::kMxfp4)) << "T=" << T << ": K split";
      const double experts = static_cast<double>(run.active_experts());
      const double bytes1 = experts * 2 * s.I * s.H * (0.5 + 1.0 / 32), bytes2 = experts * s.H * s.I * (0.5 + 1.0 / 32);
      fmt::print("[ decode  ] {:>5} {:<24} {:>10.1f} {:>10.1f} {:>8.2f} {:>8.2f}\n", T, k.name(), t1, t2,
                 bytes1 / t1 * 1e-6, bytes2 / t2 * 1e-6);
    }
  }
  // nvfp4's decode kernels, the same comparison (weights 0.5 + 1/16 bytes per element).
  const Nvfp4DeviceWeights nw = random_nvfp4_weights(s);
  for (int64_t T : timing_tokens({1, 2, 4, 8, 32, 128})) {
    const Nvfp4DeviceProblem p = random_nvfp4_problem(s, T, 500 + T);
    std::optional<std::vector<uint16_t>> first;
    for (const Nvfp4Kernels k : {Nvfp4Kernels::kDecode, Nvfp4Kernels::kDecodeDeep}) {
      Nvfp4GemmRun run(s, p, nw, k);
      const double t1 = median_us([&] { run.gemm1(); }, flush_l2);
      const double t2 = median_us([&] { run.gemm2(run); }, flush_l2);
      const std::vector<uint16_t> o = run.o();
      if (!first) first = o;
      else EXPECT_EQ(o, *first) << "T=" << T << ": the nvfp4 deep decode kernels differ";
      const double experts = static_cast<double>(run.active_experts());
      const double bytes1 = experts * 2 * s.I * s.H * (0.5 + 1.0 / 16), bytes2 = experts * s.H * s.I * (0.5 + 1.0 / 16);
      fmt::print("[ decode  ] {:>5} {:<24} {:>10.1f} {:>10.1f} {:>8.2f} {:>8.2f}\n", T,
                 k == Nvfp4Kernels::kDecode ? "nvfp4 decode, 2 ahead" : "nvfp4 decode, 4 ahead", t1, t2,
                 bytes1 / t1 * 1e-6, bytes2 / t2 * 1e-6);
    }
  }
}

// Where the rs fp8 kernels' time goes: each GEMM timed whole and with parts of its mainloop left
// out (activation copies, weight copies, math), with the weights by cp.async and by bulk copies,
// at the flash size, beside the bf16 register-operand kernels (their times include the
// activations' conversion to bf16); the whole kernels are checked against mma.sync. Weight TB/s = the active
// experts' FP4 weights and shift words over the time.
TEST(Sm90WgmmaTiming, RsFp8WorkSplit) {
  MOE_EP_REQUIRE_WGMMA_TIMING();
  const Shape s = kFlashShape;
  const DeviceWeights w = random_device_weights(s);
  const double tol = cudatest::wgmma_recipe_tolerance();
  const std::vector<int64_t> tokens = timing_tokens({2048, 8192});
  fmt::print("[ rs-split] {:>5} {:<34} {:>10} {:>10} {:>8} {:>8}\n", "T", "variant", "gemm1 us", "gemm2 us", "TB/s 1",
             "TB/s 2");
  for (int64_t T : tokens) {
    const DeviceProblem p = random_problem(s, T, 100 + T);
    GemmRun mma(s, p, w, Kernels{});
    mma.gemm1();
    mma.gemm2();
    const GemmOutputs ref = mma.outputs();
    const int block_m = T < kWgmmaRsWideMinTokens ? 64 : 96;
    const double experts = static_cast<double>(mma.active_experts());
    const double bytes1 = experts * 2 * s.I * s.H * (0.5 + 1.0 / 32), bytes2 = experts * s.H * s.I * (0.5 + 1.0 / 32);
    using W = test::RsFp8WeightPath;
    std::vector<Kernels> variants;
    for (const W weights : {W::kCpAsync, W::kBulk, W::kRegisters})
      for (int work : {kRsFp8All, 3, 2, 1, 4, 0}) {
        // Without weight copies the bulk form is the cp.async kernel; the registers form copies
        // no weights (its weight loads are part of the math).
        if (weights == W::kBulk && !(work & 2)) continue;
        if (weights == W::kRegisters && (block_m != 64 || (work != kRsFp8All && work != 4))) continue;
        Kernels k;
        k.rs_fp8_block_m = block_m;
        k.rs_fp8_weights = weights;
        k.rs_fp8_work = work;
        variants.push_back(k);
      }
    for (int work : {kRsFp8All, 4}) {  // four consumer warpgroups (64-token tiles at every T)
      Kernels k;
      k.rs_fp8_block_m = 64;
      k.rs_fp8_work = work;
      k.rs_fp8_consumers = 4;
      variants.push_back(k);
    }
    for (int tails : {1, 2}) {  // four consumers, narrow tail tiles in tile order / in a second pass
      Kernels k;
      k.rs_fp8_block_m = 64;
      k.rs_fp8_consumers = 4;
      k.rs_fp8_tails = tails;
      variants.push_back(k);
    }
    {  // the bf16 register-operand kernels (no promotion), two and four consumers
      Kernels k;
      k.rs = true;
      variants.push_back(k);
      for (int work : {kRsFp8All, 3, 4}) {
        Kernels wide = rs_bf16_wide();
        wide.rs_fp8_work = work;
        variants.push_back(wide);
      }
      variants.push_back(rs_bf16_wide(2));       // two k32 blocks per wgmma group
      variants.push_back(rs_bf16_wide(1, 128));        // 128-token tiles (m64n128k16), odd last tiles on 64
      variants.push_back(rs_bf16_wide(1, 128, true));  // the same with odd last tiles in the 128-token kernel
    }
    for (const Kernels& k : variants) {
      if (!timing_variant_selected(k.name())) continue;
      const int work = k.rs_fp8_work;
      GemmRun run(s, p, w, k);
      const double t1 = median_us([&] { run.gemm1(); });
      const double t2 = median_us([&] { run.gemm2(&mma); });
      std::string check;
      if (work == kRsFp8All) {
        const GemmOutputs got = run.outputs();
        const double err_h = rel_err_h(got, ref), err_o = rel_err_o(got, ref);
        EXPECT_LE(err_h, tol) << "T=" << T << " " << k.name();
        EXPECT_LE(err_o, tol) << "T=" << T << " " << k.name();
        check = fmt::format("  h err {:.2e}, o err {:.2e}", err_h, err_o);
      }
      fmt::print("[ rs-split] {:>5} {:<34} {:>10.1f} {:>10.1f} {:>8.2f} {:>8.2f}{}\n", T, k.name(), t1, t2,
                 bytes1 / t1 * 1e-6, bytes2 / t2 * 1e-6, check);
    }
  }
}

}  // namespace
}  // namespace moe_ep::cuda
