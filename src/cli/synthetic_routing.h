// Synthetic router inputs, shared experts and EPLB weight slots shared by `moe_ep run --router /
// --eplb-redundant / --shared-expert` on the CPU (cmd_run_ep.cpp), on one GPU
// (cmd_run_layers_cuda.cpp) and on GPU ranks (cmd_run_ep_cuda.cpp): the same seeds give the same
// logits, bias, token ids, hash tables and shared experts on all.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "moe_ep/eplb.h"
#include "moe_ep/router.h"
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
using testing::SharedExpertWeights;
SharedExpertWeights synthetic_shared_expert(uint64_t seed, int layer, int64_t H, int64_t I);

// The routing of `moe_ep run --router / --eplb-redundant` over N layers x R ranks (a batch: one
// layer's tokens on one rank), and the reference the device routing stage is checked against:
// logical ids and weights by the DeepSeek V4 router on synthetic logits of stream (layer, rank)
// with the synthetic bias (hash layers: the rank's synthetic token ids and the layer's table), or
// the rank's generated routing without --router; then the EPLB map (`redundant` replicas planned
// from layer 0's logical load over all ranks) and every batch's physical ids.
struct RoutedBatch {
  std::vector<float> logits;               // [T, L] (router)
  std::vector<int32_t> tokens, table;      // [T], [kSyntheticVocab, K] (hash layers)
  std::vector<int32_t> logical, physical;  // [T, K]
  std::vector<float> weights;              // [T, K]
};

struct SyntheticRouting {
  RouterConfig config;            // L, K, routed scale, hash layers
  bool router = false;            // false: the generated routing
  std::vector<float> bias;        // [L] (router)
  std::vector<int64_t> replicated;  // the logical expert of each redundant slot
  EplbPlacement placement;
  std::vector<int64_t> counters;  // per physical expert: routed slots of every batch
  int layers = 1, ranks = 1;
  std::vector<RoutedBatch> batches;  // layer-major: batch (l, r) at l * ranks + r

  const RoutedBatch& at(int layer, int rank) const { return batches[layer * ranks + rank]; }
  std::vector<int64_t> physical_load(int layer) const;  // routed slots per physical expert
};

// rank_inputs[r]: rank r's tokens and generated routing (T and K from it).
SyntheticRouting make_synthetic_routing(uint64_t seed, const RouterConfig& config, bool router,
                                        int64_t redundant, int layers,
                                        const std::vector<testing::HostInputs>& rank_inputs);

// Expert slots `ids` of a full weight set (copies): a rank's experts, or EPLB physical slots;
// the shared expert, when there is one, goes along whole.
testing::HostWeights gather_slots(const testing::HostWeights& all, std::span<const int32_t> ids);

}  // namespace moe_ep::cli
