// The shared expert on the GPU (cuda/sm90_shared_expert.h) against the CPU SharedExpert:
// forward and add_to, tiny and deepseek-v4-flash shapes, clamp on and off, partial token
// groups and tiles, both kernel ways; outputs poisoned first; float64 relative error within the
// mxfp4 threshold; reruns bitwise equal.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include <fmt/format.h>

#include "cuda/device_buffer.h"
#include "cuda/errors.h"
#include "cuda/sm90_shared_expert.h"
#include "cuda_test_util.h"
#include "moe_ep/formats.h"
#include "moe_ep/shared_expert.h"

namespace moe_ep {
namespace {

std::vector<uint16_t> gaussian_bf16(size_t n, float sigma, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d(0.0f, sigma);
  std::vector<uint16_t> v(n);
  for (uint16_t& b : v) b = float_to_bf16(d(rng));
  return v;
}

double rel_err(const std::vector<uint16_t>& y, const std::vector<uint16_t>& ref, double* exact) {
  double num = 0, den = 0;
  size_t same = 0;
  for (size_t i = 0; i < y.size(); ++i) {
    const double a = bf16_to_float(y[i]), b = bf16_to_float(ref[i]);
    if (!std::isfinite(a)) return INFINITY;
    num += (a - b) * (a - b);
    den += b * b;
    same += y[i] == ref[i];
  }
  *exact = static_cast<double>(same) / static_cast<double>(y.size());
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

struct Case {
  int64_t H, I, T;
  std::optional<float> clamp;
  bool x_off_by_one = false;  // x one bf16 past a 4-byte boundary (the 2-byte loads of the dot way)
};

struct Outcome {
  double e_out = 0, e_add = 0, exact_out = 0, exact_add = 0;
  bool rerun_bitwise = false, tensor_cores = false;
};

// forward (into a poisoned y) and add_to against the CPU SharedExpert on fresh gaussian data.
Outcome run_case(const Case& c, cuda::Sm90SharedExpert::Way way) {
  const std::vector<uint16_t> w13 = gaussian_bf16(2 * c.I * c.H, 4.0f / std::sqrt(float(c.H)), c.H + c.T);
  const std::vector<uint16_t> w2 = gaussian_bf16(c.H * c.I, 1.0f / std::sqrt(float(c.I)), c.I + 3);
  const std::vector<uint16_t> x = gaussian_bf16(c.T * c.H, 1.0f, c.T + 11);
  const std::vector<uint16_t> y0 = gaussian_bf16(c.T * c.H, 0.5f, c.T + 12);
  const TensorView w13v = TensorView::contiguous(const_cast<uint16_t*>(w13.data()), DType::kBF16, {2 * c.I, c.H});
  const TensorView w2v = TensorView::contiguous(const_cast<uint16_t*>(w2.data()), DType::kBF16, {c.H, c.I});
  auto cpu = SharedExpert::create(c.H, c.I, c.clamp, w13v, w2v);
  std::vector<uint16_t> ref_out(c.T * c.H, 0xFFFF), ref_add = y0;
  const TensorView xv = TensorView::contiguous(const_cast<uint16_t*>(x.data()), DType::kBF16, {c.T, c.H});
  cpu->forward(xv, TensorView::contiguous(ref_out.data(), DType::kBF16, {c.T, c.H}));
  cpu->add_to(xv, TensorView::contiguous(ref_add.data(), DType::kBF16, {c.T, c.H}));

  cuda::Sm90SharedExpert gpu(c.H, c.I, c.clamp, w13v, w2v, 512, 0);
  gpu.set_way(way);
  Outcome r;
  r.tensor_cores = gpu.uses_tensor_cores(c.T);
  cuda::DeviceBuffer dx_buf(2 * (c.T * c.H + 1)), dy(c.T * c.H * 2);
  uint16_t* dx = dx_buf.get<uint16_t>() + (c.x_off_by_one ? 1 : 0);
  MOE_EP_CUDA_CHECK(cudaMemcpy(dx, x.data(), 2 * x.size(), cudaMemcpyHostToDevice));
  std::vector<uint16_t> out(c.T * c.H), again(c.T * c.H), add(c.T * c.H);
  for (std::vector<uint16_t>* dst : {&out, &again}) {
    MOE_EP_CUDA_CHECK(cudaMemset(dy.get(), 0xFF, dy.bytes()));
    gpu.forward(dx, dy.get<uint16_t>(), c.T, nullptr);
    MOE_EP_CUDA_CHECK(cudaMemcpy(dst->data(), dy.get(), dy.bytes(), cudaMemcpyDeviceToHost));
  }
  MOE_EP_CUDA_CHECK(cudaMemcpy(dy.get(), y0.data(), dy.bytes(), cudaMemcpyHostToDevice));
  gpu.add_to(dx, dy.get<uint16_t>(), c.T, nullptr);
  MOE_EP_CUDA_CHECK(cudaMemcpy(add.data(), dy.get(), dy.bytes(), cudaMemcpyDeviceToHost));
  r.e_out = rel_err(out, ref_out, &r.exact_out);
  r.e_add = rel_err(add, ref_add, &r.exact_add);
  r.rerun_bitwise = out == again;
  return r;
}

std::string describe(const Case& c, const Outcome& r) {
  return fmt::format("H={} I={} T={} clamp={}{} ({}): forward rel_err {:.3e} ({:.4f} of elements bitwise), "
                     "add_to {:.3e} ({:.4f})", c.H, c.I, c.T, c.clamp.value_or(INFINITY),
                     c.x_off_by_one ? " x+2B" : "", r.tensor_cores ? "tensor cores" : "dot products", r.e_out, r.exact_out, r.e_add, r.exact_add);
}

TEST(Sm90SharedExpert, MatchesTheCpuSharedExpert) {
  MOE_EP_REQUIRE_CUDA();
  const double threshold = testing::device_rel_err_threshold(Recipe::kMxfp4);
  for (const Case& c : {Case{256, 128, 1, 10.0f}, Case{256, 128, 7, 10.0f}, Case{256, 128, 70, std::nullopt},
                        Case{256, 128, 5, 10.0f, true}, Case{144, 80, 3, 10.0f}, Case{144, 80, 1, std::nullopt, true},
                        Case{4096, 2048, 1, 10.0f},
                        Case{4096, 2048, 6, 10.0f}, Case{4096, 2048, 2, std::nullopt, true}}) {
    const Outcome r = run_case(c, cuda::Sm90SharedExpert::Way::kDotProducts);
    const std::string what = describe(c, r);
    EXPECT_FALSE(r.tensor_cores) << what;
    EXPECT_LE(r.e_out, threshold) << what;
    EXPECT_LE(r.e_add, threshold) << what;
    EXPECT_TRUE(r.rerun_bitwise) << what;
    EXPECT_GT(r.exact_out, 0.9) << what << ": the sums follow the CPU order, so nearly all bits match";
    fmt::print("[ shared   ] {}\n", what);
  }
  std::vector<uint16_t> w(2 * 16 * 16);
  const TensorView bad = TensorView::contiguous(w.data(), DType::kBF16, {32, 16});
  EXPECT_THROW(cuda::Sm90SharedExpert(16, 16, -1.0f, bad, bad, 1, 0), Error);
  cuda::Sm90SharedExpert odd(16, 16, 1.0f, bad, TensorView::contiguous(w.data(), DType::kBF16, {16, 16}), 1, 0);
  EXPECT_THROW(odd.set_way(cuda::Sm90SharedExpert::Way::kTensorCores), Error);
}

// The prefill kernels: partial 128-row tiles, one and several column tiles, clamp on and off;
// the automatic choice takes them from kSharedExpertMmaMinTokens tokens on.
TEST(Sm90SharedExpert, TensorCoresMatchTheCpuSharedExpert) {
  MOE_EP_REQUIRE_CUDA();
  const double threshold = testing::device_rel_err_threshold(Recipe::kMxfp4);
  for (const Case& c : {Case{256, 128, 1, 10.0f}, Case{256, 128, 37, std::nullopt}, Case{256, 128, 128, 10.0f},
                        Case{256, 128, 300, 10.0f}, Case{384, 192, 129, 1.0f}, Case{4096, 2048, 200, 10.0f}}) {
    const Outcome r = run_case(c, cuda::Sm90SharedExpert::Way::kTensorCores);
    const std::string what = describe(c, r);
    EXPECT_TRUE(r.tensor_cores) << what;
    EXPECT_LE(r.e_out, threshold) << what;
    EXPECT_LE(r.e_add, threshold) << what;
    EXPECT_TRUE(r.rerun_bitwise) << what;
    EXPECT_GT(r.exact_out, 0.5) << what << ": fp32 sums in another order still round to the same bf16 mostly";
    fmt::print("[ shared   ] {}\n", what);
  }
  const Outcome autom = run_case(Case{256, 128, 64, 10.0f}, cuda::Sm90SharedExpert::Way::kAuto);
  EXPECT_TRUE(autom.tensor_cores) << describe(Case{256, 128, 64, 10.0f}, autom);
  EXPECT_LE(autom.e_out, threshold);
  const Outcome decode = run_case(Case{256, 128, 63, 10.0f}, cuda::Sm90SharedExpert::Way::kAuto);
  EXPECT_FALSE(decode.tensor_cores) << describe(Case{256, 128, 63, 10.0f}, decode);
}

}  // namespace
}  // namespace moe_ep
