// The nvfp4 grouped-GEMM forms against each other on the device (gemm_harness.h): the f16 wgmma
// forms with the weights in registers (nvfp4.rs-f16, 128x128 and 64x256) and the decode forms
// (nvfp4.decode, and nvfp4.decode-split with K in two halves) against the 64 x 128 f16 mma.sync
// form on the same routed rows: GEMM 1's fp32 h and GEMM 2's o on the same NVFP4 h, outputs
// NaN-poisoned before each run.
#include <cstdint>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "cuda_test_util.h"
#include "gemm_harness.h"
#include "moe_ep/formats.h"

namespace moe_ep::cuda {
namespace {

using namespace gemmtest;

class Sm90Nvfp4Kernels : public ::testing::Test {
 protected:
  void SetUp() override { MOE_EP_REQUIRE_CUDA(); }
};

// The 64 x 128 mma.sync kernels' GEMM 1 and GEMM 2 (on their own NVFP4 h) of one problem: the
// reference the other kernels are held to (their GEMM 2 reads this run's h).
struct MmaReference {
  Nvfp4GemmRun run;
  std::vector<float> h;
  std::vector<uint16_t> o;
  MmaReference(const Shape& s, const Nvfp4DeviceProblem& p, const Nvfp4DeviceWeights& w)
      : run(s, p, w, Sm90Form::kNvfp4Mma) {
    run.gemm1();
    run.gemm2(run);
    h = run.h();
    o = run.o();
  }
};

// Relative errors (float64 norms) of GEMM 1's fp32 h and GEMM 2's bf16 o against references.
struct GemmErrors {
  double h, o;
};
GemmErrors gemm_errors(const std::vector<float>& h_got, const std::vector<float>& h_ref,
                       const std::vector<uint16_t>& o_got, const std::vector<uint16_t>& o_ref) {
  return {rel_err_of(h_ref.size(), [&](size_t i) { return double{h_got[i]}; }, [&](size_t i) { return double{h_ref[i]}; }),
          rel_err_of(o_ref.size(), [&](size_t i) { return double{bf16_to_float(o_got[i])}; },
                     [&](size_t i) { return double{bf16_to_float(o_ref[i])}; })};
}

TEST_F(Sm90Nvfp4Kernels, WgmmaMatchesTheMmaKernels) {
  for (const Shape& s : {Shape{"tiny", 16, 256, 128, 4}, Shape{"flash/E32", 32, 4096, 2048, 6}}) {
    const Nvfp4DeviceWeights w = make_nvfp4_device_weights(s, 53);
    for (const RoutingCase& c : std::vector<RoutingCase>{{"random", 1, 0.0},
                                                         {"random, 10% holes", 7, 0.1},
                                                         {"random, 5% holes", 300, 0.05},
                                                         {"one expert, all rows", 200, 0.0, -1, 9}}) {
      SCOPED_TRACE(fmt::format("{} {} T={}", s.name, c.name, c.T));
      const Nvfp4DeviceProblem p = make_nvfp4_problem(s, make_inputs(s, c, 71 + static_cast<uint64_t>(c.T)));
      const MmaReference ref(s, p, w);
      const Nvfp4GemmRun& mma = ref.run;
      const std::vector<float>& h_ref = ref.h;
      const std::vector<uint16_t>& o_ref = ref.o;
      ASSERT_FALSE(h_ref.empty());
      std::vector<float> h_narrow;
      std::vector<uint16_t> o_narrow;
      for (const Sm90Form k : {Sm90Form::kNvfp4RsF16, Sm90Form::kNvfp4RsF16Wide}) {
        const bool wide = k == Sm90Form::kNvfp4RsF16Wide;
        Nvfp4GemmRun wg(s, p, w, k);
        wg.gemm1();
        wg.gemm2(mma);  // GEMM 2 on mma.sync's NVFP4 h
        ASSERT_EQ(wg.row_token(), mma.row_token()) << "the routed row order depends on the m tile";
        const std::vector<float> h_got = wg.h();
        const std::vector<uint16_t> o_got = wg.o();
        const auto [err_h, err_o] = gemm_errors(h_got, h_ref, o_got, o_ref);
        EXPECT_LE(err_h, 1e-3) << "GEMM 1 fp32 h" << (wide ? ", 64x256" : "");
        EXPECT_LE(err_o, 1e-3) << "GEMM 2 on the same h" << (wide ? ", 64x256" : "");
        fmt::print("[ wgmma   ] nvfp4 {:<7} {:<10} {:<22} T={:<5} h err={:.2e} (equal {:.4f})  o err={:.2e} (equal "
                   "{:.4f})\n", wide ? "64x256" : "128x128", s.name, c.name, c.T, err_h, equal_share(h_got, h_ref),
                   err_o, equal_share(o_got, o_ref));
        // Both tiles run the same k16 wgmmas of every product in the same order: the same bits.
        if (wide) {
          EXPECT_EQ(h_got, h_narrow) << "64x256 GEMM 1 against 128x128";
          EXPECT_EQ(o_got, o_narrow) << "64x256 GEMM 2 against 128x128";
        } else {
          h_narrow = h_got;
          o_narrow = o_got;
        }
      }
    }
  }
}

// One shape and routing of DecodeIsBitwiseTheMmaKernels.
void check_decode_forms(const Shape& s, const RoutingCase& c, const Nvfp4DeviceWeights& w) {
  const Nvfp4DeviceProblem p = make_nvfp4_problem(s, make_inputs(s, c, 83 + static_cast<uint64_t>(c.T)));
  const MmaReference ref(s, p, w);
  const Nvfp4GemmRun& mma = ref.run;
  const std::vector<float>& h_ref = ref.h;
  const std::vector<uint16_t>& o_ref = ref.o;
  ASSERT_FALSE(h_ref.empty());
  {
    Nvfp4GemmRun run(s, p, w, Sm90Form::kNvfp4Decode);
    run.gemm1();
    run.gemm2(mma);
    EXPECT_EQ(run.h(), h_ref) << "decode: GEMM 1 fp32 h";
    EXPECT_EQ(run.o(), o_ref) << "decode: GEMM 2 on the same h";
  }
  // K split in two per block: the halves' fp32 sums added, so within a threshold, and the
  // same bits on a rerun.
  Nvfp4GemmRun split(s, p, w, Sm90Form::kNvfp4DecodeSplit), again(s, p, w, Sm90Form::kNvfp4DecodeSplit);
  for (Nvfp4GemmRun* r : {&split, &again}) {
    r->gemm1();
    r->gemm2(mma);
  }
  const std::vector<float> h_got = split.h();
  const std::vector<uint16_t> o_got = split.o();
  const auto [err_h, err_o] = gemm_errors(h_got, h_ref, o_got, o_ref);
  EXPECT_LE(err_h, 1e-3) << "split decode: GEMM 1 fp32 h";
  EXPECT_LE(err_o, 1e-3) << "split decode: GEMM 2 on the same h";
  EXPECT_EQ(again.h(), h_got) << "split decode: rerun";
  EXPECT_EQ(again.o(), o_got) << "split decode: rerun";
  fmt::print("[ decode  ] nvfp4 split {:<10} {:<22} T={:<5} h err={:.2e} (equal {:.4f})  o err={:.2e} (equal "
             "{:.4f})\n", s.name, c.name, c.T, err_h, equal_share(h_got, h_ref), err_o, equal_share(o_got, o_ref));
}

// nvfp4's decode form runs mma.sync's products in its k order: fp32 h and o bitwise those of the
// 64 x 128 mma.sync form (o on the same NVFP4 h). The split decode form adds
// two halves' sums: within threshold, bitwise on a rerun. The second shape gives the split GEMM 1
// an odd count of k steps per half (H = 1280: 5) and GEMM 2 the smallest K it takes (512: the A
// rows' region just holds the hand-over).
TEST_F(Sm90Nvfp4Kernels, DecodeIsBitwiseTheMmaKernels) {
  for (const Shape& s : {Shape{"flash/E32", 32, 4096, 2048, 6}, Shape{"H1280/I512", 32, 1280, 512, 6}}) {
    const Nvfp4DeviceWeights w = make_nvfp4_device_weights(s, 59);
    for (const RoutingCase& c : std::vector<RoutingCase>{{"random", 1, 0.0},
                                                         {"random, 10% holes", 7, 0.1},
                                                         {"one expert, all rows", 40, 0.0, -1, 9}}) {
      SCOPED_TRACE(fmt::format("{} {} T={}", s.name, c.name, c.T));
      check_decode_forms(s, c, w);
    }
  }
}

}  // namespace
}  // namespace moe_ep::cuda
