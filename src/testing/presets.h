// Model presets of docs/spec.md §10: the shapes and constants of one MoE layer of a model.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace moe_ep::testing {

struct Preset {
  std::string_view name;
  std::string_view description;
  int64_t hidden_size;          // H
  int64_t intermediate_size;    // I
  int64_t num_experts;          // E (logical routed experts)
  int64_t top_k;                // K
  float activation_clamp;       // c
  int num_layers;               // MoE layers of the model
  float routed_scaling_factor;
  int64_t max_tokens_per_rank;  // default token cap of a run
};

std::span<const Preset> presets();
std::string preset_names();  // "deepseek-v4-flash, deepseek-v4-pro, tiny"

// Throws moe_ep::Error kInvalidArgument naming `option` and the allowed names.
const Preset& find_preset(std::string_view name, std::string_view option = "--preset");

}  // namespace moe_ep::testing
