// Seeded synthetic MoE problems: bf16 activations, routing, and expert weights quantized with
// the library's own quantizers (include/moe_ep/quant.h).
//
// Every random stream is derived from (seed, stream kind, index) alone, so a problem is the
// same for any thread count, and a rank's slice of the experts (or an EPLB replica of an
// expert) is bit-identical to the same expert of a full generation.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <vector>

#include "moe_ep/tensor.h"
#include "moe_ep/weights.h"

namespace moe_ep::testing {

// Called from the generating threads, serialized: (experts done, experts total).
using ProgressFn = std::function<void(int64_t done, int64_t total)>;

struct WeightSpec {
  int64_t hidden_size = 0;        // H
  int64_t intermediate_size = 0;  // I
  WeightFormat format = WeightFormat::kMXFP4;
  uint64_t seed = 0;
  // Logical expert id of each weight slot, in slot order (a rank's experts, or the physical
  // slots of an EPLB layout, where replicas repeat an id). Empty: slots 0..num_slots-1.
  std::vector<int64_t> expert_ids;
  int64_t num_slots = 0;          // used when expert_ids is empty
  int num_threads = 0;            // 0: std::thread::hardware_concurrency()
};

// A shared expert's bf16 weights (MoeDesc::shared_intermediate_size = intermediate), owned.
struct SharedExpertWeights {
  int64_t hidden = 0, intermediate = 0;
  std::vector<uint16_t> w13, w2;  // [2 intermediate, hidden], [hidden, intermediate]
  TensorView w13_view() const;    // host-memory views into this object
  TensorView w2_view() const;
  WeightPack attach(WeightPack pack) const;  // `pack` with this as its shared expert
};

// Owning host copy of a WeightPack (layouts in include/moe_ep/weights.h).
//   fp32 weights: W13_e ~ N(0, 1/H) (approximately: sum of four uniforms), W2_e ~ N(0, 1/I),
//   so gate/up and the expert output have unit-order magnitude for unit-variance x.
struct HostWeights {
  WeightFormat format = WeightFormat::kMXFP4;
  int64_t num_slots = 0, hidden_size = 0, intermediate_size = 0;
  std::vector<uint8_t> w13, w13_scale, w2, w2_scale;  // packed e2m1 / scale bytes, or bf16 bytes
  std::vector<float> w13_global, w2_global;            // NVFP4 weight_scale_2 (1 / g); gate
                                                       // and up share one (amax of all W13)
  std::optional<SharedExpertWeights> shared;           // in pack() when present

  WeightPack pack() const;  // views into this object; valid while it lives
  int64_t nbytes() const;   // all weight bytes (what a forward touching every expert reads)
};

HostWeights make_weights(const WeightSpec& spec, const ProgressFn& progress = {});

struct InputSpec {
  int64_t num_tokens = 0;   // T
  int64_t hidden_size = 0;  // H
  int64_t num_experts = 0;  // E: ids are drawn from [0, E)
  int64_t top_k = 0;        // K <= E
  double hole_fraction = 0.0;  // probability that a slot is -1
  float routed_scaling_factor = 1.0f;
  uint64_t seed = 0;
  int64_t stream_idx = 0;   // e.g. the rank: different ranks get different tokens
};

// Per-call host tensors.
//   x             bf16 [T, H] ~ N(0, 1)
//   topk_ids      i32 [T, K]: distinct experts per token, -1 with probability hole_fraction
//   topk_weights  f32 [T, K]: positive, summing to routed_scaling_factor over a token's valid
//                 slots (0 at holes)
struct HostInputs {
  int64_t num_tokens = 0, hidden_size = 0, top_k = 0;
  std::vector<uint16_t> x;
  std::vector<int32_t> topk_ids;
  std::vector<float> topk_weights;

  TensorView x_view() const;
  TensorView topk_ids_view() const;
  TensorView topk_weights_view() const;
  int64_t num_valid_slots() const;
};

HostInputs make_inputs(const InputSpec& spec);

// Distinct experts hit by the valid slots of `inputs` (the weight bytes a forward must read).
int64_t count_unique_experts(const HostInputs& inputs);

}  // namespace moe_ep::testing
