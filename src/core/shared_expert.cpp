#include "moe_ep/shared_expert.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string_view>

#include "check.h"
#include "moe_ep/desc.h"
#include "moe_ep/formats.h"

namespace moe_ep {
namespace {

void check_bf16_matrix(const TensorView& t, std::string_view name, int64_t rows, int64_t cols,
                       std::string_view dims) {
  MOE_EP_CHECK(t.defined(), "{} is missing; expected bf16 {} = [{}, {}]", name, dims, rows, cols);
  MOE_EP_CHECK(t.dtype == DType::kBF16, "{} has dtype {}; expected bf16", name,
               dtype_name(t.dtype));
  MOE_EP_CHECK(t.ndim == 2 && t.shape[0] == rows && t.shape[1] == cols,
               "{} has shape {}; expected {} = [{}, {}]", name, t.shape_str(), dims, rows, cols);
  MOE_EP_CHECK(t.is_contiguous(), "{} with shape {} is not row-major contiguous", name,
               t.shape_str());
  MOE_EP_CHECK(t.device.type == DeviceType::kCPU, "{} is on {}; expected cpu", name,
               t.device.str());
  MOE_EP_CHECK(t.numel() == 0 || t.data != nullptr, "{} has a null data pointer", name);
}

std::vector<float> widen(const TensorView& t) {
  std::vector<float> v(t.numel());
  const auto* p = t.ptr<const uint16_t>();
  for (size_t i = 0; i < v.size(); ++i) v[i] = bf16_to_float(p[i]);
  return v;
}

// The dot product order of the header: 16 interleaved partial sums, folded pairwise.
float dot16(const float* a, const float* b, int64_t n) {
  float p[16] = {};
  for (int64_t i = 0; i < n; i += 16)
    for (int j = 0; j < 16; ++j) p[j] += a[i + j] * b[i + j];
  for (int w = 8; w >= 1; w /= 2)
    for (int j = 0; j < w; ++j) p[j] += p[j + w];
  return p[0];
}

}  // namespace

std::unique_ptr<SharedExpert> SharedExpert::create(int64_t H, int64_t I,
                                                   std::optional<float> clamp,
                                                   const TensorView& w13, const TensorView& w2) {
  MOE_EP_CHECK(H >= 16 && H % 16 == 0,
               "shared expert hidden_size = {} is invalid; expected a positive multiple of 16", H);
  MOE_EP_CHECK(I >= 16 && I % 16 == 0,
               "shared expert intermediate_size = {} is invalid; expected a positive multiple of "
               "16", I);
  check_activation_clamp(clamp, "shared expert activation_clamp");
  check_bf16_matrix(w13, "shared w13", 2 * I, H, "[2I, H]");
  check_bf16_matrix(w2, "shared w2", H, I, "[H, I]");
  std::vector<float> a = widen(w13), b = widen(w2);
  for (size_t i = 0; i < a.size(); ++i)
    MOE_EP_CHECK(std::isfinite(a[i]), "shared w13[{}, {}] = {} is not finite", i / H, i % H, a[i]);
  for (size_t i = 0; i < b.size(); ++i)
    MOE_EP_CHECK(std::isfinite(b[i]), "shared w2[{}, {}] = {} is not finite", i / I, i % I, b[i]);
  return std::unique_ptr<SharedExpert>(new SharedExpert(
      H, I, clamp.value_or(std::numeric_limits<float>::infinity()), std::move(a), std::move(b)));
}

void SharedExpert::forward(const TensorView& x, const TensorView& out) const {
  run(x, out, false);
}

void SharedExpert::add_to(const TensorView& x, const TensorView& y) const { run(x, y, true); }

void SharedExpert::run(const TensorView& x, const TensorView& y, bool accumulate) const {
  MOE_EP_CHECK(x.defined() && x.ndim == 2, "shared expert x has shape {}; expected bf16 [T, H = {}]",
               x.shape_str(), H_);
  const int64_t T = x.shape[0];
  check_bf16_matrix(x, "shared expert x", T, H_, "[T, H]");
  check_bf16_matrix(y, accumulate ? "shared expert y" : "shared expert out", T, H_, "[T, H]");
  std::vector<float> xf(H_), h(I_);
  const auto* xp = x.ptr<const uint16_t>();
  auto* yp = y.ptr<uint16_t>();
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t i = 0; i < H_; ++i) xf[i] = bf16_to_float(xp[t * H_ + i]);
    for (int64_t j = 0; j < I_; ++j) {
      const float gate = std::min(round_to_bf16(dot16(xf.data(), &w13_[j * H_], H_)), clamp_);
      const float up = std::clamp(round_to_bf16(dot16(xf.data(), &w13_[(I_ + j) * H_], H_)),
                                  -clamp_, clamp_);
      const float silu = gate == -std::numeric_limits<float>::infinity()
                             ? -0.0f  // its limit; the formula gives NaN (as in clamped_swiglu)
                             : gate / (1.0f + std::exp(-gate));
      h[j] = round_to_bf16(silu * up);
    }
    for (int64_t i = 0; i < H_; ++i) {
      const float o = round_to_bf16(dot16(h.data(), &w2_[i * I_], I_));
      uint16_t& out = yp[t * H_ + i];
      out = float_to_bf16(accumulate ? bf16_to_float(out) + o : o);
    }
  }
}

}  // namespace moe_ep
