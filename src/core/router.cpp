#include "moe_ep/router.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string_view>
#include <vector>

#include "check.h"
#include "core/router_math.h"
#include "moe_ep/formats.h"

namespace moe_ep {
namespace {

void check_host_tensor(const TensorView& t, std::string_view name, std::string_view dtypes,
                       bool dtype_ok, std::initializer_list<int64_t> shape,
                       std::string_view shape_names) {
  MOE_EP_CHECK(t.defined(), "{} is missing; expected {} {}", name, dtypes, shape_names);
  MOE_EP_CHECK(dtype_ok, "{} has dtype {}; expected {}", name, dtype_name(t.dtype), dtypes);
  bool shape_ok = t.ndim == static_cast<int32_t>(shape.size());
  int d = 0;
  for (int64_t s : shape) {
    shape_ok = shape_ok && (s < 0 || t.shape[d] == s);
    ++d;
  }
  MOE_EP_CHECK(shape_ok, "{} has shape {}; expected {}", name, t.shape_str(), shape_names);
  MOE_EP_CHECK(t.is_contiguous(), "{} with shape {} is not row-major contiguous", name,
               t.shape_str());
  MOE_EP_CHECK(t.device.type == DeviceType::kCPU, "{} is on {}; expected cpu", name,
               t.device.str());
  MOE_EP_CHECK(t.numel() == 0 || t.data != nullptr, "{} has a null data pointer", name);
}

bool is_id_dtype(DType d) { return d == DType::kI32 || d == DType::kI64; }

int64_t read_id(const TensorView& t, int64_t i) {
  return t.dtype == DType::kI32 ? t.ptr<const int32_t>()[i] : t.ptr<const int64_t>()[i];
}

float read_logit(const TensorView& t, int64_t i) {
  return t.dtype == DType::kF32 ? t.ptr<const float>()[i]
                                : bf16_to_float(t.ptr<const uint16_t>()[i]);
}


}  // namespace

bool is_hash_layer(const RouterConfig& config, int64_t layer_idx) {
  return layer_idx < config.num_hash_layers;
}

void check_router_config(const RouterConfig& c) {
  MOE_EP_CHECK(c.num_experts >= 1, "router num_experts = {} is invalid; expected >= 1",
               c.num_experts);
  MOE_EP_CHECK(c.top_k >= 1 && c.top_k <= c.num_experts,
               "router top_k = {} is invalid; expected 1..num_experts ({})", c.top_k,
               c.num_experts);
  MOE_EP_CHECK(std::isfinite(c.routed_scaling_factor) && c.routed_scaling_factor > 0.0f,
               "router routed_scaling_factor = {} is invalid; expected a finite value > 0",
               c.routed_scaling_factor);
  MOE_EP_CHECK(c.num_hash_layers >= 0, "router num_hash_layers = {} is invalid; expected >= 0",
               c.num_hash_layers);
}

void route_deepseek_v4(const RouterConfig& c, const RouterArgs& a) {
  check_router_config(c);
  MOE_EP_CHECK(a.layer_idx >= 0, "router layer_idx = {} is invalid; expected >= 0", a.layer_idx);
  const int64_t E = c.num_experts, K = c.top_k;
  check_host_tensor(a.logits, "logits", "f32 | bf16",
                    a.logits.dtype == DType::kF32 || a.logits.dtype == DType::kBF16, {-1, E},
                    fmt::format("[T, E = {}]", E));
  const int64_t T = a.logits.shape[0];
  check_host_tensor(a.topk_ids, "topk_ids", "i32 | i64", is_id_dtype(a.topk_ids.dtype), {T, K},
                    fmt::format("[T, K] = [{}, {}]", T, K));
  check_host_tensor(a.topk_weights, "topk_weights", "f32", a.topk_weights.dtype == DType::kF32,
                    {T, K}, fmt::format("[T, K] = [{}, {}]", T, K));
  const float* bias = nullptr;
  if (a.bias.defined()) {
    check_host_tensor(a.bias, "bias", "f32", a.bias.dtype == DType::kF32, {E},
                      fmt::format("[E] = [{}]", E));
    bias = a.bias.ptr<const float>();
    for (int64_t e = 0; e < E; ++e)
      MOE_EP_CHECK(std::isfinite(bias[e]), "bias[{}] = {} is not finite; expected a finite "
                   "selection bias", e, bias[e]);
  }
  for (int64_t i = 0; i < T * E; ++i) {
    const float v = read_logit(a.logits, i);
    MOE_EP_CHECK(std::isfinite(v), "logits[{}, {}] = {} is not finite; expected finite gate logits",
                 i / E, i % E, v);
  }

  const bool hashed = is_hash_layer(c, a.layer_idx);
  if (hashed) {
    check_host_tensor(a.token_ids, "token_ids", "i32 | i64", is_id_dtype(a.token_ids.dtype), {T},
                      fmt::format("[T] = [{}] (layer {} < num_hash_layers = {} routes by hash)",
                                  T, a.layer_idx, c.num_hash_layers));
    check_host_tensor(a.hash_table, "hash_table", "i32 | i64", is_id_dtype(a.hash_table.dtype),
                      {-1, K}, fmt::format("[vocab, K = {}]", K));
    const int64_t vocab = a.hash_table.shape[0];
    for (int64_t t = 0; t < T; ++t) {
      const int64_t tok = read_id(a.token_ids, t);
      MOE_EP_CHECK(tok >= 0 && tok < vocab, "token_ids[{}] = {} is outside [0, vocab = {})", t,
                   tok, vocab);
      for (int64_t k = 0; k < K; ++k) {
        const int64_t id = read_id(a.hash_table, tok * K + k);
        MOE_EP_CHECK(id >= 0 && id < E,
                     "hash_table[{}, {}] = {} is outside [0, num_experts = {})", tok, k, id, E);
      }
    }
  } else {
    MOE_EP_CHECK(!a.token_ids.defined() && !a.hash_table.defined(),
                 "token_ids / hash_table are given but layer_idx = {} is not a hash layer "
                 "(num_hash_layers = {}); leave them empty", a.layer_idx, c.num_hash_layers);
  }

  std::vector<float> s(E), sel(E);
  std::vector<int64_t> order(E), ids(K);
  auto* out_w = a.topk_weights.ptr<float>();
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t e = 0; e < E; ++e) {
      s[e] = router_math::sqrt_softplus(read_logit(a.logits, t * E + e));
      sel[e] = bias ? s[e] + bias[e] : s[e];
    }
    if (hashed) {
      const int64_t tok = read_id(a.token_ids, t);
      for (int64_t k = 0; k < K; ++k) ids[k] = read_id(a.hash_table, tok * K + k);
    } else {
      std::iota(order.begin(), order.end(), int64_t{0});
      std::partial_sort(order.begin(), order.begin() + K, order.end(),
                        [&](int64_t x, int64_t y) { return sel[x] > sel[y] || (sel[x] == sel[y] && x < y); });
      std::copy(order.begin(), order.begin() + K, ids.begin());
    }
    float sum = 0.0f;
    for (int64_t k = 0; k < K; ++k) sum += s[ids[k]];
    for (int64_t k = 0; k < K; ++k) {
      const int64_t i = t * K + k;
      if (a.topk_ids.dtype == DType::kI32)
        a.topk_ids.ptr<int32_t>()[i] = static_cast<int32_t>(ids[k]);
      else
        a.topk_ids.ptr<int64_t>()[i] = ids[k];
      out_w[i] = router_math::routed_weight(s[ids[k]], sum, c.routed_scaling_factor);
    }
  }
}

}  // namespace moe_ep
