#include "cli/synthetic_routing.h"

#include <algorithm>
#include <cmath>
#include <random>

#include "moe_ep/formats.h"

namespace moe_ep::cli {

std::vector<float> synthetic_logits(uint64_t seed, int layer, int rank, int64_t T, int64_t L) {
  std::mt19937_64 rng(seed * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(layer) * 1000003u +
                      static_cast<uint64_t>(rank) + 17);
  std::normal_distribution<float> n01(0.0f, 1.0f);
  std::vector<float> v(T * L);
  for (float& x : v) x = n01(rng);
  return v;
}

std::vector<float> synthetic_bias(uint64_t seed, int64_t L) {
  std::mt19937_64 rng(seed + 99);
  std::normal_distribution<float> n(0.0f, 0.1f);
  std::vector<float> bias(L);
  for (float& b : bias) b = n(rng);
  return bias;
}

std::vector<int32_t> synthetic_token_ids(uint64_t seed, int rank, int64_t T) {
  std::mt19937_64 rng(seed * 31 + static_cast<uint64_t>(rank) + 5);
  std::vector<int32_t> v(T);
  for (int32_t& t : v) t = static_cast<int32_t>(rng() % kSyntheticVocab);
  return v;
}

std::vector<int32_t> synthetic_hash_table(uint64_t seed, int layer, int64_t K, int64_t L) {
  std::mt19937_64 rng(seed * 131 + static_cast<uint64_t>(layer) + 7);
  std::vector<int32_t> v(kSyntheticVocab * K);
  for (int32_t& id : v) id = static_cast<int32_t>(rng() % static_cast<uint64_t>(L));
  return v;
}

SharedExpertWeights synthetic_shared_expert(uint64_t seed, int layer, int64_t H, int64_t I) {
  std::mt19937_64 rng(seed * 7919 + static_cast<uint64_t>(layer) + 3);
  std::normal_distribution<float> a(0.0f, 4.0f / std::sqrt(static_cast<float>(H)));
  std::normal_distribution<float> b(0.0f, 1.0f / std::sqrt(static_cast<float>(I)));
  SharedExpertWeights w;
  w.hidden = H;
  w.intermediate = I;
  w.w13.resize(2 * I * H);
  w.w2.resize(H * I);
  for (uint16_t& v : w.w13) v = float_to_bf16(a(rng));
  for (uint16_t& v : w.w2) v = float_to_bf16(b(rng));
  return w;
}

SyntheticRouting make_synthetic_routing(uint64_t seed, const RouterConfig& config, bool router,
                                        int64_t redundant, int layers,
                                        const std::vector<testing::HostInputs>& rank_inputs) {
  SyntheticRouting s;
  s.config = config;
  s.router = router;
  s.layers = layers;
  s.ranks = static_cast<int>(rank_inputs.size());
  const int64_t L = config.num_experts, K = config.top_k;
  if (router) s.bias = synthetic_bias(seed, L);
  for (int l = 0; l < layers; ++l)
    for (int r = 0; r < s.ranks; ++r) {
      const testing::HostInputs& in = rank_inputs[r];
      const int64_t T = in.num_tokens;
      RoutedBatch& b = s.batches.emplace_back();
      if (!router) {
        b.logical = in.topk_ids;
        b.weights = in.topk_weights;
        continue;
      }
      b.logits = synthetic_logits(seed, l, r, T, L);
      b.logical.resize(T * K);
      b.weights.resize(T * K);
      RouterArgs a;
      a.layer_idx = l;
      a.logits = TensorView::contiguous(b.logits.data(), DType::kF32, {T, L});
      a.bias = TensorView::contiguous(s.bias.data(), DType::kF32, {L});
      if (is_hash_layer(config, l)) {
        b.tokens = synthetic_token_ids(seed, r, T);
        b.table = synthetic_hash_table(seed, l, K, L);
        a.token_ids = TensorView::contiguous(b.tokens.data(), DType::kI32, {T});
        a.hash_table = TensorView::contiguous(b.table.data(), DType::kI32, {kSyntheticVocab, K});
      }
      a.topk_ids = TensorView::contiguous(b.logical.data(), DType::kI32, {T, K});
      a.topk_weights = TensorView::contiguous(b.weights.data(), DType::kF32, {T, K});
      route_deepseek_v4(config, a);
    }

  std::vector<int64_t> load(L, 0);
  for (int r = 0; r < s.ranks; ++r)
    for (int32_t id : s.at(0, r).logical)
      if (id >= 0) ++load[id];
  s.replicated = plan_redundant_experts(load, redundant);
  s.placement = make_eplb_placement(L, s.replicated);
  Eplb eplb(s.placement);
  eplb.set_recording(true);
  for (RoutedBatch& b : s.batches) {
    const int64_t T = static_cast<int64_t>(b.logical.size()) / K;
    b.physical.resize(b.logical.size());
    eplb.remap(TensorView::contiguous(b.logical.data(), DType::kI32, {T, K}),
               TensorView::contiguous(b.physical.data(), DType::kI32, {T, K}));
  }
  s.counters = eplb.counter_values();
  return s;
}

std::vector<int64_t> SyntheticRouting::physical_load(int layer) const {
  std::vector<int64_t> load(placement.num_physical, 0);
  for (int r = 0; r < ranks; ++r)
    for (int32_t id : at(layer, r).physical)
      if (id >= 0) ++load[id];
  return load;
}

testing::HostWeights gather_slots(const testing::HostWeights& all, std::span<const int32_t> ids) {
  testing::HostWeights w;
  w.format = all.format;
  w.num_slots = static_cast<int64_t>(ids.size());
  w.hidden_size = all.hidden_size;
  w.intermediate_size = all.intermediate_size;
  auto gather = [&](const auto& src, auto& dst) {
    if (src.empty()) return;
    const size_t per = src.size() / static_cast<size_t>(all.num_slots);
    dst.resize(per * ids.size());
    for (size_t i = 0; i < ids.size(); ++i)
      std::copy_n(src.begin() + ids[i] * per, per, dst.begin() + i * per);
  };
  gather(all.w13, w.w13);
  gather(all.w13_scale, w.w13_scale);
  gather(all.w2, w.w2);
  gather(all.w2_scale, w.w2_scale);
  gather(all.w13_global, w.w13_global);
  gather(all.w2_global, w.w2_global);
  w.shared = all.shared;  // one shared expert for every slot set
  return w;
}

}  // namespace moe_ep::cli
