// The shared expert on the CPU: the recipe of moe_ep/shared_expert.h, exactly, one token at a
// time (registered by cpu_backend.cpp).
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "cpu/cpu_layers.h"
#include "moe_ep/formats.h"

namespace moe_ep::cpu {
namespace {

// The dot product order of the header: 16 interleaved partial sums, folded pairwise.
float dot16(const float* a, const float* b, int64_t n) {
  float p[16] = {};
  for (int64_t i = 0; i < n; i += 16)
    for (int j = 0; j < 16; ++j) p[j] += a[i + j] * b[i + j];
  for (int w = 8; w >= 1; w /= 2)
    for (int j = 0; j < w; ++j) p[j] += p[j + w];
  return p[0];
}

std::vector<float> widen(const TensorView& t) {
  std::vector<float> v(t.numel());
  const auto* p = t.ptr<const uint16_t>();
  for (size_t i = 0; i < v.size(); ++i) v[i] = bf16_to_float(p[i]);
  return v;
}

class CpuSharedExpert final : public SharedExpert::Impl {
 public:
  explicit CpuSharedExpert(const SharedExpertRequest& r)
      : H_(r.hidden_size), I_(r.intermediate_size),
        clamp_(r.activation_clamp.value_or(std::numeric_limits<float>::infinity())),
        w13_(widen(r.w13)), w2_(widen(r.w2)) {}

  void run(const TensorView& x, const TensorView& y, bool accumulate, void*) const override {
    const int64_t T = x.shape[0];
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

  std::string kernels(int64_t) const override { return "the host reference, one token at a time"; }

 private:
  int64_t H_, I_;
  float clamp_;
  std::vector<float> w13_, w2_;  // widened bf16 values
};

}  // namespace

std::unique_ptr<SharedExpert::Impl> make_cpu_shared_expert(const SharedExpertRequest& request) {
  return std::make_unique<CpuSharedExpert>(request);
}

}  // namespace moe_ep::cpu
