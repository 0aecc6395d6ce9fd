#include "checkpoint/aux_weights.h"

#include <array>
#include <cmath>
#include <cstring>

#include "checkpoint/float_elements.h"
#include "core/check.h"
#include "core/thread_pool.h"
#include "moe_ep/formats.h"
#include "moe_ep/quant.h"

namespace moe_ep::checkpoint {
namespace {

std::string where(const CheckpointTensor& t, std::string_view role) {
  return fmt::format("{}: tensor '{}' ({})", *t.file, t.name, role);
}

void expect_float_tensor(const CheckpointTensor& t, std::string_view role,
                         const std::vector<int64_t>& shape, std::string_view rule) {
  MOE_EP_CHECK(is_float_dtype(t.dtype), "{}: dtype {}; expected BF16, F16 or F32", where(t, role), t.dtype);
  MOE_EP_CHECK(t.shape == shape, "{}: shape {}; expected {}", where(t, role), t.shape_str(), rule);
}

std::vector<float> widen_finite(const CheckpointTensor& t, std::string_view role) {
  std::vector<float> out(static_cast<size_t>(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i) {
    out[i] = float_element(t, i);
    MOE_EP_CHECK(std::isfinite(out[i]), "{}: element {} = {}; expected finite values",
                 where(t, role), i, out[i]);
  }
  return out;
}

const CheckpointTensor* find_first(const Checkpoint& ck, std::initializer_list<std::string> names) {
  for (const std::string& n : names)
    if (const CheckpointTensor* t = ck.find(n)) return t;
  return nullptr;
}

// A scale element as fp32: F32 / BF16 / F16 widened, F8_E8M0 2^(b - 127) (0xFF, the NaN, refused).
float scale_element(const CheckpointTensor& s, std::string_view role, int64_t i) {
  if (s.dtype == "F8_E8M0") {
    const uint8_t b = s.data[i];
    MOE_EP_CHECK(b != 0xFF, "{}: element {} = 0xFF is the E8M0 NaN; expected a finite UE8M0 scale "
                 "byte", where(s, role), i);
    return std::ldexp(1.0f, static_cast<int>(b) - 127);
  }
  const float v = float_element(s, i);
  MOE_EP_CHECK(std::isfinite(v), "{}: element {} = {}; expected a finite scale", where(s, role), i, v);
  return v;
}

// One bf16 element of a dequantized projection: a finite code times a finite scale can still
// overflow bf16; name the element here, not as a bf16 Inf that Layer::create would find later
// without a file to point at.
uint16_t checked_bf16(float v, const CheckpointTensor& w, std::string_view role, int64_t r, int64_t c) {
  const uint16_t b = float_to_bf16(v);
  MOE_EP_CHECK((b & 0x7F80) != 0x7F80, "{}: element [{}, {}] dequantizes to {}, not finite in bf16; "
               "expected finite values", where(w, role), r, c, v);
  return b;
}

// One shared-expert projection [rows, k] as bf16 bits into dst (row-major, k contiguous). Rules:
// include/moe_ep/checkpoint.h. `source` gets how it was stored.
int64_t load_shared_projection(const Checkpoint& ck, const std::string& name, const std::string& stem,
                               std::string_view role, int64_t rows, int64_t k, int num_threads,
                               uint16_t* dst, std::string* source) {
  const CheckpointTensor& w = ck.get(name, role);
  const std::string rule = fmt::format("[{}, {}]", rows, k);
  auto pool = shared_thread_pool(num_threads);
  if (is_float_dtype(w.dtype)) {
    expect_float_tensor(w, role, {rows, k}, rule);
    pool->parallel_for(rows, [&](int64_t r) { copy_as_bf16(w, role, r * k, k, dst + r * k); });
    *source = w.dtype == "BF16" ? "BF16" : w.dtype + " rounded to bf16";
    return w.nbytes;
  }
  if (w.dtype == "F8_E4M3") {
    MOE_EP_CHECK(w.shape == (std::vector<int64_t>{rows, k}), "{}: shape {}; expected {}",
                 where(w, role), w.shape_str(), rule);
    const CheckpointTensor* s = find_first(ck, {name + "_scale_inv", stem + "scale", name + "_scale"});
    MOE_EP_CHECK(s != nullptr, "checkpoint '{}': tensor '{}_scale_inv' or '{}scale' or '{}_scale' ({} "
                 "scales) is missing; an F8_E4M3 weight needs its scales", ck.path(), name, stem, name, role);
    const std::string srole = std::string(role) + " scales";
    MOE_EP_CHECK(is_float_dtype(s->dtype) || s->dtype == "F8_E8M0", "{}: dtype {}; expected F32, BF16, "
                 "F16 or F8_E8M0", where(*s, srole), s->dtype);
    int64_t bn = rows, bk = k, sc = 1;  // a scalar: one scale for the tensor
    if (s->numel() != 1 || s->shape.size() == 2) {
      const auto& config = ck.config();
      if (config) {
        for (const char* key : {"quantization_config", "quantization_config.weight_block_size"})
          if (const ModelConfig::IgnoredKey* bad = config->ignored_key(key))
            MOE_EP_FAIL(ErrorCode::kInvalidArgument, "{}: {} is {} ({}); the block scales of {} need "
                        "the block size [block_n, block_k]", config->source, key, bad->value,
                        bad->reason, where(*s, srole));
      }
      bn = config ? config->fp8_block_n : 128;
      bk = config ? config->fp8_block_k : 128;
      const int64_t sr = (rows + bn - 1) / bn;
      sc = (k + bk - 1) / bk;
      MOE_EP_CHECK(s->shape == (std::vector<int64_t>{sr, sc}),
                   "{}: shape {}; expected [ceil({}/{}), ceil({}/{})] = [{}, {}] (weight_block_size {} x {}{})",
                   where(*s, srole), s->shape_str(), rows, bn, k, bk, sr, sc, bn, bk,
                   config && config->fp8_block_given ? "" : ", the default");
    }
    pool->parallel_for(rows, [&](int64_t r) {
      for (int64_t c = 0; c < k; ++c) {
        const uint8_t q = w.data[r * k + c];
        MOE_EP_CHECK((q & 0x7F) != 0x7F, "{}: element [{}, {}] = 0x{:02X} is an e4m3 NaN",
                     where(w, role), r, c, q);
        const float scale = scale_element(*s, srole, (r / bn) * sc + c / bk);
        dst[r * k + c] = checked_bf16(e4m3_to_float(q) * scale, w, role, r, c);
      }
    });
    *source = s->numel() == 1 && s->shape.size() != 2
                  ? fmt::format("F8_E4M3 with a {} tensor scale ('{}')", s->dtype, s->name)
                  : fmt::format("F8_E4M3 with {} {} x {} block scales ('{}')", s->dtype, bn, bk, s->name);
    return w.nbytes + s->nbytes;
  }
  if (w.dtype == "U8" || w.dtype == "I8" || w.dtype == "F4") {
    const int64_t packed_k = w.dtype == "F4" ? k : k / 2;
    MOE_EP_CHECK(w.shape == (std::vector<int64_t>{rows, packed_k}), "{}: shape {}; expected [{}, {}] "
                 "(packed e2m1{})", where(w, role), w.shape_str(), rows, packed_k,
                 w.dtype == "F4" ? "" : ", two a byte");
    const CheckpointTensor* s = find_first(ck, {name + "_scale", stem + "scale"});
    MOE_EP_CHECK(s != nullptr, "checkpoint '{}': tensor '{}_scale' or '{}scale' ({} block scales) is "
                 "missing; a packed e2m1 weight needs its scales", ck.path(), name, stem, role);
    const std::string srole = std::string(role) + " weight_scale";
    const bool nvfp4 = s->dtype == "F8_E4M3";
    MOE_EP_CHECK(nvfp4 || s->dtype == "U8" || s->dtype == "F8_E8M0", "{}: dtype {}; expected F8_E4M3 "
                 "(NVFP4) or U8 / F8_E8M0 (MXFP4)", where(*s, srole), s->dtype);
    const int64_t B = nvfp4 ? kNvBlock : kMxBlock;
    MOE_EP_CHECK(s->shape == (std::vector<int64_t>{rows, k / B}), "{}: shape {}; expected [{}, {}/{}] = "
                 "[{}, {}]", where(*s, srole), s->shape_str(), rows, k, B, rows, k / B);
    float global = 1.0f;
    const CheckpointTensor* g = nullptr;
    if (nvfp4) {
      g = &ck.get(name + "_scale_2", std::string(role) + " weight_scale_2");
      MOE_EP_CHECK(g->dtype == "F32" && g->numel() == 1, "{}: dtype {} shape {}; expected an F32 scalar",
                   where(*g, "weight_scale_2"), g->dtype, g->shape_str());
      std::memcpy(&global, g->data, 4);
      MOE_EP_CHECK(std::isfinite(global) && global > 0.0f, "{}: value {}; expected a finite "
                   "weight_scale_2 > 0", where(*g, "weight_scale_2"), global);
    }
    pool->parallel_for(rows, [&](int64_t r) {
      for (int64_t c = 0; c < k; ++c) {
        const float e2m1 = e2m1_to_float(unpack_e2m1(w.data[(r * k + c) / 2], r * k + c));
        const uint8_t sb = s->data[r * (k / B) + c / B];
        float v;
        if (nvfp4) {
          MOE_EP_CHECK((sb & 0x7F) != 0x7F, "{}: element [{}, {}] = 0x{:02X} is an e4m3 NaN",
                       where(*s, srole), r, c / B, sb);
          v = (e2m1 * e4m3_to_float(sb)) * global;  // the first product is exact in fp32
        } else {
          MOE_EP_CHECK(sb != 0xFF, "{}: element [{}, {}] = 0xFF is the E8M0 NaN", where(*s, srole), r, c / B);
          v = std::ldexp(e2m1, static_cast<int>(sb) - 127);
        }
        dst[r * k + c] = checked_bf16(v, w, role, r, c);
      }
    });
    *source = nvfp4 ? "NVFP4 (e2m1, e4m3 per 16, weight_scale_2)" : "MXFP4 (e2m1, E8M0 per 32)";
    return w.nbytes + s->nbytes + (g ? g->nbytes : 0);
  }
  MOE_EP_FAIL(ErrorCode::kUnsupported, "{}: dtype {}: a shared expert stored as {} is unsupported; "
              "expected BF16, F16, F32, F8_E4M3 with its scales, or packed e2m1 (U8 / I8 / F4) with "
              "NVFP4 or MXFP4 scales", where(w, role), w.dtype, w.dtype);
}

}  // namespace

int64_t load_router(const Checkpoint& ck, int64_t layer, const std::string& block, int64_t E, int64_t H,
                    CheckpointLayer& out) {
  CheckpointRouter& r = out.router;
  r.num_experts = E;
  r.hidden_size = H;
  if (const auto& c = ck.config()) {
    r.routed_scaling_factor = c->routed_scaling_factor;
    r.scoring_func = c->scoring_func;
    r.config_hash_layer = c->is_hash_layer(layer);
  }
  if (block.empty()) return 0;
  int64_t bytes = 0;
  r.weight_name = block + "gate.weight";
  r.hash_table_name = block + "gate.tid2eid";
  if (const CheckpointTensor* w = ck.find(r.weight_name)) {
    const std::string role = fmt::format("layer {} router weight", layer);
    expect_float_tensor(*w, role, {E, H}, fmt::format("[E, H] = [{}, {}]", E, H));
    r.weight = widen_finite(*w, role);
    bytes += w->nbytes;
  }
  if (const CheckpointTensor* b = find_first(ck, {block + "gate.e_score_correction_bias", block + "gate.bias"})) {
    const std::string role = fmt::format("layer {} router bias", layer);
    expect_float_tensor(*b, role, {E}, fmt::format("[E] = [{}]", E));
    r.bias = widen_finite(*b, role);
    r.bias_name = b->name;
    bytes += b->nbytes;
  }
  if (const CheckpointTensor* t = ck.find(r.hash_table_name)) {
    const std::string role = fmt::format("layer {} router hash table", layer);
    MOE_EP_CHECK(t->dtype == "I32" || t->dtype == "I64", "{}: dtype {}; expected I32 or I64",
                 where(*t, role), t->dtype);
    MOE_EP_CHECK(t->shape.size() == 2 && t->shape[0] > 0 && t->shape[1] > 0 && t->shape[1] <= E,
                 "{}: shape {}; expected [vocab, K] with 1 <= K <= E = {}", where(*t, role),
                 t->shape_str(), E);
    r.vocab_size = t->shape[0];
    r.hash_top_k = t->shape[1];
    r.hash_table.resize(static_cast<size_t>(t->numel()));
    for (int64_t i = 0; i < t->numel(); ++i) {
      int64_t id;
      if (t->dtype == "I64") {
        std::memcpy(&id, t->data + 8 * i, 8);
      } else {
        int32_t v;
        std::memcpy(&v, t->data + 4 * i, 4);
        id = v;
      }
      MOE_EP_CHECK(id >= 0 && id < E, "{}: element [{}, {}] = {}; expected an expert id in [0, E = {})",
                   where(*t, role), i / r.hash_top_k, i % r.hash_top_k, id, E);
      r.hash_table[static_cast<size_t>(i)] = static_cast<int32_t>(id);
    }
    bytes += t->nbytes;
  }
  return bytes;
}

int64_t load_shared_expert(const Checkpoint& ck, int64_t layer, const std::string& block, int64_t H,
                           int num_threads, bool load, CheckpointLayer& out) {
  if (block.empty()) return 0;
  std::array<std::string, 3> names, stems;
  bool found = false;
  for (const auto& proj : {std::array<const char*, 3>{"gate_proj", "up_proj", "down_proj"},
                           std::array<const char*, 3>{"w1", "w3", "w2"}}) {
    for (int i = 0; i < 3; ++i) {
      stems[i] = fmt::format("{}shared_experts.{}.", block, proj[i]);
      names[i] = stems[i] + "weight";
    }
    if ((found = ck.find(names[0]) != nullptr)) break;
  }
  if (!found) return 0;
  if (!load) {
    out.notes.push_back(fmt::format("shared expert '{}' left out (LayerLoadOptions::shared_expert = "
                                    "false, --no-shared-expert)", names[0]));
    return 0;
  }
  try {
    const CheckpointTensor& gate = *ck.find(names[0]);
    const std::string role = fmt::format("layer {} shared expert gate weight", layer);
    const bool packed = gate.dtype == "U8" || gate.dtype == "I8";
    const int64_t width = packed ? 2 : 1;
    MOE_EP_CHECK(gate.shape.size() == 2 && gate.shape[1] * width == H,
                 "{}: shape {}; expected [Is, {}] with H = {}{}", where(gate, role), gate.shape_str(),
                 packed ? "H/2" : "H", H, packed ? " (packed e2m1, two a byte)" : "");
    const int64_t Is = gate.shape[0];
    out.shared_intermediate_size = Is;
    out.shared_w13.resize(static_cast<size_t>(2 * Is * H));
    out.shared_w2.resize(static_cast<size_t>(H * Is));
    std::string source[3];
    const char* kinds[3] = {"gate", "up", "down"};
    int64_t bytes = 0;
    for (int i = 0; i < 3; ++i) {
      const std::string r = fmt::format("layer {} shared expert {} weight", layer, kinds[i]);
      uint16_t* dst = i == 0 ? out.shared_w13.data() : i == 1 ? out.shared_w13.data() + Is * H
                                                               : out.shared_w2.data();
      bytes += load_shared_projection(ck, names[i], stems[i], r, i == 2 ? H : Is, i == 2 ? Is : H,
                                      num_threads, dst, &source[i]);
    }
    out.shared_source = source[0];
    out.notes.push_back(fmt::format("shared expert '{}': Is = {} ({} -> bf16)", names[0], Is, source[0]));
    return bytes;
  } catch (const Error& e) {
    out.shared_intermediate_size = 0;
    out.shared_w13.clear();
    out.shared_w2.clear();
    throw Error(e.code(), e.message() + "; --no-shared-expert (LayerLoadOptions::shared_expert = false) "
                "loads the layer without its shared expert", e.file(), e.line(), e.parameter());
  }
}

}  // namespace moe_ep::checkpoint

namespace moe_ep {

std::string CheckpointRouter::unsupported_reason(int64_t top_k, std::string_view model_type) const {
  if (!present())
    return fmt::format("the checkpoint has no router weight for the layer ('{}' is missing)", weight_name);
  if (!scoring_func.empty() && scoring_func != "sqrtsoftplus")
    return fmt::format("config.json's scoring_func is '{}'; the library's router computes DeepSeek V4's "
                       "sqrt(softplus(logits)) (scoring_func 'sqrtsoftplus', include/moe_ep/router.h)",
                       scoring_func);
  if (scoring_func.empty() && model_type != "deepseek_v4")
    return fmt::format("config.json has no scoring_func and model_type '{}' is not deepseek_v4, so the "
                       "router's scoring function is unknown; the library's router computes DeepSeek "
                       "V4's sqrt(softplus(logits)) (scoring_func 'sqrtsoftplus')", model_type);
  if (config_hash_layer && *config_hash_layer && !hash_layer())
    return fmt::format("config.json makes the layer a hash layer (num_hash_layers / mlp_layer_types), "
                       "but its table '{}' is missing", hash_table_name);
  if (config_hash_layer && !*config_hash_layer && hash_layer())
    return fmt::format("the checkpoint holds a hash table '{}', but config.json (num_hash_layers / "
                       "mlp_layer_types) makes the layer a scored one", hash_table_name);
  if (hash_layer() && hash_top_k != top_k)
    return fmt::format("the hash table '{}' has {} columns; expected top_k = {}", hash_table_name,
                       hash_top_k, top_k);
  return "";
}

RouterConfig CheckpointRouter::config(int64_t top_k) const {
  return RouterConfig{num_experts, top_k, routed_scaling_factor, hash_layer() ? 1 : 0};
}

}  // namespace moe_ep
