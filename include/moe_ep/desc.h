// The problem descriptor: what the caller asks a layer to compute (shapes, recipe, clamp and
// numerics policy). Validated once at layer creation; backends receive it checked. How it is
// computed (kernel variants, tiles) is the selected config (kernel_config.h), not part of it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "moe_ep/recipe.h"

namespace moe_ep {

// The expert-parallel fleet: shapes shared by every layer that runs on one runtime.
struct FleetParams {
  int64_t num_experts = 0;          // E: global physical experts, E % world_size == 0
  int64_t max_tokens_per_rank = 0;  // upper bound on T of any forward on any rank
  int64_t hidden_size = 0;          // H
};

// What the results may trade for speed. Both default to the fast choice.
struct NumericsPolicy {
  bool fast_math = false;  // approximate exp / reciprocal in SiLU on the GPU
  // mxfp4 on SM90: true keeps every k32 block sum in fp32 as docs/spec.md §3 states (mma.sync
  // kernels, bitwise equal to the CPU layer). false lets large batches use FP8 wgmma, whose
  // k32 sums carry ~2^-14 relative error (the Hopper tensor-core accumulator): 2-3x faster at
  // prefill, layer error vs the CPU layer ~3e-3 instead of ~1e-5. No override beats it.
  bool exact_accumulation = false;
};

// Throws kInvalidArgument (Error::parameter() = `parameter`) unless the clamp is none or a finite
// value >= 0: the one check of an activation clamp, for the routed and the shared experts.
void check_activation_clamp(std::optional<float> clamp, std::string_view parameter = "activation_clamp");

struct MoeDesc {
  FleetParams fleet;
  Recipe recipe = Recipe::kMxfp4;
  int64_t intermediate_size = 0;          // I
  int64_t top_k = 0;                      // K
  std::optional<float> activation_clamp;  // c; absent = +inf; must be finite and >= 0
  bool quantize_input = true;             // the layer quantizes bf16 x; false: caller passes a + scales
  NumericsPolicy numerics;
  // The optional shared expert (docs/spec.md §6; precision recipe in moe_ep/shared_expert.h): its
  // intermediate size Is, 0 = none. Its bf16 weights come in WeightPack::shared_w13 / shared_w2
  // (every rank holds all of them); every token of a rank passes through it and its output o is
  // added in the combine, y = bf16(fp32(bf16(routed sum)) + fp32(o)): bitwise a separate
  // SharedExpert::add_to after the routed layer. Needs quantize_input (it reads bf16 x).
  int64_t shared_intermediate_size = 0;

  const RecipeTraits& traits() const { return recipe_traits(recipe); }
  std::string str() const;  // every field, for messages and `moe_ep info`
};

// Shape and value checks of a descriptor for a world of `world_size` ranks, before any
// allocation. Throws kInvalidArgument naming the field, the value and what was expected.
void validate_desc(const MoeDesc& desc, int world_size);

}  // namespace moe_ep
