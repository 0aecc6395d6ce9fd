// Synthetic router inputs, shared experts and EPLB weight slots shared by `moe_ep run --router /
// --eplb-redundant / --shared-expert` on the CPU (cmd_run_ep.cpp), on one GPU
// (cmd_run_layers_cuda.cpp) and on GPU ranks (cmd_run_ep_cuda.cpp): the same seeds give the same
// logits, bias, token ids, hash tables and shared experts on all.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "testing/synthetic.h"

namespace moe_ep::cli {

inline constexpr int64_t kSyntheticVocab = 4096;  // token ids of the synthetic hash layers

// Gate logits of layer l on rank r: N(0, 1), seeded by (seed, l, r) only. [T, L]
std::vector<float> synthetic_logits(uint64_t seed, int layer, int rank, int64_t T, int64_t L);
// The router's selection bias: N(0, 0.1), seeded by seed. [L]
std::vector<float> synthetic_bias(uint64_t seed, int64_t L);
// Token ids of rank r: uniform in [0, kSyntheticVocab). [T]
std::vector<int32_t> synthetic_token_ids(uint64_t seed, int rank, int64_t T);
// Hash table of layer l: uniform ids in [0, L). [kSyntheticVocab, K]
std::vector<int32_t> synthetic_hash_table(uint64_t seed, int layer, int64_t K, int64_t L);

// A shared expert's bf16 weights for layer l: w13 [2I, H] ~ N(0, 4/sqrt(H)) (the clamp acts),
// w2 [H, I] ~ N(0, 1/sqrt(I)).
struct SharedExpertWeights {
  int64_t hidden = 0, intermediate = 0;
  std::vector<uint16_t> w13, w2;
  TensorView w13_view() const;  // bf16 [2I, H], host memory (views into this object)
  TensorView w2_view() const;   // bf16 [H, I]
  WeightPack attach(WeightPack pack) const;  // `pack` with this as its shared expert
};
SharedExpertWeights synthetic_shared_expert(uint64_t seed, int layer, int64_t H, int64_t I);

// Expert slots `ids` of a full weight set (copies): a rank's experts, or EPLB physical slots.
testing::HostWeights gather_slots(const testing::HostWeights& all, std::span<const int32_t> ids);

}  // namespace moe_ep::cli
