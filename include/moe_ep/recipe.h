// Quantization recipes (docs/spec.md §3, §4) as a type with a traits table: every property a backend,
// a validator or a kernel needs about a recipe is read from recipe_traits(), never from a
// string compare.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "moe_ep/dtype.h"
#include "moe_ep/weights.h"

namespace moe_ep {

enum class Recipe : uint8_t {
  kMxfp4,  // MXFP4 weights, Q8 activations (FP8 e4m3 + UE8M0 per 32)
  kNvfp4,  // NVFP4 weights and activations (e2m1 + e4m3 per 16 + fp32 global)
};

struct RecipeTraits {
  Recipe recipe;
  std::string_view name;         // what users type: "mxfp4", "nvfp4"
  std::string_view description;
  int64_t block;                 // elements per block scale (weights and activations)
  DType scale_dtype;             // block-scale element type: kE8M0 or kE4M3
  bool fp4_activations;          // activations packed e2m1 (two a byte) rather than e4m3 bytes
  bool global_scales;            // per-tensor weight globals and a per-token activation global
  WeightFormat native_format;    // the weight format the kernels compute with
  std::span<const WeightFormat> weight_formats;  // formats a WeightPack may come in
  int64_t hidden_align;          // H % hidden_align == 0
  int64_t intermediate_align;    // I % intermediate_align == 0

  // Bytes of one quantized activation row of k elements, and its block scales.
  constexpr int64_t code_bytes(int64_t k) const { return fp4_activations ? k / 2 : k; }
  constexpr int64_t scale_count(int64_t k) const { return k / block; }
  bool accepts(WeightFormat format) const;
};

std::span<const RecipeTraits> recipe_table();
const RecipeTraits& recipe_traits(Recipe recipe);
std::string_view recipe_name(Recipe recipe);
std::string recipe_names();  // "mxfp4, nvfp4"
// Throws kInvalidArgument naming `option` (the flag or field the user typed), the value and the
// allowed names when `name` is no recipe.
Recipe parse_recipe(std::string_view name, std::string_view option = "recipe");

}  // namespace moe_ep
