// load_checkpoint_layer: layout and shapes resolved and every expert tensor checked serially
// (names, dtypes, shapes: cheap), then bytes copied and scale values checked in parallel over
// experts. Layouts and names: include/moe_ep/checkpoint.h.
#include <sys/mman.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <chrono>
#include <cstdlib>
#include <cmath>
#include <cstring>

#include <fmt/ranges.h>

#include "checkpoint/aux_weights.h"
#include "checkpoint/float_elements.h"
#include "checkpoint/tensor_pattern.h"
#include "core/check.h"
#include "core/host_memory.h"
#include "core/thread_pool.h"
#include "moe_ep/checkpoint.h"
#include "moe_ep/quant.h"

namespace moe_ep {

using checkpoint::TensorPattern;
using checkpoint::WeightNaming;

namespace {

constexpr int kGate = 0, kUp = 1, kDown = 2;
constexpr int kW13 = 0, kW2 = 1;

std::string join(std::initializer_list<std::string_view> items) {
  std::string s;
  for (std::string_view i : items) s += fmt::format("{}{}", s.empty() ? "" : " or ", i);
  return s;
}

std::string dims_str(const std::vector<int64_t>& dims) {
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i) s += fmt::format("{}{}", i ? ", " : "", dims[i]);
  return s + "]";
}

// "FILE: tensor 'NAME' (ROLE)": the prefix of every message about one tensor.
std::string where(const CheckpointTensor& t, std::string_view role) {
  return fmt::format("{}: tensor '{}' ({})", *t.file, t.name, role);
}

void expect_dtype(const CheckpointTensor& t, std::string_view role,
                  std::initializer_list<std::string_view> dtypes) {
  for (std::string_view d : dtypes)
    if (t.dtype == d) return;
  MOE_EP_FAIL(ErrorCode::kInvalidArgument, "{}: dtype {}; expected {}", where(t, role), t.dtype,
              join(dtypes));
}

void expect_shape(const CheckpointTensor& t, std::string_view role, const std::vector<int64_t>& shape,
                  std::string_view rule) {
  MOE_EP_CHECK(t.shape == shape, "{}: shape {}; expected {} = {}", where(t, role), t.shape_str(),
               rule, dims_str(shape));
}

void expect_scalar_f32(const CheckpointTensor& t, std::string_view role) {
  expect_dtype(t, role, {"F32"});
  MOE_EP_CHECK(t.numel() == 1, "{}: shape {}; expected a scalar ([] or [1])", where(t, role),
               t.shape_str());
}

bool is_packed_dtype(std::string_view dtype) { return dtype == "U8" || dtype == "I8" || dtype == "F4"; }

// Packed e2m1 weights: U8 or I8 [lead..., rows, k/2] (DeepSeek V4 stores I8) or F4
// [lead..., rows, k] (same bytes).
void expect_packed(const CheckpointTensor& t, std::string_view role, std::vector<int64_t> dims,
                   int64_t rows, int64_t k, std::string_view rule, std::string_view why) {
  expect_dtype(t, role, {"U8", "I8", "F4"});
  const bool f4 = t.dtype == "F4";
  dims.push_back(rows);
  dims.push_back(f4 ? k : k / 2);
  expect_shape(t, role, dims, fmt::format("{}{}] ({}{})", rule, f4 ? "" : "/2",
                                          f4 ? "F4 e2m1 elements" : "packed e2m1, two a byte", why));
}

float read_f32(const uint8_t* p) {
  float v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// [i0, i1, ...] of flat element `flat` of `t`.
std::string index_str(const CheckpointTensor& t, int64_t flat) {
  std::vector<int64_t> idx(t.shape.size());
  for (size_t d = t.shape.size(); d-- > 0;) {
    idx[d] = flat % t.shape[d];
    flat /= t.shape[d];
  }
  return dims_str(idx);
}

// Elements [begin, begin + n) of scale tensor t, read from `bytes` (its copy or its mapping):
// no E8M0 NaN (MXFP4) / e4m3 NaN (NVFP4).
void check_scale_values(const uint8_t* bytes, const CheckpointTensor& t, std::string_view role,
                        WeightFormat format, int64_t begin, int64_t n) {
  const uint8_t* p = bytes;
  for (int64_t i = 0; i < n; ++i) {
    if (format == WeightFormat::kMXFP4 && p[i] == 0xFF)
      MOE_EP_FAIL(ErrorCode::kInvalidArgument, "{}: element {} = 0xFF is the E8M0 NaN; expected a "
                  "finite UE8M0 scale byte (0x00..0xFE)", where(t, role), index_str(t, begin + i));
    if (format == WeightFormat::kNVFP4 && (p[i] & 0x7F) == 0x7F)
      MOE_EP_FAIL(ErrorCode::kInvalidArgument, "{}: element {} = 0x{:02X} is an e4m3 NaN; expected "
                  "a finite e4m3 block scale", where(t, role), index_str(t, begin + i), p[i]);
  }
}

// weight_scale_2 of element i of a global-scale tensor; `inverse`: the tensor holds the encode
// factor g (compressed-tensors' weight_global_scale) and weight_scale_2 = fp32(1 / g).
float checked_global(const CheckpointTensor& t, std::string_view role, int64_t i, bool inverse = false) {
  const float v = read_f32(t.data + 4 * i);
  MOE_EP_CHECK(std::isfinite(v) && v > 0.0f, "{}: element {} = {}; expected a finite {} > 0",
               where(t, role), index_str(t, i), v, inverse ? "weight_global_scale" : "weight_scale_2");
  if (!inverse) return v;
  const float ws2 = 1.0f / v;
  MOE_EP_CHECK(std::isfinite(ws2) && ws2 > 0.0f, "{}: element {} = {} has no finite inverse in fp32 "
               "(weight_scale_2 = 1 / weight_global_scale); expected a value above 2^-128",
               where(t, role), index_str(t, i), v);
  return ws2;
}

// Uninitialised host memory for stacked weights, advised to use transparent huge pages: the
// first touch of a multi-GB layer then costs few page faults.
std::shared_ptr<uint8_t> alloc_weights(int64_t bytes) {
  constexpr size_t kHugePage = size_t{2} << 20;
  const size_t n = (static_cast<size_t>(bytes) + kHugePage - 1) / kHugePage * kHugePage;
  void* p = std::aligned_alloc(kHugePage, std::max(n, kHugePage));
  if (!p) throw std::bad_alloc();
  ::madvise(p, std::max(n, kHugePage), MADV_HUGEPAGE);
  return std::shared_ptr<uint8_t>(static_cast<uint8_t*>(p), [](uint8_t* q) { std::free(q); });
}

struct Shapes {
  int64_t E = 0, H = 0, I = 0;
  std::string source;  // where E, H, I came from, for messages
};

// The layout a layer is read with: a known layout's name (for a user's pattern "per-expert" or
// "fused") and its tensor names.
struct Resolved {
  std::string name;
  TensorPattern pattern;
};

// The known layouts with the caller's projection names where they fit (as many names as the
// layout has projections); a layout of another count keeps its own names.
std::vector<Resolved> candidate_layouts(const LayerLoadOptions& o) {
  std::vector<Resolved> out;
  for (const checkpoint::KnownLayout& l : checkpoint::known_layouts()) {
    if (o.layout != "auto" && o.layout != l.name) continue;
    const bool fits = o.proj_names.empty() || o.proj_names.size() == l.pattern.proj_names.size();
    if (!fits && o.layout == "auto") continue;
    MOE_EP_CHECK(fits, "layout '{}' has {} projections ({}); {} projection names given ({})", l.name,
                 l.pattern.proj_names.size(), fmt::join(l.pattern.proj_names, ", "), o.proj_names.size(),
                 fmt::join(o.proj_names, ", "));
    out.push_back({std::string(l.name),
                   TensorPattern::parse(l.pattern.text, fits && !o.proj_names.empty() ? o.proj_names
                                                                                 : l.pattern.proj_names,
                                        "tensor pattern")});
  }
  return out;
}

// The first tensor of layer `layer` under `p`: what tells whether the layer has that layout.
std::string probe_name(const TensorPattern& p, int64_t layer, int64_t first_expert) {
  return p.weight(layer, p.per_expert ? first_expert : 0, 0);
}

}  // namespace

// Fills the private buffers of CheckpointLayer.
class CheckpointLayerBuilder {
 public:
  CheckpointLayerBuilder(std::shared_ptr<const Checkpoint> ck, int64_t layer, const LayerLoadOptions& o)
      : ck_(std::move(ck)), layer_idx_(layer), options_(o),
        threads_(resolve_num_threads(o.num_threads)) {}

  std::unique_ptr<CheckpointLayer> build();

 private:
  Resolved resolve_pattern() const;
  Shapes resolve_shapes(const TensorPattern& p) const;
  [[noreturn]] void refuse_gpt_oss(const TensorPattern& p) const;
  void refuse_expert_biases(const TensorPattern& p) const;
  void load_per_expert(const TensorPattern& p, CheckpointLayer& out);
  void load_per_expert_float(const TensorPattern& p, CheckpointLayer& out);
  void load_fused(const TensorPattern& p, CheckpointLayer& out);
  void load_fused_float(const TensorPattern& p, CheckpointLayer& out);
  std::string role(int64_t e, std::string_view proj, std::string_view what) const {
    return fmt::format("layer {} expert {} {} {}", layer_idx_, e, proj, what);
  }
  // The first of `names` in the checkpoint; throws naming all of them when none is.
  const CheckpointTensor& find_one(const std::vector<std::string>& names, std::string_view role) const;

  std::shared_ptr<const Checkpoint> ck_;
  int64_t layer_idx_;
  LayerLoadOptions options_;
  int threads_;
  Shapes shapes_;
  int64_t first_ = 0, count_ = 0;
  int64_t bytes_ = 0;
  bool float_weights_ = false;  // the experts are BF16 / F16 / F32 (format kBF16)
};

Resolved CheckpointLayerBuilder::resolve_pattern() const {
  const std::string& layout = options_.layout;
  MOE_EP_CHECK(layout == "auto" || checkpoint::find_layout(layout) != nullptr,
               "layout '{}' is unknown; allowed: auto, {}", layout, checkpoint::known_layout_names());
  if (!options_.tensor_pattern.empty()) {
    TensorPattern p = TensorPattern::parse(options_.tensor_pattern, options_.proj_names, "tensor pattern");
    MOE_EP_CHECK(layout == "auto" || layout == "per-expert" || layout == "fused",
                 "tensor pattern '{}' with layout '{}': a named layout has its own tensor names; "
                 "give the pattern with layout auto (or per-expert / fused)", p.text, layout);
    MOE_EP_CHECK(layout == "auto" || (layout == "per-expert") == p.per_expert,
                 "tensor pattern '{}' is a {} pattern, but the layout is '{}'", p.text,
                 p.per_expert ? "per-expert" : "fused", layout);
    return {p.per_expert ? "per-expert" : "fused", p};
  }
  const std::vector<Resolved> candidates = candidate_layouts(options_);
  MOE_EP_CHECK(!candidates.empty(), "{} projection names ({}) fit no known layout; give a tensor "
               "pattern (--tensor-pattern) with them", options_.proj_names.size(),
               fmt::join(options_.proj_names, ", "));
  if (layout != "auto") return candidates.front();
  std::string tried;
  for (const Resolved& c : candidates) {
    const std::string name = probe_name(c.pattern, layer_idx_, options_.first_expert);
    if (ck_->find(name)) return c;
    tried += fmt::format("{}'{}' ({} layout)", tried.empty() ? "" : ", ", name, c.name);
  }
  std::string seen;
  for (const CheckpointTensor* t : expert_like_tensors(*ck_, 4))
    seen += fmt::format("{}'{}' {} {}", seen.empty() ? "" : ", ", t->name, t->dtype, t->shape_str());
  MOE_EP_FAIL(ErrorCode::kInvalidArgument,
              "checkpoint '{}' layer {}: no routed-expert weights: none of {} is in it; name them "
              "with a tensor pattern (--tensor-pattern){}",
              ck_->path(), layer_idx_, tried,
              seen.empty() ? std::string() : fmt::format(" (expert-like tensors it holds: {})", seen));
}

const CheckpointTensor& CheckpointLayerBuilder::find_one(const std::vector<std::string>& names,
                                                         std::string_view role) const {
  for (const std::string& n : names)
    if (const CheckpointTensor* t = ck_->find(n)) return *t;
  std::string list;
  for (const std::string& n : names) list += fmt::format("{}'{}'", list.empty() ? "" : " or ", n);
  MOE_EP_FAIL(ErrorCode::kInvalidArgument, "checkpoint '{}': tensor {} ({}) is missing", ck_->path(),
              list, role);
}

void CheckpointLayerBuilder::refuse_gpt_oss(const TensorPattern& p) const {
  std::vector<std::string> biases;
  for (int proj = 0; proj < static_cast<int>(p.proj_names.size()); ++proj) {
    const std::string bias = p.stem(p.weight(layer_idx_, 0, proj)) + "_bias";
    if (ck_->find(bias)) biases.push_back("'" + bias + "'");
  }
  MOE_EP_FAIL(ErrorCode::kUnsupported,
              "checkpoint '{}' layer {}: '{}' is a gpt-oss expert tensor (MXFP4 *_blocks / *_scales); "
              "unsupported: gpt-oss's activation (gate and up interleaved by row, gate * "
              "sigmoid(1.702 * gate) * (up + 1), clamp 7) is not the clamped SwiGLU of "
              "docs/spec.md (gate rows first, silu(gate) * up){}",
              ck_->path(), layer_idx_, p.weight(layer_idx_, 0, 0),
              biases.empty() ? std::string()
                             : fmt::format(", and its expert biases ({}) have no term in the layer",
                                           fmt::join(biases, ", ")));
}

void CheckpointLayerBuilder::refuse_expert_biases(const TensorPattern& p) const {
  for (int proj = 0; proj < static_cast<int>(p.proj_names.size()); ++proj) {
    const std::string w = p.weight(layer_idx_, p.per_expert ? first_ : 0, proj);
    const std::string bias = (p.naming == WeightNaming::kPlain ? w : p.stem(w)) +
                             (p.naming == WeightNaming::kPlain ? "_bias" : "bias");
    if (!ck_->find(bias)) continue;
    const auto& c = ck_->config();
    MOE_EP_FAIL(ErrorCode::kUnsupported,
                "checkpoint '{}' layer {}: tensor '{}': expert biases are unsupported (docs/spec.md's "
                "layer computes x * W^T with no bias term){}",
                ck_->path(), layer_idx_, bias,
                c && c->model_type == "gpt_oss"
                    ? "; gpt-oss's activation (gate * sigmoid(1.702 * gate) * (up + 1), gate and up "
                      "interleaved) is not the clamped SwiGLU either"
                    : "");
  }
}

Shapes CheckpointLayerBuilder::resolve_shapes(const TensorPattern& p) const {
  Shapes s;
  if (options_.shape) {
    s = {options_.shape->num_experts, options_.shape->hidden_size, options_.shape->intermediate_size,
         "the explicit shape"};
  } else if (const auto& c = ck_->config()) {
    s = {c->n_routed_experts, c->hidden_size, c->moe_intermediate_size, c->source};
  } else if (p.per_expert) {
    // No config: I and H from expert 0's gate weight [I, H/2] (packed) or [I, H]; E by counting.
    const CheckpointTensor& gate = ck_->get(p.weight(layer_idx_, 0, kGate), role(0, p.proj_names[0], "weight"));
    const bool whole = gate.dtype == "F4" || checkpoint::is_float_dtype(gate.dtype);
    MOE_EP_CHECK(gate.shape.size() == 2, "{}: shape {}; expected [I, H{}]",
                 where(gate, role(0, p.proj_names[0], "weight")), gate.shape_str(), whole ? "" : "/2");
    s.I = gate.shape[0];
    s.H = gate.shape[1] * (whole ? 1 : 2);
    while (ck_->find(p.weight(layer_idx_, s.E, kGate))) ++s.E;
    s.source = fmt::format("the tensors (no config.json: I, H from '{}', E = {} experts found)",
                           gate.name, s.E);
  } else {
    const CheckpointTensor& w13 = ck_->get(p.weight(layer_idx_, 0, kW13), "fused w13 weight");
    const bool whole = w13.dtype == "F4" || checkpoint::is_float_dtype(w13.dtype);
    MOE_EP_CHECK(w13.shape.size() == 3, "{}: shape {}; expected [E, 2I, H{}]",
                 where(w13, "fused w13 weight"), w13.shape_str(), whole ? "" : "/2");
    s.E = w13.shape[0];
    s.H = w13.shape[2] * (whole ? 1 : 2);
    s.I = w13.shape[1] / 2;
    s.source = fmt::format("the tensors (no config.json: E, I, H from '{}')", w13.name);
  }
  MOE_EP_CHECK(s.E > 0 && s.H > 0 && s.I > 0, "layer {}: E = {}, H = {}, I = {} from {}; expected "
               "positive sizes", layer_idx_, s.E, s.H, s.I, s.source);
  MOE_EP_CHECK(s.H % kMxBlock == 0 && s.I % kMxBlock == 0, "layer {}: H = {} and I = {} (from {}) "
               "must be multiples of 32 for FP4 block scales", layer_idx_, s.H, s.I, s.source);
  return s;
}

void CheckpointLayerBuilder::load_per_expert(const TensorPattern& p, CheckpointLayer& out) {
  const int64_t H = shapes_.H, I = shapes_.I;
  struct Proj {
    const CheckpointTensor *weight = nullptr, *scale = nullptr, *global = nullptr, *input = nullptr;
  };
  std::vector<std::array<Proj, 3>> experts(static_cast<size_t>(count_));
  const bool inverse = p.global_scale_is_inverse();
  const char* global_key = inverse ? "weight_global_scale" : "weight_scale_2";

  // Serial: every name, dtype and shape, so a missing or malformed expert fails before any copy.
  WeightFormat format = WeightFormat::kMXFP4;
  for (int64_t i = 0; i < count_; ++i) {
    const int64_t e = first_ + i;
    for (int proj = 0; proj < 3; ++proj) {
      const std::string& pname = p.proj_names[proj];
      const int64_t rows = proj == kDown ? H : I, k = proj == kDown ? I : H;
      const std::string rows_rule = proj == kDown ? "H" : "I", k_rule = proj == kDown ? "I" : "H";
      Proj& t = experts[i][proj];
      const std::string wname = p.weight(layer_idx_, e, proj);
      const std::string wrole = role(e, pname, "weight");
      const CheckpointTensor* w = ck_->find(wname);
      MOE_EP_CHECK(w != nullptr, "checkpoint '{}': tensor '{}' ({}) is missing; layer {} has {} "
                   "experts by {}", ck_->path(), wname, wrole, layer_idx_, shapes_.E, shapes_.source);
      t.weight = w;
      if (p.naming == WeightNaming::kPacked && (w->dtype == "I32" || w->dtype == "U32"))
        MOE_EP_FAIL(ErrorCode::kUnsupported, "{}: dtype {}: compressed-tensors integer weights "
                    "(pack-quantized int4 / int8 in 32-bit words) are unsupported; expected U8 "
                    "packed e2m1 (NVFP4 or MXFP4)", where(*w, wrole), w->dtype);
      expect_packed(*w, wrole, {}, rows, k, fmt::format("[{}, {}", rows_rule, k_rule), "");

      const std::string srole = role(e, pname, p.naming == WeightNaming::kPacked ? "weight_scale" : "scale");
      t.scale = &find_one(p.scale_names(wname), srole);
      if (i == 0 && proj == 0) {
        MOE_EP_CHECK(t.scale->dtype == "U8" || t.scale->dtype == "F8_E8M0" || t.scale->dtype == "F8_E4M3",
                     "{}: dtype {}; expected U8 or F8_E8M0 (MXFP4: UE8M0 per 32) or F8_E4M3 "
                     "(NVFP4: e4m3 per 16)", where(*t.scale, srole), t.scale->dtype);
        format = t.scale->dtype == "F8_E4M3" ? WeightFormat::kNVFP4 : WeightFormat::kMXFP4;
      }
      if (format == WeightFormat::kMXFP4) {
        expect_dtype(*t.scale, srole, {"U8", "F8_E8M0"});
        expect_shape(*t.scale, srole, {rows, k / kMxBlock},
                     fmt::format("[{}, {}/32] (MXFP4, as expert {} {})", rows_rule, k_rule, first_,
                                 p.proj_names[0]));
      } else {
        expect_dtype(*t.scale, srole, {"F8_E4M3"});
        expect_shape(*t.scale, srole, {rows, k / kNvBlock},
                     fmt::format("[{}, {}/16] (NVFP4, as expert {} {})", rows_rule, k_rule, first_,
                                 p.proj_names[0]));
        const std::string grole = role(e, pname, global_key);
        t.global = &ck_->get(p.global_scale_name(wname), grole);
        expect_scalar_f32(*t.global, grole);
        t.input = ck_->find(p.input_scale_name(wname));
        if (t.input) expect_scalar_f32(*t.input, role(e, pname, inverse ? "input_global_scale" : "input_scale"));
      }
    }
  }

  out.format = format;
  const int64_t B = format == WeightFormat::kNVFP4 ? kNvBlock : kMxBlock;
  const int64_t w13_packed = 2 * I * H / 2, w13_scales = 2 * I * H / B;
  const int64_t w2_packed = H * I / 2, w2_scales = H * I / B;
  out.w13_ = alloc_weights(count_ * w13_packed);
  out.w13_scale_ = alloc_weights(count_ * w13_scales);
  out.w2_ = alloc_weights(count_ * w2_packed);
  out.w2_scale_ = alloc_weights(count_ * w2_scales);
  if (format == WeightFormat::kNVFP4) {
    out.w13_global_.resize(static_cast<size_t>(2 * count_));
    out.w2_global_.resize(static_cast<size_t>(count_));
    out.input_scales.assign(static_cast<size_t>(3 * count_), NAN);
    if (inverse)
      out.notes.push_back("NVFP4 global scales stored as weight_global_scale g (compressed-tensors): "
                          "weight_scale_2 = fp32(1 / g)");
  }
  for (const auto& expert : experts)
    for (const Proj& t : expert)
      for (const CheckpointTensor* x : {t.weight, t.scale, t.global, t.input})
        if (x) bytes_ += x->nbytes;

  // Parallel: W13 rows [0, I) gate, [I, 2I) up; W2 = down.
  shared_thread_pool(threads_)->parallel_for(count_, [&](int64_t i) {
    const int64_t e = first_ + i;
    const auto& x = experts[i];
    uint8_t* w13 = out.w13_.get() + i * w13_packed;
    uint8_t* s13 = out.w13_scale_.get() + i * w13_scales;
    uint8_t* s2 = out.w2_scale_.get() + i * w2_scales;
    auto read = [&](const CheckpointTensor& t, uint8_t* dst) { ck_->file_of(t).read(t, dst); };
    read(*x[kGate].weight, w13);
    read(*x[kUp].weight, w13 + w13_packed / 2);
    read(*x[kDown].weight, out.w2_.get() + i * w2_packed);
    read(*x[kGate].scale, s13);
    read(*x[kUp].scale, s13 + w13_scales / 2);
    read(*x[kDown].scale, s2);
    const uint8_t* copies[3] = {s13, s13 + w13_scales / 2, s2};
    for (int proj = 0; proj < 3; ++proj)
      check_scale_values(copies[proj], *x[proj].scale, role(e, p.proj_names[proj], "weight_scale"),
                         format, 0, x[proj].scale->numel());
    if (format == WeightFormat::kNVFP4) {
      out.w13_global_[2 * i] = checked_global(*x[kGate].global, role(e, p.proj_names[0], global_key), 0, inverse);
      out.w13_global_[2 * i + 1] = checked_global(*x[kUp].global, role(e, p.proj_names[1], global_key), 0, inverse);
      out.w2_global_[i] = checked_global(*x[kDown].global, role(e, p.proj_names[2], global_key), 0, inverse);
      for (int proj = 0; proj < 3; ++proj)
        if (x[proj].input) {
          const float v = read_f32(x[proj].input->data);
          out.input_scales[3 * i + proj] = inverse ? 1.0f / v : v;
        }
    }
  });

  const DType scale_dtype = format == WeightFormat::kNVFP4 ? DType::kE4M3 : DType::kE8M0;
  WeightPack& pk = out.pack_;
  pk.format = format;
  pk.w13 = TensorView::contiguous(out.w13_.get(), DType::kU8, {count_, 2 * I, H / 2});
  pk.w13_scale = TensorView::contiguous(out.w13_scale_.get(), scale_dtype, {count_, 2 * I, H / B});
  pk.w2 = TensorView::contiguous(out.w2_.get(), DType::kU8, {count_, H, I / 2});
  pk.w2_scale = TensorView::contiguous(out.w2_scale_.get(), scale_dtype, {count_, H, I / B});
  if (format == WeightFormat::kNVFP4) {
    pk.w13_global = TensorView::contiguous(out.w13_global_.data(), DType::kF32, {count_, 2});
    pk.w2_global = TensorView::contiguous(out.w2_global_.data(), DType::kF32, {count_});
  }
}

// Unquantized per-expert weights, stacked as bf16 (the layer quantizes them to its recipe).
void CheckpointLayerBuilder::load_per_expert_float(const TensorPattern& p, CheckpointLayer& out) {
  const int64_t H = shapes_.H, I = shapes_.I;
  std::vector<std::array<const CheckpointTensor*, 3>> experts(static_cast<size_t>(count_));
  std::string dtype;
  for (int64_t i = 0; i < count_; ++i) {
    const int64_t e = first_ + i;
    for (int proj = 0; proj < 3; ++proj) {
      const std::string wname = p.weight(layer_idx_, e, proj);
      const std::string wrole = role(e, p.proj_names[proj], "weight");
      const CheckpointTensor* w = ck_->find(wname);
      MOE_EP_CHECK(w != nullptr, "checkpoint '{}': tensor '{}' ({}) is missing; layer {} has {} "
                   "experts by {}", ck_->path(), wname, wrole, layer_idx_, shapes_.E, shapes_.source);
      if (dtype.empty()) dtype = w->dtype;
      MOE_EP_CHECK(w->dtype == dtype, "{}: dtype {}; expected {} (as expert {} {}: unquantized "
                   "experts)", where(*w, wrole), w->dtype, dtype, first_, p.proj_names[0]);
      expect_shape(*w, wrole, proj == kDown ? std::vector<int64_t>{H, I} : std::vector<int64_t>{I, H},
                   proj == kDown ? "[H, I] (unquantized)" : "[I, H] (unquantized)");
      experts[i][proj] = w;
      bytes_ += w->nbytes;
    }
  }
  out.format = WeightFormat::kBF16;
  out.w13_ = alloc_weights(count_ * 2 * I * H * 2);
  out.w2_ = alloc_weights(count_ * H * I * 2);
  auto* w13 = reinterpret_cast<uint16_t*>(out.w13_.get());
  auto* w2 = reinterpret_cast<uint16_t*>(out.w2_.get());
  shared_thread_pool(threads_)->parallel_for(count_, [&](int64_t i) {
    const int64_t e = first_ + i;
    checkpoint::copy_as_bf16(*experts[i][kGate], role(e, p.proj_names[kGate], "weight"), 0, I * H,
                             w13 + i * 2 * I * H);
    checkpoint::copy_as_bf16(*experts[i][kUp], role(e, p.proj_names[kUp], "weight"), 0, I * H,
                             w13 + i * 2 * I * H + I * H);
    checkpoint::copy_as_bf16(*experts[i][kDown], role(e, p.proj_names[kDown], "weight"), 0, H * I,
                             w2 + i * H * I);
  });
  if (dtype != "BF16")
    out.notes.push_back(fmt::format("{} expert weights rounded to bf16 (nearest even)", dtype));
  out.pack_.format = WeightFormat::kBF16;
  out.pack_.w13 = TensorView::contiguous(w13, DType::kBF16, {count_, 2 * I, H});
  out.pack_.w2 = TensorView::contiguous(w2, DType::kBF16, {count_, H, I});
}

// The packed weights and block scales stay in the mapping (views offset to the first expert);
// only the global scales are copied (they may be unaligned, and [E] becomes [E, 2]).
void CheckpointLayerBuilder::load_fused(const TensorPattern& p, CheckpointLayer& out) {
  const int64_t E = shapes_.E, H = shapes_.H, I = shapes_.I;
  const std::string n13 = p.weight(layer_idx_, 0, kW13), n2 = p.weight(layer_idx_, 0, kW2);
  const std::string r13 = fmt::format("layer {} fused {}", layer_idx_, p.proj_names[kW13]);
  const std::string r2 = fmt::format("layer {} fused {}", layer_idx_, p.proj_names[kW2]);
  const CheckpointTensor& w13 = ck_->get(n13, r13 + " weight");
  const CheckpointTensor& w2 = ck_->get(n2, r2 + " weight");
  const CheckpointTensor& s13 = find_one(p.scale_names(n13), r13 + " weight_scale");
  const CheckpointTensor& s2 = find_one(p.scale_names(n2), r2 + " weight_scale");
  const std::string why = fmt::format("E, H, I from {}", shapes_.source);
  expect_packed(w13, r13 + " weight", {E}, 2 * I, H, "[E, 2I, H", "; " + why);
  expect_packed(w2, r2 + " weight", {E}, H, I, "[E, H, I", "; " + why);
  MOE_EP_CHECK(s13.dtype == "U8" || s13.dtype == "F8_E8M0" || s13.dtype == "F8_E4M3",
               "{}: dtype {}; expected U8 or F8_E8M0 (MXFP4) or F8_E4M3 (NVFP4)",
               where(s13, r13 + " weight_scale"), s13.dtype);
  const WeightFormat format = s13.dtype == "F8_E4M3" ? WeightFormat::kNVFP4 : WeightFormat::kMXFP4;
  const int64_t B = format == WeightFormat::kNVFP4 ? kNvBlock : kMxBlock;
  const std::string b = format == WeightFormat::kNVFP4 ? "16" : "32";
  if (format == WeightFormat::kMXFP4) {
    expect_dtype(s2, r2 + " weight_scale", {"U8", "F8_E8M0"});
  } else {
    expect_dtype(s2, r2 + " weight_scale", {"F8_E4M3"});
  }
  expect_shape(s13, r13 + " weight_scale", {E, 2 * I, H / B}, fmt::format("[E, 2I, H/{}] ({})", b, why));
  expect_shape(s2, r2 + " weight_scale", {E, H, I / B}, fmt::format("[E, H, I/{}] ({})", b, why));

  const CheckpointTensor *g13 = nullptr, *g2 = nullptr;
  if (format == WeightFormat::kNVFP4) {
    g13 = &ck_->get(p.global_scale_name(n13), r13 + " weight_scale_2");
    g2 = &ck_->get(p.global_scale_name(n2), r2 + " weight_scale_2");
    expect_dtype(*g13, r13 + " weight_scale_2", {"F32"});
    const bool pair = g13->shape == std::vector<int64_t>{E, 2};
    MOE_EP_CHECK(pair || g13->shape == std::vector<int64_t>(1, E),
                 "{}: shape {}; expected [E, 2] (gate, up) or [E] = [{}]",
                 where(*g13, r13 + " weight_scale_2"), g13->shape_str(), E);
    expect_dtype(*g2, r2 + " weight_scale_2", {"F32"});
    expect_shape(*g2, r2 + " weight_scale_2", {E}, "[E]");
  }

  out.format = format;
  const int64_t w13_packed = 2 * I * H / 2, w13_scales = 2 * I * H / B;
  const int64_t w2_packed = H * I / 2, w2_scales = H * I / B;
  for (const CheckpointTensor* t : {&w13, &w2, &s13, &s2}) ck_->file_of(*t).prefetch(*t);
  bytes_ = count_ * (w13_packed + w13_scales + w2_packed + w2_scales);
  if (format == WeightFormat::kNVFP4) {
    out.w13_global_.resize(static_cast<size_t>(2 * count_));
    out.w2_global_.resize(static_cast<size_t>(count_));
    bytes_ += count_ * (g13->shape.size() == 2 ? 12 : 8);
  }
  shared_thread_pool(threads_)->parallel_for(count_, [&](int64_t i) {
    const int64_t e = first_ + i;
    check_scale_values(s13.data + e * w13_scales, s13, r13 + " weight_scale", format,
                       e * w13_scales, w13_scales);
    check_scale_values(s2.data + e * w2_scales, s2, r2 + " weight_scale", format, e * w2_scales,
                       w2_scales);
    if (format == WeightFormat::kNVFP4) {
      const bool pair = g13->shape.size() == 2;
      out.w13_global_[2 * i] = checked_global(*g13, r13 + " weight_scale_2", pair ? 2 * e : e);
      out.w13_global_[2 * i + 1] = checked_global(*g13, r13 + " weight_scale_2", pair ? 2 * e + 1 : e);
      out.w2_global_[i] = checked_global(*g2, r2 + " weight_scale_2", e);
    }
  });

  auto view = [&](const CheckpointTensor& t, int64_t per_expert, DType dtype, std::initializer_list<int64_t> shape) {
    // The mapping is read-only; layers copy or convert weights and never write through a pack.
    return TensorView::contiguous(const_cast<uint8_t*>(t.data) + first_ * per_expert, dtype, shape);
  };
  const DType scale_dtype = format == WeightFormat::kNVFP4 ? DType::kE4M3 : DType::kE8M0;
  WeightPack& pk = out.pack_;
  pk.format = format;
  pk.w13 = view(w13, w13_packed, DType::kU8, {count_, 2 * I, H / 2});
  pk.w13_scale = view(s13, w13_scales, scale_dtype, {count_, 2 * I, H / B});
  pk.w2 = view(w2, w2_packed, DType::kU8, {count_, H, I / 2});
  pk.w2_scale = view(s2, w2_scales, scale_dtype, {count_, H, I / B});
  if (format == WeightFormat::kNVFP4) {
    pk.w13_global = TensorView::contiguous(out.w13_global_.data(), DType::kF32, {count_, 2});
    pk.w2_global = TensorView::contiguous(out.w2_global_.data(), DType::kF32, {count_});
  }
}


// transformers' fused experts: gate_up_proj [E, 2I, H] (gate rows first), down_proj [E, H, I],
// unquantized; experts [first, first + count) copied as bf16.
void CheckpointLayerBuilder::load_fused_float(const TensorPattern& p, CheckpointLayer& out) {
  const int64_t E = shapes_.E, H = shapes_.H, I = shapes_.I;
  const std::string r13 = fmt::format("layer {} fused {}", layer_idx_, p.proj_names[kW13]);
  const std::string r2 = fmt::format("layer {} fused {}", layer_idx_, p.proj_names[kW2]);
  const CheckpointTensor& w13 = ck_->get(p.weight(layer_idx_, 0, kW13), r13);
  const CheckpointTensor& w2 = ck_->get(p.weight(layer_idx_, 0, kW2), r2);
  const std::string why = fmt::format("E, H, I from {}", shapes_.source);
  for (const auto& [t, r] : {std::pair{&w13, &r13}, std::pair{&w2, &r2}}) {
    if (is_packed_dtype(t->dtype) || t->dtype == "F8_E4M3")
      MOE_EP_FAIL(ErrorCode::kInvalidArgument, "{}: dtype {}: a quantized tensor named without a "
                  "'weight' suffix has no scale names this reader knows; expected BF16, F16 or F32 "
                  "(transformers' unquantized experts), or a tensor pattern ending in 'weight'",
                  where(*t, *r), t->dtype);
    expect_dtype(*t, *r, {"BF16", "F16", "F32"});
  }
  MOE_EP_CHECK(w13.shape.size() != 3 || w13.shape != std::vector<int64_t>({E, H, 2 * I}) || H == 2 * I,
               "{}: shape {}; expected [E, 2I, H] = {} ({}); this is [E, H, 2I], the transposed layout "
               "of gpt-oss's transformers weights", where(w13, r13), w13.shape_str(),
               dims_str({E, 2 * I, H}), why);
  expect_shape(w13, r13, {E, 2 * I, H}, fmt::format("[E, 2I, H] ({})", why));
  expect_shape(w2, r2, {E, H, I}, fmt::format("[E, H, I] ({})", why));
  if (w13.dtype != "BF16" || w2.dtype != "BF16")
    out.notes.push_back(fmt::format("{} / {} expert weights rounded to bf16 (nearest even)", w13.dtype,
                                    w2.dtype));
  out.format = WeightFormat::kBF16;
  out.w13_ = alloc_weights(count_ * 2 * I * H * 2);
  out.w2_ = alloc_weights(count_ * H * I * 2);
  auto* d13 = reinterpret_cast<uint16_t*>(out.w13_.get());
  auto* d2 = reinterpret_cast<uint16_t*>(out.w2_.get());
  bytes_ += count_ * (w13.nbytes / E + w2.nbytes / E);
  shared_thread_pool(threads_)->parallel_for(count_, [&](int64_t i) {
    const int64_t e = first_ + i;
    checkpoint::copy_as_bf16(w13, r13, e * 2 * I * H, 2 * I * H, d13 + i * 2 * I * H);
    checkpoint::copy_as_bf16(w2, r2, e * H * I, H * I, d2 + i * H * I);
  });
  out.pack_.format = WeightFormat::kBF16;
  out.pack_.w13 = TensorView::contiguous(d13, DType::kBF16, {count_, 2 * I, H});
  out.pack_.w2 = TensorView::contiguous(d2, DType::kBF16, {count_, H, I});
}

std::unique_ptr<CheckpointLayer> CheckpointLayerBuilder::build() {
  const auto start = std::chrono::steady_clock::now();
  MOE_EP_CHECK(layer_idx_ >= 0, "layer {}; expected >= 0", layer_idx_);
  if (const auto& c = ck_->config(); c && c->num_hidden_layers > 0)
    MOE_EP_CHECK(layer_idx_ < c->num_hidden_layers, "layer {} is outside [0, {}) (num_hidden_layers "
                 "of {})", layer_idx_, c->num_hidden_layers, c->source);
  const Resolved resolved = resolve_pattern();
  const TensorPattern& p = resolved.pattern;
  if (p.naming == WeightNaming::kBlocks) refuse_gpt_oss(p);
  first_ = options_.first_expert;
  refuse_expert_biases(p);
  shapes_ = resolve_shapes(p);
  count_ = options_.num_experts < 0 ? shapes_.E - first_ : options_.num_experts;
  MOE_EP_CHECK(first_ >= 0 && count_ > 0 && first_ + count_ <= shapes_.E,
               "experts [{}, {}) of layer {} are outside [0, E = {}) ({})", first_, first_ + count_,
               layer_idx_, shapes_.E, shapes_.source);
  if (p.naming == WeightNaming::kPlain) {
    float_weights_ = true;
  } else if (p.naming == WeightNaming::kWeight) {
    const CheckpointTensor* probe = ck_->find(probe_name(p, layer_idx_, first_));
    float_weights_ = probe != nullptr && checkpoint::is_float_dtype(probe->dtype);
  }
  // Before anything is sized by E, H, I: the packed FP4 weights, their scales (NVFP4's one
  // per 16 is the larger) and the per-expert tensor table, of every expert loaded; or the bf16
  // copies of unquantized experts.
  {
    using detail::saturating_bytes;
    const int64_t weight_bytes = float_weights_ ? saturating_bytes({3, shapes_.I, shapes_.H, 2})
                                                : saturating_bytes({3, shapes_.I, shapes_.H}) / 2 +
                                                      saturating_bytes({3, shapes_.I, shapes_.H}) / kNvBlock;
    const int64_t per_expert_bytes = std::max<int64_t>(weight_bytes, 1) + 256;
    const bool from_config = ck_->config() && shapes_.source == ck_->config()->source;
    detail::require_host_bytes(
        saturating_bytes({count_, per_expert_bytes}),
        fmt::format("loading experts [{}, {}) of layer {} ({} bytes per expert)", first_,
                    first_ + count_, layer_idx_, per_expert_bytes),
        from_config ? fmt::format("n_routed_experts = {}, hidden_size = {}, moe_intermediate_size = "
                                  "{} of {}", shapes_.E, shapes_.H, shapes_.I, shapes_.source)
                    : fmt::format("E = {}, H = {}, I = {} from {}", shapes_.E, shapes_.H, shapes_.I,
                                  shapes_.source));
  }

  auto out = std::make_unique<CheckpointLayer>();
  out->checkpoint_ = ck_;
  out->layer_idx = layer_idx_;
  out->num_experts = count_;
  out->total_experts = shapes_.E;
  out->first_expert = first_;
  out->hidden_size = shapes_.H;
  out->intermediate_size = shapes_.I;
  out->layout = resolved.name;
  out->tensor_pattern = p.with_layer(layer_idx_);
  if (p.naming == WeightNaming::kPlain)
    load_fused_float(p, *out);
  else if (p.per_expert && float_weights_)
    load_per_expert_float(p, *out);
  else if (p.per_expert)
    load_per_expert(p, *out);
  else
    load_fused(p, *out);
  out->notes.insert(out->notes.begin(),
                    fmt::format("{} {} experts [{}, {}) of {} from '{}' (E, H, I from {})",
                                weight_format_name(out->format), out->layout, first_, first_ + count_,
                                shapes_.E, out->tensor_pattern, shapes_.source));
  if (const auto& c = ck_->config()) {
    const bool says_nvfp4 = c->quant_algo.find("NVFP4") != std::string::npos ||
                            c->quant_algo.find("nvfp4") != std::string::npos;
    const bool says_mxfp4 = c->quant_method == "mxfp4";
    if ((says_nvfp4 && out->format != WeightFormat::kNVFP4) ||
        (says_mxfp4 && out->format != WeightFormat::kMXFP4))
      out->notes.push_back(fmt::format("{} quantization_config says quant_method '{}' quant_algo "
                                       "'{}', but the expert scales are {}", c->source,
                                       c->quant_method, c->quant_algo, weight_format_name(out->format)));
  }
  const std::string block = p.block_prefix(layer_idx_);
  bytes_ += checkpoint::load_router(*ck_, layer_idx_, block, shapes_.E, shapes_.H, *out);
  bytes_ += checkpoint::load_shared_expert(*ck_, layer_idx_, block, shapes_.H, threads_,
                                           options_.shared_expert, *out);

  out->stats.checkpoint_bytes = bytes_;
  out->stats.num_threads = threads_;
  out->stats.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return out;
}

WeightPack CheckpointLayer::with_shared_expert() const {
  WeightPack p = pack_;
  if (shared_intermediate_size == 0 || shared_w13.empty()) return p;
  const int64_t H = hidden_size, Is = shared_intermediate_size;
  p.shared_w13 = TensorView::contiguous(const_cast<uint16_t*>(shared_w13.data()), DType::kBF16, {2 * Is, H});
  p.shared_w2 = TensorView::contiguous(const_cast<uint16_t*>(shared_w2.data()), DType::kBF16, {H, Is});
  return p;
}

int64_t CheckpointLayer::pack_bytes() const {
  int64_t n = 0;
  for (const TensorView* t : {&pack_.w13, &pack_.w13_scale, &pack_.w13_global, &pack_.w2,
                              &pack_.w2_scale, &pack_.w2_global})
    if (t->defined()) n += t->nbytes();
  return n;
}

std::unique_ptr<CheckpointLayer> load_checkpoint_layer(std::shared_ptr<const Checkpoint> checkpoint,
                                                       int64_t layer, const LayerLoadOptions& options) {
  MOE_EP_CHECK(checkpoint != nullptr, "load_checkpoint_layer: checkpoint is null");
  return CheckpointLayerBuilder(std::move(checkpoint), layer, options).build();
}

std::vector<int64_t> find_moe_layers(const Checkpoint& ck, const LayerLoadOptions& options) {
  std::vector<TensorPattern> patterns;
  if (!options.tensor_pattern.empty()) {
    patterns.push_back(TensorPattern::parse(options.tensor_pattern, options.proj_names, "tensor pattern"));
  } else {
    MOE_EP_CHECK(options.layout == "auto" || checkpoint::find_layout(options.layout) != nullptr,
                 "layout '{}' is unknown; allowed: auto, {}", options.layout,
                 checkpoint::known_layout_names());
    for (const Resolved& r : candidate_layouts(options)) patterns.push_back(r.pattern);
  }
  // A layer is found by its first expert's gate (per-expert) or its w13 (fused) tensor: the
  // names are matched against the pattern with {L} read as a decimal number.
  struct Affixes {
    std::string prefix, suffix;
  };
  std::vector<Affixes> affixes;
  for (const TensorPattern& p : patterns) {
    const size_t at = p.text.find("{L}");
    affixes.push_back({TensorPattern{p.text.substr(0, at), p.per_expert, p.proj_names}.weight(0, options.first_expert, 0),
                       TensorPattern{p.text.substr(at + 3), p.per_expert, p.proj_names}.weight(0, options.first_expert, 0)});
  }
  std::vector<int64_t> layers;
  for (const std::string& name : ck.tensor_names()) {
    for (const Affixes& a : affixes) {
      const std::string& prefix = a.prefix;
      const std::string& suffix = a.suffix;
      if (name.size() <= prefix.size() + suffix.size() || name.compare(0, prefix.size(), prefix) != 0 ||
          name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0)
        continue;
      const std::string digits = name.substr(prefix.size(), name.size() - prefix.size() - suffix.size());
      if (digits.empty() || digits.size() > 9 ||
          !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; }))
        continue;
      layers.push_back(std::stoll(digits));
    }
  }
  std::sort(layers.begin(), layers.end());
  layers.erase(std::unique(layers.begin(), layers.end()), layers.end());
  return layers;
}

std::vector<CheckpointLayoutInfo> known_checkpoint_layouts() {
  std::vector<CheckpointLayoutInfo> out;
  for (const checkpoint::KnownLayout& l : checkpoint::known_layouts())
    out.push_back({std::string(l.name), l.pattern.text, l.pattern.proj_names, std::string(l.origin)});
  return out;
}

std::vector<const CheckpointTensor*> expert_like_tensors(const Checkpoint& ck, size_t max_count) {
  std::vector<const CheckpointTensor*> out;
  for (const std::string& name : ck.tensor_names()) {
    if (out.size() >= max_count) break;
    std::string lower = name;
    std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
    const bool blocks = lower.size() > 7 && lower.compare(lower.size() - 7, 7, "_blocks") == 0;
    if (lower.find("expert") != std::string::npos || blocks) out.push_back(ck.find(name));
  }
  return out;
}

}  // namespace moe_ep
