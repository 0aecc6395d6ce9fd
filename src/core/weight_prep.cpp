#include "weight_prep.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "check.h"
#include "host_memory.h"
#include "moe_ep/formats.h"
#include "moe_ep/quant.h"

namespace moe_ep {

void serial_for(int64_t num_tasks, const std::function<void(int64_t)>& task) {
  for (int64_t i = 0; i < num_tasks; ++i) task(i);
}

int64_t HostExpertWeights::block() const {
  return format == WeightFormat::kNVFP4 ? kNvBlock : kMxBlock;
}

namespace {

// "[e, r, c]" for the flat element index of a contiguous tensor.
std::string index_str(const TensorView& t, int64_t flat) {
  std::array<int64_t, kMaxTensorDims> idx{};
  for (int d = t.ndim - 1; d >= 0; --d) {
    idx[d] = flat % t.shape[d];
    flat /= t.shape[d];
  }
  std::string s = "[";
  for (int d = 0; d < t.ndim; ++d) s += fmt::format("{}{}", d ? ", " : "", idx[d]);
  return s + "]";
}

bool is_e4m3_nan(uint8_t b) { return (b & 0x7F) == 0x7F; }

void check_scale_bytes(const TensorView& t, std::string_view name, WeightFormat format) {
  const auto* p = t.ptr<const uint8_t>();
  const int64_t n = t.numel();
  for (int64_t i = 0; i < n; ++i)
    if ((format == WeightFormat::kMXFP4 && p[i] == kE8M0NaN) ||
        (format == WeightFormat::kNVFP4 && is_e4m3_nan(p[i])))
      fail_invalid_scale_byte(t, name, format, i);
}

void check_global_scales(const TensorView& t, std::string_view name) {
  const auto* p = t.ptr<const float>();
  for (int64_t i = 0; i < t.numel(); ++i)
    MOE_EP_CHECK(std::isfinite(p[i]) && p[i] > 0.0f,
                 "{}{} = {} is invalid; expected a finite weight_scale_2 > 0", name,
                 index_str(t, i), p[i]);
}

void check_bf16_finite(const TensorView& t, std::string_view name) {
  const auto* p = t.ptr<const uint16_t>();
  for (int64_t i = 0; i < t.numel(); ++i)
    MOE_EP_CHECK((p[i] & 0x7F80) != 0x7F80, "{}{} = {} is not finite; expected finite bf16 weights",
                 name, index_str(t, i), bf16_to_float(p[i]));
}

template <class T>
std::unique_ptr<T[]> alloc(int64_t n) {
  return std::make_unique_for_overwrite<T[]>(static_cast<size_t>(n));
}

std::unique_ptr<uint8_t[]> copy_bytes(const TensorView& t) {
  auto out = alloc<uint8_t>(t.nbytes());
  std::memcpy(out.get(), t.data, static_cast<size_t>(t.nbytes()));
  return out;
}

void allocate(HostExpertWeights& w) {
  const int64_t num_experts = w.shape.num_experts;
  w.w13 = alloc<uint8_t>(num_experts * w.w13_packed_per_expert());
  w.w13_scale = alloc<uint8_t>(num_experts * w.w13_scales_per_expert());
  w.w2 = alloc<uint8_t>(num_experts * w.w2_packed_per_expert());
  w.w2_scale = alloc<uint8_t>(num_experts * w.w2_scales_per_expert());
  if (w.format == WeightFormat::kNVFP4) {
    w.w13_global = alloc<float>(num_experts);
    w.w2_global = alloc<float>(num_experts);
  }
}

// One expert's [rows, k] tensor of the source pack as fp32 values rounded to bf16 (the
// "dequantize to bf16" step of docs/spec.md §4; exact for MXFP4, a no-op for BF16).
void expert_tensor_values(const WeightPack& pack, bool is_w13, int64_t e, int64_t rows,
                          int64_t k, std::vector<float>& out) {
  out.resize(static_cast<size_t>(rows * k));
  const TensorView& t = is_w13 ? pack.w13 : pack.w2;
  if (pack.format == WeightFormat::kBF16) {
    const auto* p = t.ptr<const uint16_t>() + e * rows * k;
    for (int64_t i = 0; i < rows * k; ++i) out[i] = bf16_to_float(p[i]);
    return;
  }
  MOE_EP_ASSERT(pack.format == WeightFormat::kMXFP4);
  const TensorView& s = is_w13 ? pack.w13_scale : pack.w2_scale;
  dequantize_mxfp4(t.ptr<const uint8_t>() + e * rows * k / 2,
                   s.ptr<const uint8_t>() + e * rows * k / kMxBlock, rows, k, out.data());
  for (float& v : out) v = round_to_bf16(v);
}

void quantize_from_values(HostExpertWeights& w, const WeightPack& pack,
                          const ParallelFor& parallel_for) {
  const int64_t H = w.shape.hidden, I = w.shape.intermediate;
  parallel_for(w.shape.num_experts, [&](int64_t e) {
    std::vector<float> values;
    for (bool is_w13 : {true, false}) {
      const int64_t rows = is_w13 ? 2 * I : H, k = is_w13 ? H : I;
      uint8_t* packed = is_w13 ? w.w13.get() + e * w.w13_packed_per_expert()
                               : w.w2.get() + e * w.w2_packed_per_expert();
      uint8_t* scales = is_w13 ? w.w13_scale.get() + e * w.w13_scales_per_expert()
                               : w.w2_scale.get() + e * w.w2_scales_per_expert();
      expert_tensor_values(pack, is_w13, e, rows, k, values);
      if (w.format == WeightFormat::kMXFP4) {
        quantize_mxfp4(values.data(), rows, k, packed, scales);
      } else {
        const float g = nvfp4_global_encode(max_abs(values.data(), rows * k));
        quantize_nvfp4(values.data(), rows, k, g, packed, scales);
        (is_w13 ? w.w13_global : w.w2_global)[e] = 1.0f / g;
      }
    }
  });
}

// Multiplies every e4m3 scale byte by 2^k when all results are exact in e4m3.
bool rescale_e4m3_exact(uint8_t* scales, int64_t n, int k) {
  for (int64_t i = 0; i < n; ++i) {
    const float v = e4m3_to_float(scales[i]);
    if (v == 0.0f) continue;
    const float t = std::ldexp(v, k);
    if (e4m3_to_float(float_to_e4m3(t)) != t) return false;
  }
  for (int64_t i = 0; i < n; ++i) {
    const float v = e4m3_to_float(scales[i]);
    if (v != 0.0f) scales[i] = float_to_e4m3(std::ldexp(v, k));
  }
  return true;
}

// Gate and up halves of W13 may carry different weight_scale_2; the kernels use one per
// (expert, tensor). A power-of-two ratio is folded exactly into one half's block scales.
std::string fold_w13_globals(HostExpertWeights& w, const WeightPack& pack) {
  const int64_t I = w.shape.intermediate, H = w.shape.hidden;
  const int64_t half_scales = I * H / kNvBlock;
  const auto* globals = pack.w13_global.ptr<const float>();
  int64_t folded_up = 0, folded_gate = 0;
  for (int64_t e = 0; e < w.shape.num_experts; ++e) {
    const float gate = globals[2 * e], up = globals[2 * e + 1];
    w.w13_global[e] = gate;
    if (gate == up) continue;
    const int k = std::ilogb(up) - std::ilogb(gate);
    const bool power_of_two = std::ldexp(gate, k) == up;
    uint8_t* gate_scales = w.w13_scale.get() + e * w.w13_scales_per_expert();
    uint8_t* up_scales = gate_scales + half_scales;
    if (power_of_two && rescale_e4m3_exact(up_scales, half_scales, k)) {
      ++folded_up;
    } else if (power_of_two && rescale_e4m3_exact(gate_scales, half_scales, -k)) {
      w.w13_global[e] = up;
      ++folded_gate;
    } else {
      MOE_EP_FAIL(ErrorCode::kInvalidArgument,
                  "w13_global[{}] = (gate {}, up {}) cannot be folded into one weight_scale_2: "
                  "{}; expected equal gate/up global scales or a power-of-two ratio whose "
                  "rescaled e4m3 block scales stay exact",
                  e, gate, up,
                  power_of_two ? fmt::format("ratio 2^{} pushes e4m3 block scales out of range", k)
                               : fmt::format("ratio {} is not a power of two", up / gate));
    }
  }
  if (folded_up + folded_gate == 0) return "";
  return fmt::format("nvfp4: gate/up weight_scale_2 differ in {} experts; power-of-two ratio "
                     "folded exactly into the up block scales ({}) or the gate block scales ({})",
                     folded_up + folded_gate, folded_up, folded_gate);
}

void add_note(std::string& notes, const std::string& line) {
  if (line.empty()) return;
  if (!notes.empty()) notes += '\n';
  notes += line;
}

}  // namespace

void fail_invalid_scale_byte(const TensorView& scales, std::string_view name, WeightFormat format,
                             int64_t flat) {
  if (format == WeightFormat::kMXFP4)
    MOE_EP_FAIL(ErrorCode::kInvalidArgument,
                "{}{} = 0xFF is the E8M0 NaN; expected a finite UE8M0 scale byte (0x00..0xFE)",
                name, index_str(scales, flat));
  const uint8_t byte = scales.device.type == DeviceType::kCPU ? scales.ptr<const uint8_t>()[flat] : 0x7F;
  MOE_EP_FAIL(ErrorCode::kInvalidArgument,
              "{}{} = 0x{:02X} is an e4m3 NaN; expected a finite e4m3 block scale", name,
              index_str(scales, flat), byte);
}

void check_weight_values(const WeightPack& pack) {
  const TensorView* all[] = {&pack.w13, &pack.w13_scale, &pack.w13_global,
                             &pack.w2, &pack.w2_scale, &pack.w2_global};
  for (const TensorView* t : all)
    MOE_EP_ASSERT(!t->defined() || t->device.type == DeviceType::kCPU);
  switch (pack.format) {
    case WeightFormat::kMXFP4:
    case WeightFormat::kNVFP4:
      check_scale_bytes(pack.w13_scale, "w13_scale", pack.format);
      check_scale_bytes(pack.w2_scale, "w2_scale", pack.format);
      if (pack.format == WeightFormat::kNVFP4) {
        check_global_scales(pack.w13_global, "w13_global");
        check_global_scales(pack.w2_global, "w2_global");
      }
      break;
    case WeightFormat::kBF16:
      check_bf16_finite(pack.w13, "w13");
      check_bf16_finite(pack.w2, "w2");
      break;
  }
  check_shared_expert_values(pack);
}

void check_shared_expert_values(const WeightPack& pack) {
  for (const auto& [t, name] : {std::pair{&pack.shared_w13, "shared_w13"}, std::pair{&pack.shared_w2, "shared_w2"}})
    if (t->defined() && t->device.type == DeviceType::kCPU) check_bf16_finite(*t, name);
}

HostExpertWeights prepare_host_weights(Recipe recipe, const WeightPack& pack,
                                       const ExpertShape& shape, const ParallelFor& parallel_for) {
  check_weight_values(pack);
  const RecipeTraits& traits = recipe_traits(recipe);
  HostExpertWeights w;
  w.shape = shape;
  w.format = traits.native_format;
  detail::require_host_bytes(
      detail::saturating_bytes({shape.num_experts, w.w13_packed_per_expert() + w.w13_scales_per_expert() +
                                                       w.w2_packed_per_expert() + w.w2_scales_per_expert()}),
      fmt::format("the layer's copy of {} experts' weights in {}", shape.num_experts,
                  weight_format_name(w.format)),
      "num_experts / world_size, hidden_size and intermediate_size");

  if (pack.format == w.format) {
    w.w13 = copy_bytes(pack.w13);
    w.w13_scale = copy_bytes(pack.w13_scale);
    w.w2 = copy_bytes(pack.w2);
    w.w2_scale = copy_bytes(pack.w2_scale);
    add_note(w.notes, fmt::format("weights: {} as given", weight_format_name(w.format)));
    if (w.format == WeightFormat::kNVFP4) {
      w.w13_global = alloc<float>(shape.num_experts);
      w.w2_global = alloc<float>(shape.num_experts);
      std::memcpy(w.w2_global.get(), pack.w2_global.data, shape.num_experts * sizeof(float));
      add_note(w.notes, fold_w13_globals(w, pack));
    }
    return w;
  }

  MOE_EP_CHECK_CODE(pack.format == WeightFormat::kBF16 ||
                        (pack.format == WeightFormat::kMXFP4 && w.format == WeightFormat::kNVFP4),
                    ErrorCode::kUnsupported, "recipe '{}' cannot convert {} weights",
                    traits.name, weight_format_name(pack.format));
  allocate(w);
  quantize_from_values(w, pack, parallel_for);
  if (w.format == WeightFormat::kNVFP4 && pack.format == WeightFormat::kMXFP4) {
    add_note(w.notes, "weights: mxfp4 dequantized to bf16 and requantized to nvfp4 at load (one "
                      "global scale per expert tensor from its amax); close to, not bit-identical "
                      "with, the mxfp4 recipe");
  } else if (w.format == WeightFormat::kNVFP4) {
    add_note(w.notes, "weights: bf16 quantized to nvfp4 at load (one global scale per expert "
                      "tensor from its amax)");
  } else {
    add_note(w.notes, "weights: bf16 quantized to mxfp4 at load");
  }
  return w;
}

bool mxfp4_block_is_zero(const uint8_t* packed_row, int64_t block) {
  const uint8_t* codes = packed_row + block * kMxBlock / 2;
  for (int64_t i = 0; i < kMxBlock / 2; ++i)
    if ((codes[i] & 0x77) != 0) return false;
  return true;
}

Mxfp4RowExponents mxfp4_row_exponents(const uint8_t* packed_row, const uint8_t* scale_row, int64_t k) {
  Mxfp4RowExponents r;
  for (int64_t b = 0; b < k / kMxBlock; ++b) {
    if (mxfp4_block_is_zero(packed_row, b)) continue;
    r.lo = std::min(r.lo, static_cast<int>(scale_row[b]));
    r.hi = std::max(r.hi, static_cast<int>(scale_row[b]));
  }
  return r;
}

namespace {

struct TensorWindow {
  int64_t rows_inside = 0;
  int max_row_span = 0;
  bool tensor_inside = true;
};

// Block exponents of one expert's MXFP4 tensor: per row and over the whole tensor.
TensorWindow summarize_tensor(std::span<const Mxfp4RowExponents> rows) {
  TensorWindow out;
  int tensor_min = 255, tensor_max = -1;
  for (const Mxfp4RowExponents& ex : rows) {
    const int row_min = ex.lo, row_max = ex.hi;
    const int span = row_max >= 0 ? row_max - row_min : 0;
    out.max_row_span = std::max(out.max_row_span, span);
    out.rows_inside += span <= Fp8WindowStats::kMaxSpan;
    tensor_min = std::min(tensor_min, row_min);
    tensor_max = std::max(tensor_max, row_max);
  }
  out.tensor_inside = tensor_max < 0 || tensor_max - tensor_min <= Fp8WindowStats::kMaxSpan;
  return out;
}

}  // namespace

Fp8WindowStats fp8_window_from_rows(int64_t experts, std::span<const Mxfp4RowExponents> w13_rows,
                                    std::span<const Mxfp4RowExponents> w2_rows) {
  MOE_EP_ASSERT(experts > 0 && w13_rows.size() % experts == 0 && w2_rows.size() % experts == 0);
  const size_t n13 = w13_rows.size() / experts, n2 = w2_rows.size() / experts;
  Fp8WindowStats stats;
  stats.experts = experts;
  stats.rows = static_cast<int64_t>(w13_rows.size() + w2_rows.size());
  for (int64_t e = 0; e < experts; ++e) {
    const TensorWindow w13 = summarize_tensor(w13_rows.subspan(e * n13, n13));
    const TensorWindow w2 = summarize_tensor(w2_rows.subspan(e * n2, n2));
    stats.rows_inside += w13.rows_inside + w2.rows_inside;
    stats.experts_inside += w13.tensor_inside && w2.tensor_inside;
    stats.max_row_span = std::max({stats.max_row_span, w13.max_row_span, w2.max_row_span});
  }
  return stats;
}

Fp8WindowStats analyze_fp8_window(const HostExpertWeights& w, const ParallelFor& parallel_for) {
  MOE_EP_ASSERT(w.format == WeightFormat::kMXFP4);
  const int64_t H = w.shape.hidden, I = w.shape.intermediate, E = w.shape.num_experts;
  std::vector<Mxfp4RowExponents> w13(E * 2 * I), w2(E * H);
  parallel_for(E, [&](int64_t e) {
    for (int64_t r = 0; r < 2 * I; ++r)
      w13[e * 2 * I + r] = mxfp4_row_exponents(w.w13_packed(e) + r * H / 2, w.w13_scales(e) + r * (H / kMxBlock), H);
    for (int64_t r = 0; r < H; ++r)
      w2[e * H + r] = mxfp4_row_exponents(w.w2_packed(e) + r * I / 2, w.w2_scales(e) + r * (I / kMxBlock), I);
  });
  return fp8_window_from_rows(E, w13, w2);
}

std::string describe_fp8_window(const Fp8WindowStats& s, std::string_view outside_behaviour) {
  return fmt::format("mxfp4->fp8 window (e2m1*2^k exact in e4m3 for k in [-8, 6]): {}/{} rows "
                     "and {}/{} experts have block exponents within 15 octaves (widest row: "
                     "max - min = {}); {} rows and {} experts outside: {}",
                     s.rows_inside, s.rows, s.experts_inside, s.experts, s.max_row_span,
                     s.rows - s.rows_inside, s.experts - s.experts_inside, outside_behaviour);
}

}  // namespace moe_ep
