// Names of a layer's expert tensors: a pattern with {L}, {e} (per-expert layouts only) and
// {proj}, and the names derived from a weight's name.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace moe_ep::checkpoint {

struct TensorPattern {
  std::string text;                    // e.g. "model.layers.{L}.mlp.experts.{e}.{proj}.weight"
  bool per_expert = true;              // has {e}
  std::vector<std::string> proj_names; // per-expert: gate, up, down; fused: w13, w2

  static TensorPattern per_expert_default();  // DeepSeek names
  static TensorPattern fused_default();       // w13_weight / w2_weight
  // Checks a user pattern (placeholders, the "weight" ending, the number of proj names; an
  // empty proj list takes the defaults). Errors name `option`.
  static TensorPattern parse(const std::string& text, const std::vector<std::string>& proj_names,
                             const std::string& option);

  std::string weight(int64_t layer, int64_t expert, int proj) const;
  std::string with_layer(int64_t layer) const;  // {L} filled in, for messages
};

std::string scale_name(const std::string& weight);        // <w>_scale
std::string global_scale_name(const std::string& weight); // <w>_scale_2
std::string input_scale_name(const std::string& weight);  // <w minus "weight">input_scale

}  // namespace moe_ep::checkpoint
