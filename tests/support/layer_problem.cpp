#include "support/layer_problem.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>

#include <fmt/format.h>

#include "moe_ep/formats.h"
#include "moe_ep/quant.h"
#include "support/reference_moe.h"

namespace moe_ep::testsupport {

MoeDesc Problem::desc() const {
  MoeDesc d;
  d.fleet = fleet();
  d.recipe = recipe;
  d.intermediate_size = intermediate;
  d.top_k = top_k;
  d.activation_clamp = clamp;
  d.quantize_input = quantize_input;
  d.numerics.exact_accumulation = exact_accumulation;
  d.shared_intermediate_size = shared_intermediate;
  return d;
}

std::string Problem::str() const {
  return fmt::format("recipe={} E={} H={} I={} K={} max_tokens={} clamp={} quantize_input={} "
                     "exact_accumulation={} shared_intermediate={} overrides=[{}]",
                     name(), num_experts, hidden, intermediate, top_k, max_tokens,
                     clamp ? fmt::format("{}", *clamp) : std::string("none"), quantize_input,
                     exact_accumulation, shared_intermediate, overrides.str());
}

Problem tiny_problem(Recipe recipe) {
  Problem p;
  p.recipe = recipe;
  return p;
}

Problem tiny_problem(const std::string& recipe) { return tiny_problem(parse_recipe(recipe)); }

WeightPack WeightSet::pack() const {
  WeightPack w;
  w.format = format;
  w.shared_w13 = shared_w13.view();
  w.shared_w2 = shared_w2.view();
  if (format == WeightFormat::kBF16) {
    w.w13 = w13_bf16.view();
    w.w2 = w2_bf16.view();
    return w;
  }
  w.w13 = w13.view();
  w.w13_scale = w13_scale.view();
  w.w2 = w2.view();
  w.w2_scale = w2_scale.view();
  w.w13_global = w13_global.view();
  w.w2_global = w2_global.view();
  return w;
}

namespace {

// [E, rows, k] Gaussian values; expert e, row r has standard deviation
// base * 2^(e % 4 when scale_experts) * 2^u, u uniform in [-1, 1] per row.
std::vector<float> gaussian_experts(int64_t E, int64_t rows, int64_t k, double base,
                                    bool scale_experts, std::mt19937_64& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<double> octave(-1.0, 1.0);
  std::vector<float> v(E * rows * k);
  for (int64_t e = 0; e < E; ++e)
    for (int64_t r = 0; r < rows; ++r) {
      const double sigma = base * (scale_experts ? std::ldexp(1.0, e % 4) : 1.0) *
                           std::exp2(octave(rng));
      for (int64_t c = 0; c < k; ++c)
        v[(e * rows + r) * k + c] = static_cast<float>(normal(rng) * sigma);
    }
  return v;
}

void fill_fp4(WeightFormat format, const std::vector<float>& v, int64_t E, int64_t rows,
              int64_t k, HostTensor<uint8_t>& packed, HostTensor<uint8_t>& scales,
              HostTensor<float>* global, int64_t globals_per_expert) {
  const bool mx = format == WeightFormat::kMXFP4;
  const int64_t block = mx ? kMxBlock : kNvBlock;
  packed = HostTensor<uint8_t>(DType::kU8, {E, rows, k / 2});
  scales = HostTensor<uint8_t>(mx ? DType::kE8M0 : DType::kE4M3, {E, rows, k / block});
  if (!mx) {
    *global = globals_per_expert == 1 ? HostTensor<float>(DType::kF32, {E})
                                      : HostTensor<float>(DType::kF32, {E, globals_per_expert});
  }
  const int64_t per = rows * k;
  for (int64_t e = 0; e < E; ++e) {
    const float* src = v.data() + e * per;
    uint8_t* p = packed.values().data() + e * per / 2;
    uint8_t* s = scales.values().data() + e * per / block;
    if (mx) {
      quantize_mxfp4(src, rows, k, p, s);
    } else {
      const float g = nvfp4_global_encode(max_abs(src, per));
      quantize_nvfp4(src, rows, k, g, p, s);
      for (int64_t j = 0; j < globals_per_expert; ++j)
        (*global)[e * globals_per_expert + j] = 1.0f / g;
    }
  }
}

HostTensor<uint16_t> to_bf16(const std::vector<float>& v, std::vector<int64_t> shape) {
  HostTensor<uint16_t> t(DType::kBF16, std::move(shape));
  for (size_t i = 0; i < v.size(); ++i) t[i] = float_to_bf16(v[i]);
  return t;
}

// Odd experts: up weight_scale_2 doubled, up block scales halved (only where all halve exactly).
void split_gate_up_globals(const Problem& p, WeightSet& w) {
  const int64_t I = p.intermediate, H = p.hidden, half = I * H / kNvBlock;
  for (int64_t e = 1; e < p.num_experts; e += 2) {
    uint8_t* up = w.w13_scale.values().data() + e * 2 * half + half;
    bool exact = true;
    for (int64_t i = 0; i < half; ++i) {
      const float s = e4m3_to_float(up[i]);
      exact = exact && e4m3_to_float(float_to_e4m3(s / 2)) == s / 2;
    }
    if (!exact) continue;
    for (int64_t i = 0; i < half; ++i) up[i] = float_to_e4m3(e4m3_to_float(up[i]) / 2);
    w.w13_global[2 * e + 1] *= 2.0f;
  }
}

}  // namespace

WeightSet random_weights(const Problem& p, WeightFormat format, uint64_t seed,
                         const WeightOptions& options) {
  std::mt19937_64 rng(seed);
  const int64_t E = p.num_experts, H = p.hidden, I = p.intermediate;
  const auto w13 = gaussian_experts(E, 2 * I, H, 1.0 / std::sqrt(double(H)), true, rng);
  const auto w2 = gaussian_experts(E, H, I, 1.0 / std::sqrt(double(I)), false, rng);
  WeightSet w;
  w.format = format;
  if (const int64_t Is = p.shared_intermediate; Is > 0) {
    w.shared_w13 = to_bf16(gaussian_experts(1, 2 * Is, H, 4.0 / std::sqrt(double(H)), false, rng), {2 * Is, H});
    w.shared_w2 = to_bf16(gaussian_experts(1, H, Is, 1.0 / std::sqrt(double(Is)), false, rng), {H, Is});
  }
  if (format == WeightFormat::kBF16) {
    w.w13_bf16 = to_bf16(w13, {E, 2 * I, H});
    w.w2_bf16 = to_bf16(w2, {E, H, I});
    return w;
  }
  fill_fp4(format, w13, E, 2 * I, H, w.w13, w.w13_scale, &w.w13_global, 2);
  fill_fp4(format, w2, E, H, I, w.w2, w.w2_scale, &w.w2_global, 1);
  if (format == WeightFormat::kNVFP4 && options.distinct_gate_up_global) split_gate_up_globals(p, w);
  return w;
}

WeightSet without_shared_expert(const WeightSet& w) {
  WeightSet r = w;
  r.shared_w13 = {};
  r.shared_w2 = {};
  return r;
}

int64_t Inputs::id(int64_t t, int64_t k) const {
  const int64_t K = static_cast<int64_t>(weights.shape()[1]);
  return ids_i32 ? ids32[t * K + k] : ids64[t * K + k];
}

void Inputs::set_id(int64_t t, int64_t k, int64_t id) {
  const int64_t K = static_cast<int64_t>(weights.shape()[1]);
  if (ids_i32)
    ids32[t * K + k] = static_cast<int32_t>(id);
  else
    ids64[t * K + k] = id;
}

ForwardArgs Inputs::args(const HostTensor<uint16_t>& y, bool quantize_input) const {
  ForwardArgs args;
  if (quantize_input) {
    args.x = x.view();
  } else {
    args.a = a.view();
    args.a_scale = a_scale.view();
    args.a_global = a_global.view();
  }
  args.topk_ids = ids_i32 ? ids32.view() : ids64.view();
  args.topk_weights = weights.view();
  args.y = y.view();
  return args;
}

Inputs random_inputs(const Problem& p, int64_t tokens, uint64_t seed, const InputOptions& options) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> weight(0.1f, 1.0f);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  const int64_t T = tokens, H = p.hidden, K = p.top_k;
  Inputs in;
  in.tokens = T;
  in.ids_i32 = options.ids_i32;
  in.x = HostTensor<uint16_t>(DType::kBF16, {T, H});
  for (int64_t t = 0; t < T; ++t) {
    const float row_scale = std::ldexp(1.0f, static_cast<int>(t % 5) - 2);
    for (int64_t j = 0; j < H; ++j) in.x[t * H + j] = float_to_bf16(normal(rng) * row_scale);
  }
  in.ids64 = HostTensor<int64_t>(DType::kI64, {T, K});
  in.ids32 = HostTensor<int32_t>(DType::kI32, {T, K});
  in.weights = HostTensor<float>(DType::kF32, {T, K});
  std::vector<int64_t> experts(p.num_experts);
  for (int64_t t = 0; t < T; ++t) {
    std::iota(experts.begin(), experts.end(), 0);
    std::shuffle(experts.begin(), experts.end(), rng);
    for (int64_t k = 0; k < K; ++k) {
      in.set_id(t, k, unit(rng) < options.skip_fraction ? -1 : experts[k]);
      in.weights[t * K + k] = weight(rng);
    }
  }
  return in;
}

void quantize_inputs_for_caller(const Problem& p, Inputs& in) {
  const int64_t T = in.tokens, H = p.hidden;
  std::vector<float> x(T * H);
  for (int64_t i = 0; i < T * H; ++i) x[i] = bf16_to_float(in.x[i]);
  if (p.recipe == Recipe::kNvfp4) {
    in.a = HostTensor<uint8_t>(DType::kU8, {T, H / 2});
    in.a_scale = HostTensor<uint8_t>(DType::kE4M3, {T, H / kNvBlock});
    in.a_global = HostTensor<float>(DType::kF32, {T});
    quantize_nvfp4_rows(x.data(), T, H, in.a.values().data(), in.a_scale.values().data(),
                        in.a_global.values().data());
  } else {
    in.a = HostTensor<uint8_t>(DType::kE4M3, {T, H});
    in.a_scale = HostTensor<uint8_t>(DType::kE8M0, {T, H / kMxBlock});
    for (int64_t t = 0; t < T; ++t)
      quantize_q8(x.data() + t * H, H, in.a.values().data() + t * H,
                  in.a_scale.values().data() + t * H / kMxBlock);
  }
}

std::shared_ptr<Runtime> cpu_runtime() { return Runtime::acquire(Bootstrap{}); }

std::unique_ptr<Layer> make_layer(const Problem& p, const WeightSet& w) {
  return Layer::create(cpu_runtime(), p.desc(), w.pack(), p.overrides);
}

HostTensor<uint16_t> poisoned_output(const Problem& p, int64_t tokens) {
  return HostTensor<uint16_t>(DType::kBF16, {tokens, p.hidden}, kBf16NaN);
}

HostTensor<uint16_t> run_forward(Layer& layer, const Problem& p, const Inputs& in) {
  HostTensor<uint16_t> y = poisoned_output(p, in.tokens);
  layer.forward(in.args(y, p.quantize_input));
  return y;
}

double to_double_bf16(uint16_t bits) { return ref::bf16(bits); }

double exact_match_fraction(const HostTensor<uint16_t>& y, const std::vector<double>& ref) {
  if (y.size() != ref.size()) return 0.0;
  if (ref.empty()) return 1.0;
  size_t same = 0;
  for (size_t i = 0; i < ref.size(); ++i) same += to_double_bf16(y[i]) == ref[i];
  return static_cast<double>(same) / static_cast<double>(ref.size());
}

double relative_error(const HostTensor<uint16_t>& y, const std::vector<double>& ref) {
  if (y.size() != ref.size()) return INFINITY;
  double diff2 = 0.0, ref2 = 0.0, max_diff = 0.0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double v = to_double_bf16(y[i]);
    if (!std::isfinite(v)) return INFINITY;
    const double d = v - ref[i];
    diff2 += d * d;
    ref2 += ref[i] * ref[i];
    max_diff = std::max(max_diff, std::fabs(d));
  }
  return ref2 > 0.0 ? std::sqrt(diff2 / ref2) : max_diff;
}

}  // namespace moe_ep::testsupport
