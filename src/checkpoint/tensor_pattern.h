// Names of a layer's expert tensors: a pattern with {L}, {e} (per-expert layouts only) and
// {proj}, the names derived from a weight's name, and the checkpoint layouts this reader knows.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace moe_ep::checkpoint {

// How the names of a weight's companions (scales, global scales) derive from its own name; set
// by the pattern's ending.
enum class WeightNaming {
  kWeight,  // "...weight": packed e2m1 with <w>_scale (or <stem>scale, DeepSeek V4's own files),
            // NVFP4's <w>_scale_2 and <stem>input_scale; or an unquantized float tensor
  kPacked,  // "...weight_packed" (compressed-tensors): <stem>weight_scale, and for NVFP4
            // <stem>weight_global_scale (the global *encode* factor g, 1 / weight_scale_2) and
            // <stem>input_global_scale
  kBlocks,  // "..._blocks" (gpt-oss): recognized to be refused with its reasons
  kPlain,   // a fused tensor named as it is (transformers' gate_up_proj / down_proj): unquantized
};

struct TensorPattern {
  std::string text;                    // e.g. "model.layers.{L}.mlp.experts.{e}.{proj}.weight"
  bool per_expert = true;              // has {e}
  std::vector<std::string> proj_names; // per-expert: gate, up, down; fused: w13, w2
  WeightNaming naming = WeightNaming::kWeight;

  static TensorPattern per_expert_default();  // DeepSeek V3 / ModelOpt names
  static TensorPattern fused_default();       // w13_weight / w2_weight
  // Checks a pattern (placeholders, its ending, the number of proj names; an empty proj list
  // takes the defaults). Errors name `option`.
  static TensorPattern parse(const std::string& text, const std::vector<std::string>& proj_names,
                             const std::string& option);

  std::string weight(int64_t layer, int64_t expert, int proj) const;
  std::string with_layer(int64_t layer) const;  // {L} filled in, for messages
  // The MoE block's prefix, the text before "experts" with {L} filled in
  // ("model.layers.3.mlp.", "layers.3.ffn."), under which the router ("gate.") and the shared
  // expert ("shared_experts.") live; "" when the pattern has no "experts".
  std::string block_prefix(int64_t layer) const;

  // Companion names of weight tensor `weight` (a name this pattern made).
  std::vector<std::string> scale_names(const std::string& weight) const;  // candidates, in order
  std::string global_scale_name(const std::string& weight) const;
  bool global_scale_is_inverse() const { return naming == WeightNaming::kPacked; }
  std::string input_scale_name(const std::string& weight) const;
  std::string stem(const std::string& weight) const;  // the name without its ending
};

// A layout load_checkpoint_layer recognizes (LayerLoadOptions::layout = name).
struct KnownLayout {
  std::string_view name;
  TensorPattern pattern;
  std::string_view origin;  // who writes it and how the layer loads it
};
const std::vector<KnownLayout>& known_layouts();
const KnownLayout* find_layout(std::string_view name);  // nullptr when unknown
std::string known_layout_names();                       // "per-expert, deepseek-v4, ..."

}  // namespace moe_ep::checkpoint
