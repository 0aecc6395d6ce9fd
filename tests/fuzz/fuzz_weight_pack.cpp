// libFuzzer target: Layer::create on the CPU with fuzzed problems and weight packs (docs/spec.md §11).
//
// The input picks a small problem (sometimes with out-of-range or huge dimensions), a weight
// format, and bends the six tensors of the pack (fuzz_tensors.h), then (drawn last, so inputs
// that end earlier keep no shared expert) a shared expert's size and its two bf16 tensors, given
// or not; scale and weight bytes are
// either raw input or clean values with input-chosen bytes (0xFF, e4m3 NaN, bf16 Inf/NaN, ...)
// written over them. Findings, besides sanitizer reports: an exception that is not a
// moe_ep::Error of kInvalidArgument / kUnsupported, and any disagreement between Layer::create
// and this file's model of what must be accepted.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>

#include "fuzz/fuzz_tensors.h"
#include "moe_ep/layer.h"
#include "moe_ep/moe_ep.h"

namespace moe_ep::fuzz {
namespace {

[[noreturn]] void finding(const std::string& what) {
  std::fprintf(stderr, "fuzz_weight_pack finding: %s\n", what.c_str());
  std::abort();
}

int64_t wild(FuzzBytes& in, int64_t v) {
  return in.pick<int64_t>({0, -128, 127, 129, v + 128, int64_t{1} << 40, int64_t{1} << 62,
                           std::numeric_limits<int64_t>::max(), std::numeric_limits<int64_t>::min(), v});
}

bool accepts(const std::string& family, WeightFormat f) {
  if (family == "mxfp4") return f == WeightFormat::kMXFP4 || f == WeightFormat::kBF16;
  return f == WeightFormat::kNVFP4 || f == WeightFormat::kMXFP4 || f == WeightFormat::kBF16;
}

// Dimension products for expected shapes; -7 stands for "no such tensor can exist" (an overflow).
int64_t mul(int64_t a, int64_t b) {
  int64_t r;
  return __builtin_mul_overflow(a, b, &r) ? -7 : r;
}

int run(FuzzBytes& in) {
  static const std::shared_ptr<Runtime> runtime = Runtime::acquire(Bootstrap{});
  const std::string family = in.pick<const char*>({"mxfp4", "nvfp4", "mxfp4", "nvfp4", "fp8"});
  const uint8_t fmt_pick = in.u8() % 7;
  const WeightFormat format = fmt_pick < 6 ? static_cast<WeightFormat>(fmt_pick % 3)
                                           : static_cast<WeightFormat>(3 + in.u8() % 4);
  FleetParams fleet{in.pick<int64_t>({1, 2, 4}), in.pick<int64_t>({1, 4, 64}),
                    in.pick<int64_t>({128, 256})};
  MoeDesc config;  // config.fleet is set from `fleet` right before Layer::create
  config.recipe = family == "nvfp4" ? Recipe::kNvfp4 : Recipe::kMxfp4;
  config.intermediate_size = in.pick<int64_t>({128, 256});
  config.top_k = in.range(1, fleet.num_experts);
  const uint8_t clamp = in.u8() % 8;
  if (clamp < 6) config.activation_clamp = in.pick<float>({10.0f, 0.0f, 1e30f, 10.0f});
  if (clamp == 6) config.activation_clamp = in.pick<float>({-1.0f, NAN, INFINITY, -0.0f});
  config.quantize_input = in.flag();
  if (in.flag(8)) {
    switch (in.u8() % 5) {
      case 0: fleet.num_experts = wild(in, fleet.num_experts); break;
      case 1: fleet.max_tokens_per_rank = wild(in, fleet.max_tokens_per_rank); break;
      case 2: fleet.hidden_size = wild(in, fleet.hidden_size); break;
      case 3: config.intermediate_size = wild(in, config.intermediate_size); break;
      default: config.top_k = wild(in, config.top_k); break;
    }
  }
  const int64_t E = fleet.num_experts, H = fleet.hidden_size, I = config.intermediate_size,
                K = config.top_k;
  const bool family_ok = family == "mxfp4" || family == "nvfp4";
  const bool clamp_ok = !config.activation_clamp ||
                        (std::isfinite(*config.activation_clamp) && *config.activation_clamp >= 0);
  const bool config_ok = family_ok && E >= 1 && fleet.max_tokens_per_rank >= 1 && H >= 1 &&
                         H % 128 == 0 && I >= 1 && I % 128 == 0 && K >= 1 && K <= E && clamp_ok &&
                         mul(mul(mul(E, 2), I), H) >= 0 &&  // the sizes fit in int64
                         mul(mul(fleet.max_tokens_per_rank, K), H) >= 0;
  const bool format_known = static_cast<int>(format) >= 0 && static_cast<int>(format) <= 2;
  const bool format_ok = format_known && family_ok && accepts(family, format);

  // Valid problems stay small (a fuzzed E = 127 with a conversion at load took 30 s under ASan).
  if (config_ok && mul(mul(mul(E, 3), H), I) > (int64_t{1} << 22)) return 0;

  // Expected tensors (layouts of include/moe_ep/weights.h), then the fuzzed ones.
  const int64_t i2 = mul(2, I);
  const bool mx = format == WeightFormat::kMXFP4, nv = format == WeightFormat::kNVFP4;
  const bool bf16 = format == WeightFormat::kBF16;
  const int64_t block = nv ? 16 : 32;
  const DType scale_dtype = nv ? DType::kE4M3 : DType::kE8M0;
  const int mutate = in.pick<int>({4, 16, 64, 1 << 20});
  WeightPack pack;
  pack.format = format;
  FuzzTensor w13, w13s, w13g, w2, w2s, w2g;
  const bool absent = !format_known;
  if (bf16) {
    w13 = make_tensor(in, {{DType::kBF16}, {E, i2, H}}, mutate);
    w2 = make_tensor(in, {{DType::kBF16}, {E, H, I}}, mutate);
  } else {
    w13 = make_tensor(in, {{DType::kU8}, {E, i2, H / 2}}, mutate);
    w13s = make_tensor(in, {{DType::kU8, scale_dtype}, {E, i2, H / block}}, mutate);
    w2 = make_tensor(in, {{DType::kU8}, {E, H, I / 2}}, mutate);
    w2s = make_tensor(in, {{DType::kU8, scale_dtype}, {E, H, I / block}}, mutate);
    if (nv || in.flag(16)) {  // mxfp4 packs must leave the globals out
      w13g = make_tensor(in, {{DType::kF32}, {E, 2}}, mutate);
      w2g = make_tensor(in, {{DType::kF32}, {E}}, mutate);
    }
  }
  // Contents: e2m1 codes anything; scales near 2^0; bf16 small finite; globals 1 (gate = up).
  fill_tensor(in, w13, [&](int64_t i) -> uint8_t { return bf16 ? (i % 2 ? 0x3C : i * 37) : i * 37; });
  fill_tensor(in, w2, [&](int64_t i) -> uint8_t { return bf16 ? (i % 2 ? 0xBC : i * 53) : i * 53; });
  fill_tensor(in, w13s, [&](int64_t i) -> uint8_t { return nv ? 0x30 + i % 16 : 120 + i % 12; });
  fill_tensor(in, w2s, [&](int64_t i) -> uint8_t { return nv ? 0x30 + i % 16 : 120 + i % 12; });
  auto fill_ones = [](int64_t i) -> uint8_t { return (i % 4 == 3) ? 0x3F : (i % 4 == 2 ? 0x80 : 0); };
  fill_tensor(in, w13g, fill_ones);
  fill_tensor(in, w2g, fill_ones);
  pack.w13 = w13.view, pack.w13_scale = w13s.view, pack.w13_global = w13g.view;
  pack.w2 = w2.view, pack.w2_scale = w2s.view, pack.w2_global = w2g.view;

  // The shared expert: Is (valid, misaligned, negative, huge) and its tensors, or neither.
  const uint8_t shared_pick = in.u8() % 8;
  config.shared_intermediate_size =
      shared_pick < 4 ? 0 : in.pick<int64_t>({16, 32, 24, 0, -16, int64_t{1} << 21});
  const int64_t Is = config.shared_intermediate_size;
  const bool Is_ok = Is >= 16 && Is % 16 == 0 && Is <= (int64_t{1} << 20);
  FuzzTensor s13, s2;
  if (Is != 0 || shared_pick == 1) {  // shared_pick 1: tensors without a shared expert
    const int64_t shape_is = Is_ok ? Is : 16;
    s13 = make_tensor(in, {{DType::kBF16}, {mul(2, shape_is), H}}, mutate);
    s2 = make_tensor(in, {{DType::kBF16}, {H, shape_is}}, mutate);
    fill_tensor(in, s13, [](int64_t i) -> uint8_t { return i % 2 ? 0x3C : i * 29; });
    fill_tensor(in, s2, [](int64_t i) -> uint8_t { return i % 2 ? 0xBC : i * 31; });
    pack.shared_w13 = s13.view, pack.shared_w2 = s2.view;
  }
  const bool shared_config_ok = Is == 0 || (Is_ok && config.quantize_input && H <= (int64_t{1} << 20));

  // The model's verdict on the pack.
  bool layout_ok = !absent;
  bool values_ok = true, ambiguous = false;
  if (bf16) {
    layout_ok = layout_ok && w13.layout_ok && w2.layout_ok && !w13s.present && !w2s.present &&
                !w13g.present && !w2g.present;
    for (FuzzTensor* t : {&w13, &w2})
      for (int64_t i = 0; layout_ok && i < t->numel; ++i)
        values_ok = values_ok && bf16_finite(reinterpret_cast<const uint16_t*>(t->bytes())[i]);
  } else if (format_known) {
    layout_ok = layout_ok && w13.layout_ok && w13s.layout_ok && w2.layout_ok && w2s.layout_ok;
    layout_ok = layout_ok && (nv ? (w13g.layout_ok && w2g.layout_ok) : (!w13g.present && !w2g.present));
    for (FuzzTensor* t : {&w13s, &w2s})
      for (int64_t i = 0; layout_ok && i < t->numel; ++i) {
        const uint8_t b = t->bytes()[i];
        values_ok = values_ok && (mx ? b != 0xFF : (b & 0x7F) != 0x7F);
      }
    if (nv && layout_ok) {
      const auto* g13 = reinterpret_cast<const float*>(w13g.bytes());
      const auto* g2 = reinterpret_cast<const float*>(w2g.bytes());
      for (int64_t i = 0; i < w13g.numel; ++i) values_ok = values_ok && std::isfinite(g13[i]) && g13[i] > 0;
      for (int64_t i = 0; i < w2g.numel; ++i) values_ok = values_ok && std::isfinite(g2[i]) && g2[i] > 0;
      // Different gate/up globals are folded or refused by rules this model does not restate.
      for (int64_t e = 0; values_ok && e < E; ++e) ambiguous = ambiguous || g13[2 * e] != g13[2 * e + 1];
    }
  }
  if (Is == 0) {
    layout_ok = layout_ok && !s13.present && !s2.present;
  } else {
    layout_ok = layout_ok && s13.layout_ok && s2.layout_ok;
    for (FuzzTensor* t : {&s13, &s2})
      for (int64_t i = 0; layout_ok && i < t->numel; ++i)
        values_ok = values_ok && bf16_finite(reinterpret_cast<const uint16_t*>(t->bytes())[i]);
  }
  const bool must_accept = config_ok && shared_config_ok && format_ok && layout_ok && values_ok;

  if (std::getenv("MOE_EP_FUZZ_VERBOSE"))
    std::fprintf(stderr, "case: family %s format %d E %lld H %lld I %lld K %lld T %lld Is %lld, must_accept %d\n",
                 family.c_str(), static_cast<int>(format), static_cast<long long>(E),
                 static_cast<long long>(H), static_cast<long long>(I), static_cast<long long>(K),
                 static_cast<long long>(fleet.max_tokens_per_rank), static_cast<long long>(Is), must_accept);
  bool accepted = false;
  std::string error;
  try {
    if (!family_ok) parse_recipe(family, "recipe");  // an unknown name is refused by name
    config.fleet = fleet;
    auto layer = Layer::create(runtime, config, pack);
    accepted = true;
  } catch (const Error& e) {
    if (e.code() != ErrorCode::kInvalidArgument && e.code() != ErrorCode::kUnsupported)
      finding(std::string("Layer::create threw ") + error_code_name(e.code()) + ": " + e.what());
    error = e.what();
  } catch (const std::exception& e) {
    finding(std::string("Layer::create threw a non-moe_ep exception: ") + e.what());
  }
  if (!ambiguous && accepted != must_accept)
    finding(std::string("Layer::create ") + (accepted ? "accepted" : "refused") +
            " a pack the model " + (must_accept ? "accepts" : "refuses") + " (config_ok " +
            std::to_string(config_ok) + ", shared_config_ok " + std::to_string(shared_config_ok) +
            ", format_ok " + std::to_string(format_ok) +
            ", layout_ok " + std::to_string(layout_ok) + ", values_ok " +
            std::to_string(values_ok) + "): " + error);
  return 0;
}

}  // namespace
}  // namespace moe_ep::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  moe_ep::fuzz::FuzzBytes in(data, size);
  return moe_ep::fuzz::run(in);
}
