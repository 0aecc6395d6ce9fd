// Shared expert: exact small-value cases, a float64 re-implementation of the recipe, the clamp;
// bad input; a device without a shared expert (kUnsupported with the reason). On a GPU:
// tests/cuda/test_sm90_shared_expert.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>
#include <string>

#include "moe_ep/error.h"
#include "moe_ep/formats.h"
#include "moe_ep/shared_expert.h"
#include "support/host_tensor.h"

namespace moe_ep {
namespace {

using testsupport::HostTensor;

HostTensor<uint16_t> bf16_tensor(std::vector<int64_t> shape, const std::vector<float>& v) {
  HostTensor<uint16_t> t(DType::kBF16, std::move(shape));
  for (size_t i = 0; i < v.size(); ++i) t[i] = float_to_bf16(v[i]);
  return t;
}

// The recipe of shared_expert.h in float64, rounding to bf16 where the recipe does.
std::vector<double> reference(const HostTensor<uint16_t>& x, const HostTensor<uint16_t>& w13,
                              const HostTensor<uint16_t>& w2, int64_t H, int64_t I, double c) {
  const int64_t T = x.shape()[0];
  std::vector<double> out(T * H), h(I);
  auto bf = [](double v) { return static_cast<double>(round_to_bf16(static_cast<float>(v))); };
  auto val = [](uint16_t b) { return static_cast<double>(bf16_to_float(b)); };
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t j = 0; j < I; ++j) {
      double g = 0, u = 0;
      for (int64_t i = 0; i < H; ++i) {
        g += val(x[t * H + i]) * val(w13[j * H + i]);
        u += val(x[t * H + i]) * val(w13[(I + j) * H + i]);
      }
      g = std::min(bf(g), c);
      u = std::clamp(bf(u), -c, c);
      h[j] = bf(g / (1.0 + std::exp(-g)) * u);
    }
    for (int64_t i = 0; i < H; ++i) {
      double o = 0;
      for (int64_t j = 0; j < I; ++j) o += h[j] * val(w2[i * I + j]);
      out[t * H + i] = bf(o);
    }
  }
  return out;
}

TEST(SharedExpert, ExactSmallValues) {
  // H = I = 16; x = 1 at i = t, weights 0/1 so every dot product is a small integer.
  const int64_t H = 16, I = 16, T = 3;
  std::vector<float> xv(T * H, 0.0f), w13v(2 * I * H, 0.0f), w2v(H * I, 0.0f);
  for (int64_t t = 0; t < T; ++t) xv[t * H + t] = 1.0f;
  for (int64_t j = 0; j < I; ++j) {
    w13v[j * H + j % H] = 2.0f;        // gate_j = 2 x[j]
    w13v[(I + j) * H + j % H] = 3.0f;  // up_j = 3 x[j]
  }
  for (int64_t i = 0; i < H; ++i) w2v[i * I + i] = 1.0f;  // o_i = h_i
  auto x = bf16_tensor({T, H}, xv), w13 = bf16_tensor({2 * I, H}, w13v),
       w2 = bf16_tensor({H, I}, w2v);
  auto se = SharedExpert::create(H, I, 10.0f, w13.view(), w2.view());
  HostTensor<uint16_t> out(DType::kBF16, {T, H}, 0x7FC0);
  se->forward(x.view(), out.view());
  const float h = round_to_bf16(2.0f / (1.0f + std::exp(-2.0f)) * 3.0f);  // silu(2) * 3
  for (int64_t t = 0; t < T; ++t)
    for (int64_t i = 0; i < H; ++i)
      EXPECT_EQ(out[t * H + i], float_to_bf16(i == t ? h : 0.0f)) << t << "," << i;
  // add_to: y = bf16(y + o).
  auto y = bf16_tensor({T, H}, std::vector<float>(T * H, 0.5f));
  se->add_to(x.view(), y.view());
  for (int64_t t = 0; t < T; ++t)
    for (int64_t i = 0; i < H; ++i)
      EXPECT_EQ(y[t * H + i], float_to_bf16(0.5f + (i == t ? h : 0.0f)));
}

TEST(SharedExpert, MatchesFloat64RecipeAndTheClampActs) {
  const int64_t H = 64, I = 32, T = 9;
  std::mt19937_64 rng(77);
  std::normal_distribution<float> n01(0.0f, 1.0f);
  std::vector<float> xv(T * H), w13v(2 * I * H), w2v(H * I);
  for (auto& v : xv) v = n01(rng);
  for (auto& v : w13v) v = 0.6f * n01(rng);
  for (auto& v : w2v) v = 0.2f * n01(rng);
  auto x = bf16_tensor({T, H}, xv), w13 = bf16_tensor({2 * I, H}, w13v),
       w2 = bf16_tensor({H, I}, w2v);
  for (float clamp : {0.5f, 1e30f}) {
    auto se = SharedExpert::create(H, I, clamp, w13.view(), w2.view());
    HostTensor<uint16_t> out(DType::kBF16, {T, H}, 0x7FC0);
    se->forward(x.view(), out.view());
    const auto ref = reference(x, w13, w2, H, I, clamp);
    double num = 0, den = 0;
    int64_t equal = 0;
    for (size_t i = 0; i < ref.size(); ++i) {
      const double d = bf16_to_float(out[i]) - ref[i];
      num += d * d;
      den += ref[i] * ref[i];
      equal += bf16_to_float(out[i]) == ref[i];
    }
    EXPECT_LT(std::sqrt(num / den), 1e-2) << "clamp " << clamp;
    EXPECT_GT(equal, static_cast<int64_t>(ref.size() * 9 / 10)) << "clamp " << clamp;
  }
  // The clamp changes the result (|gu| reaches well above 0.5 here).
  auto clamped = SharedExpert::create(H, I, 0.5f, w13.view(), w2.view());
  auto open = SharedExpert::create(H, I, std::nullopt, w13.view(), w2.view());
  HostTensor<uint16_t> a(DType::kBF16, {T, H}), b(DType::kBF16, {T, H});
  clamped->forward(x.view(), a.view());
  open->forward(x.view(), b.view());
  EXPECT_NE(a.values(), b.values());
}

TEST(SharedExpert, BadInputNamesTheField) {
  HostTensor<uint16_t> w13(DType::kBF16, {32, 16}), w2(DType::kBF16, {16, 16});
  EXPECT_NO_THROW(SharedExpert::create(16, 16, 1.0f, w13.view(), w2.view()));
  try {
    SharedExpert::create(16, 16, -1.0f, w13.view(), w2.view());
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("activation_clamp = -1"), std::string::npos);
  }
  try {
    SharedExpert::create(16, 8, 1.0f, w13.view(), w2.view());
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("intermediate_size = 8"), std::string::npos);
  }
  try {
    SharedExpert::create(16, 16, 1.0f, w2.view(), w2.view());
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("shared w13 has shape [16, 16]"), std::string::npos)
        << e.what();
  }
  auto se = SharedExpert::create(16, 16, 1.0f, w13.view(), w2.view());
  HostTensor<uint16_t> x(DType::kBF16, {2, 16}), y(DType::kBF16, {3, 16});
  EXPECT_THROW(se->add_to(x.view(), y.view()), Error);
}

// The error of `call`: its code and message ("" when it succeeds).
std::string error_of(const std::function<void()>& call, ErrorCode* code) {
  try {
    call();
  } catch (const Error& e) {
    *code = e.code();
    return e.message();
  }
  return "";
}

TEST(SharedExpert, MaxTokensBoundsACallAndTensorsMustBeOnItsDevice) {
  HostTensor<uint16_t> w13(DType::kBF16, {32, 16}), w2(DType::kBF16, {16, 16});
  auto se = SharedExpert::create(16, 16, 1.0f, w13.view(), w2.view(), Device::cpu(), 4);
  EXPECT_EQ(se->device(), Device::cpu());
  EXPECT_EQ(se->max_tokens(), 4);
  EXPECT_EQ(se->weight_bytes(), 3 * 16 * 16 * 2);
  EXPECT_FALSE(se->kernels(4).empty());
  HostTensor<uint16_t> x4(DType::kBF16, {4, 16}), y4(DType::kBF16, {4, 16});
  HostTensor<uint16_t> x5(DType::kBF16, {5, 16}), y5(DType::kBF16, {5, 16});
  EXPECT_NO_THROW(se->forward(x4.view(), y4.view()));
  ErrorCode code = ErrorCode::kInternal;
  std::string m = error_of([&] { se->forward(x5.view(), y5.view()); }, &code);
  EXPECT_EQ(code, ErrorCode::kInvalidArgument) << m;
  EXPECT_NE(m.find("T = 5 tokens; expected at most max_tokens = 4"), std::string::npos) << m;
  TensorView on_gpu = y4.view();
  on_gpu.device = Device::cuda(0);
  m = error_of([&] { se->add_to(x4.view(), on_gpu); }, &code);
  EXPECT_EQ(code, ErrorCode::kInvalidArgument) << m;
  EXPECT_NE(m.find("shared expert y is on cuda:0; expected cpu"), std::string::npos) << m;
  m = error_of([&] { SharedExpert::create(16, 16, 1.0f, w13.view(), w2.view(), Device::cpu(), -1); }, &code);
  EXPECT_NE(m.find("max_tokens = -1"), std::string::npos) << m;
  // Weights on a device other than the expert's.
  TensorView w13_gpu = w13.view();
  w13_gpu.device = Device::cuda(1);
  m = error_of([&] { SharedExpert::create(16, 16, 1.0f, w13_gpu, w2.view()); }, &code);
  EXPECT_EQ(code, ErrorCode::kInvalidArgument) << m;
  EXPECT_NE(m.find("shared w13 is on cuda:1; expected cpu"), std::string::npos) << m;
}

// cuda:999 exists on no machine: a build without CUDA has no backend for it, a CUDA build cannot
// read its compute capability. The weights are checked first (kInvalidArgument on any build).
TEST(SharedExpert, AGpuThisBuildOrMachineCannotUseIsUnsupported) {
  HostTensor<uint16_t> w13(DType::kBF16, {32, 16}), w2(DType::kBF16, {16, 16});
  ErrorCode code = ErrorCode::kInternal;
  std::string m = error_of([&] { SharedExpert::create(16, 16, 1.0f, w13.view(), w2.view(), Device::cuda(999), 8); }, &code);
  EXPECT_EQ(code, ErrorCode::kUnsupported) << m;
  EXPECT_NE(m.find("a standalone shared expert on cuda:999"), std::string::npos) << m;
  m = error_of([&] { SharedExpert::create(16, 16, 1.0f, w2.view(), w2.view(), Device::cuda(999), 8); }, &code);
  EXPECT_EQ(code, ErrorCode::kInvalidArgument) << m;
  EXPECT_NE(m.find("shared w13 has shape [16, 16]"), std::string::npos) << m;
}

}  // namespace
}  // namespace moe_ep
