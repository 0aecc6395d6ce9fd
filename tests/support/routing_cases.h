// Routing-stage inputs shared by the CPU and GPU tests of moe_ep/routing_stage.h: gate logits
// (random, or structured so that token t prefers experts t*7+k: a wrong row or column shows),
// a bias, hash-layer tokens and table, and an EPLB placement that replicates hot experts several
// times; plus the expected result made by the independent path, route_deepseek_v4 then
// Eplb::remap.
#pragma once

#include <cmath>
#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "moe_ep/eplb.h"
#include "moe_ep/formats.h"
#include "moe_ep/router.h"
#include "moe_ep/routing_stage.h"

namespace moe_ep::testsupport {

struct RoutingCase {
  int64_t T = 33, L = 16, K = 4;
  bool router = true;        // false: remap only (logical ids given)
  bool bf16 = false, bias = true, ids64 = false, structured = false;
  int64_t redundant = 0;     // > 0: a placement with this many replicas
  int64_t hash_layers = 0;   // layer_idx < hash_layers routes by table
  int64_t layer = 0;
  float scale = 1.5f;
  uint64_t seed = 1;
  std::string str() const {
    return fmt::format("T={} L={} K={} router={} bf16={} bias={} ids64={} structured={} redundant={} "
                       "hash_layers={} layer={} seed={}", T, L, K, router, bf16, bias, ids64, structured,
                       redundant, hash_layers, layer, seed);
  }
};

inline constexpr int64_t kRoutingCaseVocab = 50;

struct RoutingInputs {
  std::vector<float> logits_f32;
  std::vector<uint16_t> logits_bf16;
  std::vector<float> bias;
  std::vector<int32_t> tokens, table;  // hash layers: [T], [vocab, K]
  std::vector<int64_t> logical;        // remap only: [T, K], with -1 holes and ids >= L
  std::optional<EplbPlacement> placement;
  // Expected results: ids [T, K] (physical when placed) and weights [T, K], counters [E].
  std::vector<int64_t> ids;
  std::vector<float> weights;
  std::vector<int64_t> counters;
};

// Placement replicating the hot logical experts (l % hot_every == hot_first) of a skewed load,
// several replicas each.
inline EplbPlacement hot_placement(int64_t L, int64_t redundant, uint64_t seed, int64_t hot_every,
                                   int64_t hot_first = 0) {
  std::vector<int64_t> load(L);
  std::mt19937_64 rng(seed);
  for (int64_t l = 0; l < L; ++l)
    load[l] = static_cast<int64_t>(rng() % 100) + (l % hot_every == hot_first ? 50000 : 0);
  return make_eplb_placement(L, plan_redundant_experts(load, redundant));
}

inline RoutingStageOptions stage_options(const RoutingCase& c, const RoutingInputs& in, Device device) {
  RoutingStageOptions o;
  o.device = device;
  o.num_logical = c.L;
  o.top_k = c.K;
  if (c.router) o.router = RouterConfig{c.L, c.K, c.scale, c.hash_layers};
  o.placement = in.placement;
  return o;
}

// The host tensors of one call over `in`, writing into ids (i32 or i64 as c says) and weights.
inline RoutingArgs host_args(const RoutingCase& c, RoutingInputs& in, void* ids, float* weights) {
  RoutingArgs a;
  a.layer_idx = c.layer;
  if (c.router) {
    a.logits = c.bf16 ? TensorView::contiguous(in.logits_bf16.data(), DType::kBF16, {c.T, c.L})
                      : TensorView::contiguous(in.logits_f32.data(), DType::kF32, {c.T, c.L});
    if (c.bias) a.bias = TensorView::contiguous(in.bias.data(), DType::kF32, {c.L});
    if (c.layer < c.hash_layers) {
      a.token_ids = TensorView::contiguous(in.tokens.data(), DType::kI32, {c.T});
      a.hash_table = TensorView::contiguous(in.table.data(), DType::kI32, {kRoutingCaseVocab, c.K});
    }
    a.topk_weights = TensorView::contiguous(weights, DType::kF32, {c.T, c.K});
  } else {
    a.logical_ids = TensorView::contiguous(in.logical.data(), DType::kI64, {c.T, c.K});
  }
  a.topk_ids = TensorView::contiguous(ids, c.ids64 ? DType::kI64 : DType::kI32, {c.T, c.K});
  return a;
}

inline RoutingInputs make_routing_inputs(const RoutingCase& c) {
  RoutingInputs in;
  std::mt19937_64 rng(c.seed);
  std::normal_distribution<float> n(0.0f, 2.0f);
  in.logits_f32.resize(c.T * c.L);
  for (int64_t t = 0; t < c.T; ++t)
    for (int64_t e = 0; e < c.L; ++e) {
      float v = n(rng);
      if (c.structured) {
        const int64_t rank = ((e - 7 * t) % c.L + c.L) % c.L;  // expert t*7 + rank
        v = rank < c.K ? 8.0f - static_cast<float>(rank) : -4.0f + 0.01f * v;
      }
      in.logits_f32[t * c.L + e] = v;
    }
  if (c.bf16) {
    in.logits_bf16.resize(in.logits_f32.size());
    for (size_t i = 0; i < in.logits_f32.size(); ++i) {
      in.logits_bf16[i] = float_to_bf16(in.logits_f32[i]);
      in.logits_f32[i] = bf16_to_float(in.logits_bf16[i]);
    }
  }
  if (c.bias) {
    std::normal_distribution<float> b(0.0f, 0.1f);
    in.bias.resize(c.L);
    for (float& v : in.bias) v = b(rng);
  }
  in.tokens.resize(c.T);
  in.table.resize(kRoutingCaseVocab * c.K);
  for (int32_t& v : in.tokens) v = static_cast<int32_t>(rng() % kRoutingCaseVocab);
  for (int32_t& v : in.table) v = static_cast<int32_t>(rng() % c.L);
  if (!c.router) {
    in.logical.resize(c.T * c.K);
    for (int64_t& v : in.logical) {
      const uint64_t r = rng() % 100;
      v = r < 5 ? -1 : r < 8 ? c.L + static_cast<int64_t>(rng() % 5) : static_cast<int64_t>(rng() % c.L);
    }
  }
  if (c.redundant > 0) in.placement = hot_placement(c.L, c.redundant, c.seed, 7);

  // The independent path: the public router, then the public Eplb.
  in.ids.assign(c.T * c.K, -7);
  in.weights.assign(c.T * c.K, NAN);
  if (c.router) {
    RouterArgs r = router_args(host_args(c, in, in.ids.data(), in.weights.data()));
    r.topk_ids = TensorView::contiguous(in.ids.data(), DType::kI64, {c.T, c.K});
    route_deepseek_v4(RouterConfig{c.L, c.K, c.scale, c.hash_layers}, r);
  } else {
    in.ids = in.logical;
  }
  if (in.placement) {
    Eplb eplb(*in.placement);
    eplb.set_recording(true);
    const TensorView ids = TensorView::contiguous(in.ids.data(), DType::kI64, {c.T, c.K});
    eplb.remap(ids, ids);
    in.counters = eplb.counter_values();
  }
  return in;
}

}  // namespace moe_ep::testsupport
