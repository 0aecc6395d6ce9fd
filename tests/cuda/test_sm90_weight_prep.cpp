// GPU weight preparation (cuda/weight_upload.h) against the host conversion it replaces
// (make_kernel_weights over prepare_host_weights): the same kernel tiles, scales, fold
// decisions, row factors and FP8-window statistics, byte for byte, from host and device packs,
// and the same error for an invalid scale byte.
#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/weight_prep.h"
#include "cuda/weight_upload.h"
#include "cuda_test_util.h"
#include "support/layer_problem.h"

namespace moe_ep::cuda {
namespace {

template <class T>
std::vector<T> download(const DeviceBuffer& b) {
  std::vector<T> out(b.bytes() / sizeof(T));
  if (!out.empty()) MOE_EP_CUDA_CHECK(cudaMemcpy(out.data(), b.get(), b.bytes(), cudaMemcpyDeviceToHost));
  return out;
}

testsupport::Problem small_problem(const std::string& recipe) {
  testsupport::Problem p = testsupport::tiny_problem(recipe);
  p.num_experts = 5;  // one staging chunk; the preset-sized GPU tests (Sm90Flash*) take many
  return p;
}

// Zero blocks, an all-zero row and (optionally) a W2 row outside the window in expert 3.
void shape_mxfp4_values(testsupport::WeightSet& ws, const testsupport::Problem& p, bool w2_outside) {
  const int64_t H = p.hidden, I = p.intermediate;
  auto& w13 = ws.w13.values();
  auto& w2 = ws.w2.values();
  std::memset(w13.data() + (1 * 2 * I + 7) * H / 2, 0, H / 2);             // expert 1, row 7: all zero
  std::memset(w13.data() + (2 * 2 * I + 130) * H / 2 + 32, 0x88, 16);      // expert 2, row 130, block 2: -0s
  std::memset(w2.data() + (4 * H + 9) * I / 2, 0, 16);                     // expert 4, row 9, block 0
  ws.w2_scale.values()[(4 * H + 9) * (I / 32)] = 250;                      // ...its scale is ignored
  if (w2_outside) {
    ws.w2_scale.values()[(3 * H + 11) * (I / 32) + 0] = 100;
    ws.w2_scale.values()[(3 * H + 11) * (I / 32) + 1] = 127;
  }
}

void expect_same(const DeviceKernelTensor& got, const KernelWeightTensor& want, const char* what) {
  EXPECT_EQ(got.folded, want.folded) << what;
  EXPECT_TRUE(download<uint8_t>(got.tiles) == want.tiles) << what << " tiles";
  EXPECT_TRUE(download<uint8_t>(got.scales) == want.scales) << what << " scales";
  EXPECT_EQ(got.row_base, want.row_base) << what << " row bases";
  EXPECT_EQ(download<float>(got.col_scale), want.row_factors()) << what << " column factors";
}

struct Case {
  std::string recipe;
  bool w2_outside, on_device, fold;
};

void PrintTo(const Case& c, std::ostream* os) {
  *os << c.recipe << (c.w2_outside ? " w2-row-outside" : " inside") << (c.on_device ? " device-pack" : " host-pack")
      << (c.fold ? "" : " no-fold");
}

class Sm90WeightPrep : public ::testing::TestWithParam<Case> {};

TEST_P(Sm90WeightPrep, MatchesTheHostConversionByteForByte) {
  MOE_EP_REQUIRE_CUDA();
  const Case c = GetParam();
  const testsupport::Problem p = small_problem(c.recipe);
  const WeightFormat format = c.recipe == "nvfp4" ? WeightFormat::kNVFP4 : WeightFormat::kMXFP4;
  testsupport::WeightSet ws = testsupport::random_weights(p, format, 23);
  if (format == WeightFormat::kMXFP4) shape_mxfp4_values(ws, p, c.w2_outside);
  const ExpertShape shape{p.num_experts, p.hidden, p.intermediate};
  const HostExpertWeights canonical = prepare_host_weights(p.recipe, ws.pack(), shape);
  const Fp8Fold fold = c.fold ? Fp8Fold::kWhenInside : Fp8Fold::kNever;
  const KernelWeights want = make_kernel_weights(canonical, serial_for, fold);

  CanonicalWeights src = canonical_view(canonical);
  cudatest::DeviceTensor d13, d13s, d2, d2s;
  if (c.on_device) {
    if (format == WeightFormat::kNVFP4) GTEST_SKIP() << "nvfp4 packs are made canonical on the host first";
    d13 = cudatest::to_device(ws.w13.view());
    d13s = cudatest::to_device(ws.w13_scale.view());
    d2 = cudatest::to_device(ws.w2.view());
    d2s = cudatest::to_device(ws.w2_scale.view());
    src.w13 = d13.buffer.get();
    src.w13_scale = d13s.buffer.get();
    src.w2 = d2.buffer.get();
    src.w2_scale = d2s.buffer.get();
    src.on_device = true;
  }
  const DeviceKernelWeights got = prepare_device_weights(src, fold, serial_for);
  expect_same(got.w13, want.w13, "w13");
  expect_same(got.w2, want.w2, "w2");
  if (format == WeightFormat::kMXFP4) {
    EXPECT_EQ(got.w2.folded, c.fold && !c.w2_outside);
    ASSERT_TRUE(got.window.has_value());
    const Fp8WindowStats host = analyze_fp8_window(canonical);
    EXPECT_EQ(got.window->rows, host.rows);
    EXPECT_EQ(got.window->rows_inside, host.rows_inside);
    EXPECT_EQ(got.window->experts, host.experts);
    EXPECT_EQ(got.window->experts_inside, host.experts_inside);
    EXPECT_EQ(got.window->max_row_span, host.max_row_span);
    if (c.w2_outside) EXPECT_GE(host.max_row_span, 27);
  } else {
    EXPECT_EQ(download<float>(got.w13_global),
              std::vector<float>(want.w13_global.begin(), want.w13_global.end()));
    EXPECT_EQ(download<float>(got.w2_global), std::vector<float>(want.w2_global.begin(), want.w2_global.end()));
  }
}

INSTANTIATE_TEST_SUITE_P(
    Packs, Sm90WeightPrep,
    ::testing::Values(Case{"mxfp4", false, false, true}, Case{"mxfp4", true, false, true},
                      Case{"mxfp4", false, true, true}, Case{"mxfp4", true, true, true},
                      Case{"mxfp4", false, false, false}, Case{"nvfp4", false, false, true}),
    [](const auto& info) {
      const Case& c = info.param;
      return c.recipe + (c.w2_outside ? "_W2RowOutside" : "_Inside") + (c.on_device ? "_DevicePack" : "_HostPack") +
             (c.fold ? "" : "_NoFold");
    });

// The first 0xFF byte of w13_scale, then of w2_scale, is named as check_weight_values names it.
TEST(Sm90WeightPrepErrors, InvalidScaleByteIsNamedAsOnTheHost) {
  MOE_EP_REQUIRE_CUDA();
  const testsupport::Problem p = small_problem("mxfp4");
  for (const bool w13 : {true, false}) {
    testsupport::WeightSet ws = testsupport::random_weights(p, WeightFormat::kMXFP4, 29);
    auto& scales = (w13 ? ws.w13_scale : ws.w2_scale).values();
    scales[scales.size() - 3] = 0xFF;
    scales[scales.size() / 2 + 1] = 0xFF;
    const WeightPack pack = ws.pack();
    std::string host_message;
    try {
      check_weight_values(pack);
    } catch (const Error& e) {
      host_message = e.what();
    }
    ASSERT_NE(host_message.find(w13 ? "w13_scale[" : "w2_scale["), std::string::npos) << host_message;
    CanonicalWeights src;
    src.format = WeightFormat::kMXFP4;
    src.shape = {p.num_experts, p.hidden, p.intermediate};
    src.w13 = pack.w13.ptr<const uint8_t>();
    src.w13_scale = pack.w13_scale.ptr<const uint8_t>();
    src.w2 = pack.w2.ptr<const uint8_t>();
    src.w2_scale = pack.w2_scale.ptr<const uint8_t>();
    src.validate = &pack;
    try {
      (void)prepare_device_weights(src, Fp8Fold::kWhenInside, serial_for);
      ADD_FAILURE() << "no error for a 0xFF scale in " << (w13 ? "w13_scale" : "w2_scale");
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      EXPECT_EQ(std::string(e.what()), host_message);
    }
  }
}

}  // namespace
}  // namespace moe_ep::cuda
