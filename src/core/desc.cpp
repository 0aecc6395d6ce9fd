#include "moe_ep/desc.h"

#include <cmath>

#include <fmt/format.h>

#include "check.h"
#include "host_memory.h"

namespace moe_ep {

void check_activation_clamp(std::optional<float> clamp, std::string_view parameter) {
  MOE_EP_CHECK_PARAM(!clamp || (std::isfinite(*clamp) && *clamp >= 0.0f), std::string(parameter),
                     "{} = {} is invalid; expected a finite value >= 0 (or none for +inf)", parameter,
                     clamp.value_or(0.0f));
}

std::string MoeDesc::str() const {
  return fmt::format(
      "recipe={} E={} H={} I={} K={} max_tokens_per_rank={} activation_clamp={} "
      "quantize_input={} fast_math={} exact_accumulation={} shared_intermediate_size={}",
      recipe_name(recipe), fleet.num_experts, fleet.hidden_size, intermediate_size, top_k,
      fleet.max_tokens_per_rank,
      activation_clamp ? fmt::format("{}", *activation_clamp) : std::string("none"),
      quantize_input, numerics.fast_math, numerics.exact_accumulation, shared_intermediate_size);
}

void validate_desc(const MoeDesc& d, int world_size) {
  const RecipeTraits& recipe = d.traits();
  const FleetParams& fleet = d.fleet;
  MOE_EP_CHECK(world_size >= 1, "world_size = {} is invalid; expected >= 1", world_size);
  MOE_EP_CHECK(fleet.num_experts >= 1, "num_experts = {} is invalid; expected >= 1",
               fleet.num_experts);
  MOE_EP_CHECK(fleet.num_experts % world_size == 0,
               "num_experts = {} is not divisible by world_size = {}; expected E % R == 0",
               fleet.num_experts, world_size);
  MOE_EP_CHECK(fleet.max_tokens_per_rank >= 1,
               "max_tokens_per_rank = {} is invalid; expected >= 1", fleet.max_tokens_per_rank);
  MOE_EP_CHECK(fleet.hidden_size >= 1 && fleet.hidden_size % recipe.hidden_align == 0,
               "hidden_size = {} is not supported by recipe '{}'; expected a positive multiple "
               "of {}", fleet.hidden_size, recipe.name, recipe.hidden_align);
  MOE_EP_CHECK(d.intermediate_size >= 1 && d.intermediate_size % recipe.intermediate_align == 0,
               "intermediate_size = {} is not supported by recipe '{}'; expected a positive "
               "multiple of {}", d.intermediate_size, recipe.name, recipe.intermediate_align);
  MOE_EP_CHECK(d.top_k >= 1 && d.top_k <= fleet.num_experts,
               "top_k = {} is invalid; expected 1..num_experts ({})", d.top_k, fleet.num_experts);
  // Sizes derived from these (weights E x 2I x H, activations T x K x H) must fit in int64.
  MOE_EP_CHECK(detail::saturating_bytes({fleet.num_experts, 2, d.intermediate_size,
                                         fleet.hidden_size}) < INT64_MAX &&
                   detail::saturating_bytes({fleet.max_tokens_per_rank, d.top_k,
                                             fleet.hidden_size}) < INT64_MAX,
               "num_experts = {}, intermediate_size = {}, hidden_size = {}, max_tokens_per_rank = "
               "{}, top_k = {}: E x 2I x H or T x K x H overflows int64; expected sizes that fit",
               fleet.num_experts, d.intermediate_size, fleet.hidden_size,
               fleet.max_tokens_per_rank, d.top_k);
  check_activation_clamp(d.activation_clamp);
  const int64_t Is = d.shared_intermediate_size;
  MOE_EP_CHECK(Is == 0 || (Is >= 16 && Is % 16 == 0 && Is <= (int64_t{1} << 20)),
               "shared_intermediate_size = {} is invalid; expected 0 (no shared expert) or a "
               "multiple of 16 in [16, 2^20]", Is);
  MOE_EP_CHECK(Is == 0 || fleet.hidden_size <= (int64_t{1} << 20),
               "hidden_size = {} is too large for the shared expert; expected <= 2^20",
               fleet.hidden_size);
  MOE_EP_CHECK(Is == 0 || d.quantize_input,
               "shared_intermediate_size = {} needs quantize_input = true (the shared expert reads "
               "bf16 x); got quantize_input = false", Is);
}

}  // namespace moe_ep
