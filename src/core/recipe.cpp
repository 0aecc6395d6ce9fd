#include "moe_ep/recipe.h"

#include <fmt/format.h>

#include "check.h"
#include "moe_ep/quant.h"

namespace moe_ep {
namespace {

constexpr WeightFormat kMxfp4Formats[] = {WeightFormat::kMXFP4, WeightFormat::kBF16};
constexpr WeightFormat kNvfp4Formats[] = {WeightFormat::kNVFP4, WeightFormat::kMXFP4,
                                          WeightFormat::kBF16};

// H and I alignment: 128 is the K/N tile of the SM90 kernels and a multiple of every
// quantization block (32 for MXFP4/Q8, 16 for NVFP4). Indexed by Recipe.
constexpr RecipeTraits kRecipes[] = {
    {Recipe::kMxfp4, "mxfp4",
     "MXFP4 weights (e2m1 + UE8M0/32), FP8 e4m3 activations with UE8M0/32 scales", kMxBlock,
     DType::kE8M0, false, false, WeightFormat::kMXFP4, kMxfp4Formats, 128, 128},
    {Recipe::kNvfp4, "nvfp4",
     "NVFP4 weights (e2m1 + e4m3/16 + fp32 global), NVFP4 activations per token", kNvBlock,
     DType::kE4M3, true, true, WeightFormat::kNVFP4, kNvfp4Formats, 128, 128},
};
static_assert(static_cast<int>(Recipe::kMxfp4) == 0 && static_cast<int>(Recipe::kNvfp4) == 1,
              "kRecipes is indexed by Recipe");

}  // namespace

bool RecipeTraits::accepts(WeightFormat format) const {
  for (WeightFormat f : weight_formats)
    if (f == format) return true;
  return false;
}

std::span<const RecipeTraits> recipe_table() { return kRecipes; }

const RecipeTraits& recipe_traits(Recipe recipe) {
  const auto i = static_cast<size_t>(recipe);
  MOE_EP_CHECK(i < std::size(kRecipes), "recipe = {} is not a known recipe; allowed: {}",
               static_cast<int>(recipe), recipe_names());
  return kRecipes[i];
}

std::string_view recipe_name(Recipe recipe) { return recipe_traits(recipe).name; }

std::string recipe_names() {
  std::string names;
  for (const auto& r : kRecipes) names += fmt::format("{}{}", names.empty() ? "" : ", ", r.name);
  return names;
}

Recipe parse_recipe(std::string_view name, std::string_view option) {
  for (const auto& r : kRecipes)
    if (r.name == name) return r.recipe;
  MOE_EP_FAIL(ErrorCode::kInvalidArgument, "{} '{}' is not a known recipe; allowed: {}", option,
              name, recipe_names());
}

}  // namespace moe_ep
