#include "support/reference_moe.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>

namespace moe_ep::testsupport {
namespace {

int floor_log2(double a) {  // a > 0
  int e = 0;
  std::frexp(a, &e);  // a = m * 2^e, m in [0.5, 1)
  return e - 1;
}

int ceil_log2(double a) {  // a > 0
  int e = 0;
  const double m = std::frexp(a, &e);
  return m == 0.5 ? e - 1 : e;
}

// Nearest multiple of `quantum` (a power of two), ties to even (the default rounding mode).
double round_to_quantum(double a, double quantum) { return std::nearbyint(a / quantum) * quantum; }

}  // namespace

namespace ref {

double e2m1(uint8_t nibble) {
  const int e = (nibble >> 1) & 3, m = nibble & 1;
  const double mag = e == 0 ? 0.5 * m : (1.0 + 0.5 * m) * std::ldexp(1.0, e - 1);
  return (nibble & 8) ? -mag : mag;
}

double e4m3(uint8_t byte) {
  const int e = (byte >> 3) & 15, m = byte & 7;
  if (e == 15 && m == 7) return std::numeric_limits<double>::quiet_NaN();
  const double mag = e == 0 ? std::ldexp(m / 8.0, -6) : std::ldexp(1.0 + m / 8.0, e - 7);
  return (byte & 0x80) ? -mag : mag;
}

double e8m0(uint8_t byte) { return std::ldexp(1.0, static_cast<int>(byte) - 127); }

double bf16(uint16_t bits) {
  const uint32_t u = static_cast<uint32_t>(bits) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

double round_bf16(double v) {
  if (!std::isfinite(v) || v == 0.0) return v;
  const double quantum = std::ldexp(1.0, std::max(floor_log2(std::fabs(v)), -126) - 7);
  const double r = round_to_quantum(v, quantum);
  return std::fabs(r) > 3.3895313892515355e38 ? std::copysign(INFINITY, v) : r;
}

double round_e4m3(double v) {
  if (std::isnan(v)) return v;
  const double a = std::fabs(v);
  if (a == 0.0) return v;
  const double quantum = std::ldexp(1.0, std::max(floor_log2(a), -6) - 3);
  return std::copysign(std::min(round_to_quantum(a, quantum), 448.0), v);
}

double round_e2m1(double v) {
  const double a = std::fabs(v);
  const double quantum = a < 2.0 ? 0.5 : (a < 4.0 ? 1.0 : 2.0);
  return std::copysign(std::min(round_to_quantum(a, quantum), 6.0), v);
}

}  // namespace ref

namespace {

using ref::round_e2m1;
using ref::round_e4m3;

uint8_t nibble_at(const uint8_t* packed, int64_t element) {
  const uint8_t byte = packed[element / 2];
  return (element % 2 == 0) ? (byte & 0xF) : (byte >> 4);
}

// Q8 (docs/spec.md §3): per 32 elements s = 2^ceil(log2(max(amax, 1e-4) / 448)), byte in [1, 254].
std::vector<double> q8(const std::vector<double>& v) {
  std::vector<double> out(v.size());
  for (size_t b = 0; b < v.size(); b += 32) {
    double amax = 0.0;
    for (size_t i = b; i < b + 32; ++i) amax = std::max(amax, std::fabs(v[i]));
    amax = std::max(amax, double{1e-4f});  // the recipe's floor is the fp32 constant
    const int byte = std::clamp(ceil_log2(static_cast<float>(amax) / 448.0f) + 127, 1, 254);
    const double s = ref::e8m0(static_cast<uint8_t>(byte));
    // Finite values beyond 1.875 * 2^127 saturate to it (else the code times s is 2^128).
    constexpr double kMaxFinite = 0x1.ep+127, kF32Max = 0x1.fffffep+127;
    for (size_t i = b; i < b + 32; ++i) {
      const double x = std::fabs(v[i]) > kMaxFinite && std::fabs(v[i]) <= kF32Max
                           ? std::copysign(kMaxFinite, v[i]) : v[i];
      out[i] = round_e4m3(x / s) * s;
    }
  }
  return out;
}

// NVFP4 with encode factor g (docs/spec.md §4): s = e4m3(g * amax_block / 6),
// q = e2m1(clamp(v * g / s, ±6)), value q * s / g. The recipe evaluates its scale formulas in
// fp32 (inputs are fp32), so these do too: in double, a product that lands exactly on an
// e2m1/e4m3 rounding midpoint in fp32 would round the other way.
void nvfp4_blocks(const double* v, int64_t n, float g, double* out) {
  for (int64_t b = 0; b < n; b += 16) {
    float amax = 0.0f;
    for (int64_t i = b; i < b + 16; ++i) amax = std::max(amax, std::fabs(static_cast<float>(v[i])));
    const float s = static_cast<float>(round_e4m3(g * amax / 6.0f));
    for (int64_t i = b; i < b + 16; ++i) {
      const float scaled = static_cast<float>(v[i]) * g / s;
      out[i] = s == 0.0f ? 0.0 : round_e2m1(std::clamp<double>(scaled, -6.0, 6.0)) * s / g;
    }
  }
}

// g = 448 * 6 / amax in fp32 (1 for an all-zero tensor).
float nvfp4_encode(double amax) {
  if (amax == 0.0) return 1.0f;
  const float g = 448.0f * 6.0f / static_cast<float>(amax);
  return std::isfinite(g) ? g : 1.0f;
}

double max_abs(const double* v, int64_t n) {
  double m = 0.0;
  for (int64_t i = 0; i < n; ++i) m = std::max(m, std::fabs(v[i]));
  return m;
}

// MXFP4 of real values (docs/spec.md §5): s = 2^ceil(log2(amax / 6)), e2m1 of v / s.
void mxfp4_blocks(const double* v, int64_t n, double* out) {
  for (int64_t b = 0; b < n; b += 32) {
    const double amax = max_abs(v + b, 32);
    if (amax == 0.0) {
      std::fill(out + b, out + b + 32, 0.0);
      continue;
    }
    const double s = ref::e8m0(static_cast<uint8_t>(std::clamp(ceil_log2(amax / 6.0) + 127, 0, 254)));
    for (int64_t i = b; i < b + 32; ++i) out[i] = round_e2m1(v[i] / s) * s;
  }
}

// The source pack's values of one [E, rows, k] tensor (MXFP4 decoded exactly, or BF16).
std::vector<double> source_values(const WeightSet& w, bool is_w13, int64_t E, int64_t rows,
                                  int64_t k) {
  std::vector<double> out(E * rows * k);
  if (w.format == WeightFormat::kBF16) {
    const auto& t = is_w13 ? w.w13_bf16 : w.w2_bf16;
    for (size_t i = 0; i < out.size(); ++i) out[i] = ref::bf16(t[i]);
    return out;
  }
  const auto& packed = is_w13 ? w.w13 : w.w2;
  const auto& scales = is_w13 ? w.w13_scale : w.w2_scale;
  for (int64_t i = 0; i < E * rows * k; ++i)
    out[i] = ref::e2m1(nibble_at(packed.values().data(), i)) * ref::e8m0(scales[i / 32]);
  return out;
}

std::vector<double> canonical_tensor(const Problem& p, const WeightSet& w, bool is_w13) {
  const int64_t E = p.num_experts, I = p.intermediate, H = p.hidden;
  const int64_t rows = is_w13 ? 2 * I : H, k = is_w13 ? H : I, per_expert = rows * k;
  if (p.recipe == Recipe::kNvfp4 && w.format == WeightFormat::kNVFP4) {
    const auto& packed = is_w13 ? w.w13 : w.w2;
    const auto& scales = is_w13 ? w.w13_scale : w.w2_scale;
    const auto& global = is_w13 ? w.w13_global : w.w2_global;
    std::vector<double> out(E * per_expert);
    for (int64_t i = 0; i < E * per_expert; ++i) {
      const int64_t e = i / per_expert, r = (i % per_expert) / k;
      const double ws2 = is_w13 ? global[2 * e + (r < I ? 0 : 1)] : global[e];
      out[i] = ref::e2m1(nibble_at(packed.values().data(), i)) * ref::e4m3(scales[i / 16]) * ws2;
    }
    return out;
  }
  std::vector<double> v = source_values(w, is_w13, E, rows, k);
  std::vector<double> out(v.size());
  if (p.recipe == Recipe::kMxfp4) {
    if (w.format == WeightFormat::kMXFP4) return v;
    mxfp4_blocks(v.data(), static_cast<int64_t>(v.size()), out.data());
    return out;
  }
  // nvfp4 from MXFP4 or BF16: bf16 values, one global scale per expert tensor.
  for (double& x : v) x = ref::round_bf16(x);
  for (int64_t e = 0; e < E; ++e) {
    const double* src = v.data() + e * per_expert;
    nvfp4_blocks(src, per_expert, nvfp4_encode(max_abs(src, per_expert)), out.data() + e * per_expert);
  }
  return out;
}

}  // namespace

ReferenceModel::ReferenceModel(const Problem& p, const WeightSet& w)
    : p_(p), w13_(canonical_tensor(p, w, true)), w2_(canonical_tensor(p, w, false)) {}

std::vector<double> ReferenceModel::activation(const Inputs& in, int64_t t) const {
  const int64_t H = p_.hidden;
  std::vector<double> a(H);
  const bool nvfp4 = p_.recipe == Recipe::kNvfp4;
  if (p_.quantize_input) {
    std::vector<double> x(H);
    for (int64_t j = 0; j < H; ++j) x[j] = ref::bf16(in.x[t * H + j]);
    if (!nvfp4) return q8(x);
    nvfp4_blocks(x.data(), H, nvfp4_encode(max_abs(x.data(), H)), a.data());
    return a;
  }
  for (int64_t j = 0; j < H; ++j) {
    if (nvfp4)
      a[j] = ref::e2m1(nibble_at(in.a.values().data() + t * H / 2, j)) *
             ref::e4m3(in.a_scale[t * H / 16 + j / 16]) / in.a_global[t];
    else
      a[j] = ref::e4m3(in.a[t * H + j]) * ref::e8m0(in.a_scale[t * H / 32 + j / 32]);
  }
  return a;
}

std::vector<double> ReferenceModel::quantize_h(const std::vector<double>& h) const {
  if (p_.recipe != Recipe::kNvfp4) return q8(h);
  std::vector<double> out(h.size());
  nvfp4_blocks(h.data(), static_cast<int64_t>(h.size()), nvfp4_encode(max_abs(h.data(), h.size())),
               out.data());
  return out;
}

std::vector<double> ReferenceModel::token(const Inputs& in, int64_t t, Rounding rounding) const {
  const int64_t H = p_.hidden, I = p_.intermediate;
  const double c = p_.clamp ? *p_.clamp : INFINITY;
  auto maybe_bf16 = [&](double v) { return rounding == Rounding::kBf16 ? ref::round_bf16(v) : v; };
  const std::vector<double> a = activation(in, t);
  std::vector<double> y(H, 0.0), h(I);
  for (int64_t k = 0; k < p_.top_k; ++k) {
    const int64_t e = in.id(t, k);
    if (e < 0) continue;
    const double weight = in.weights[t * p_.top_k + k];
    const double* w13 = w13_.data() + e * 2 * I * H;
    for (int64_t i = 0; i < I; ++i) {
      double gate = 0.0, up = 0.0;
      for (int64_t j = 0; j < H; ++j) {
        gate += a[j] * w13[i * H + j];
        up += a[j] * w13[(I + i) * H + j];
      }
      gate = std::min(maybe_bf16(gate), c);
      up = std::clamp(maybe_bf16(up), -c, c);
      h[i] = (std::isinf(gate) && gate < 0 ? -0.0 : gate / (1.0 + std::exp(-gate))) * up * weight;
    }
    const std::vector<double> b = quantize_h(h);
    const double* w2 = w2_.data() + e * H * I;
    for (int64_t j = 0; j < H; ++j) {
      double o = 0.0;
      for (int64_t i = 0; i < I; ++i) o += b[i] * w2[j * I + i];
      y[j] += maybe_bf16(o);
    }
  }
  for (double& v : y) v = maybe_bf16(v);
  return y;
}

std::vector<double> ReferenceModel::forward(const Inputs& in, Rounding rounding) const {
  std::vector<double> y;
  y.reserve(in.tokens * p_.hidden);
  for (int64_t t = 0; t < in.tokens; ++t) {
    const std::vector<double> row = token(in, t, rounding);
    y.insert(y.end(), row.begin(), row.end());
  }
  return y;
}

}  // namespace moe_ep::testsupport
