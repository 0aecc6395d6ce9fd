#include "checkpoint/tensor_pattern.h"

#include <array>

#include <fmt/format.h>

#include "core/check.h"

namespace moe_ep::checkpoint {
namespace {

void replace_all(std::string& s, const std::string& from, const std::string& to) {
  for (size_t p = s.find(from); p != std::string::npos; p = s.find(from, p + to.size()))
    s.replace(p, from.size(), to);
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

TensorPattern TensorPattern::per_expert_default() {
  return parse("model.layers.{L}.mlp.experts.{e}.{proj}.weight", {"gate_proj", "up_proj", "down_proj"},
               "tensor pattern");
}

TensorPattern TensorPattern::fused_default() {
  return parse("model.layers.{L}.mlp.experts.{proj}_weight", {"w13", "w2"}, "tensor pattern");
}

TensorPattern TensorPattern::parse(const std::string& text, const std::vector<std::string>& proj,
                                   const std::string& option) {
  for (size_t open = text.find('{'); open != std::string::npos; open = text.find('{', open + 1)) {
    const size_t close = text.find('}', open);
    const std::string field = close == std::string::npos ? text.substr(open)
                                                         : text.substr(open, close - open + 1);
    MOE_EP_CHECK(field == "{L}" || field == "{e}" || field == "{proj}",
                 "{} '{}': placeholder '{}' is unknown; allowed: {{L}} (layer), {{e}} (expert), "
                 "{{proj}} (projection)", option, text, field);
  }
  MOE_EP_CHECK(text.find("{L}") != std::string::npos && text.find("{proj}") != std::string::npos,
               "{} '{}': expected the placeholders {{L}} and {{proj}} (and {{e}} for per-expert "
               "tensors)", option, text);
  TensorPattern p;
  p.text = text;
  p.per_expert = text.find("{e}") != std::string::npos;
  if (ends_with(text, "weight_packed"))
    p.naming = WeightNaming::kPacked;
  else if (ends_with(text, "weight"))
    p.naming = WeightNaming::kWeight;
  else if (ends_with(text, "_blocks"))
    p.naming = WeightNaming::kBlocks;
  else
    p.naming = WeightNaming::kPlain;
  MOE_EP_CHECK(p.naming != WeightNaming::kPlain || !p.per_expert,
               "{} '{}': expected the name of a weight tensor, ending in 'weight' (its scales are "
               "found as <name>_scale or <name minus weight>scale, <name>_scale_2) or in "
               "'weight_packed' (compressed-tensors)", option, text);
  MOE_EP_CHECK(p.naming != WeightNaming::kPacked || p.per_expert,
               "{} '{}': 'weight_packed' tensors (compressed-tensors) are per expert; expected the "
               "placeholder {{e}}", option, text);
  p.proj_names = proj.empty() ? (p.per_expert ? per_expert_default() : fused_default()).proj_names : proj;
  const size_t expected = p.per_expert ? 3 : 2;
  MOE_EP_CHECK(p.proj_names.size() == expected,
               "{} '{}' is a {} pattern: expected {} projection names ({}), got {}", option, text,
               p.per_expert ? "per-expert" : "fused", expected,
               p.per_expert ? "gate, up, down" : "w13, w2", p.proj_names.size());
  // A repeated name would load one projection's tensors in place of another's and run.
  for (size_t i = 0; i < p.proj_names.size(); ++i) {
    MOE_EP_CHECK(!p.proj_names[i].empty(), "{} '{}': projection name {} is empty", option, text, i);
    for (size_t j = 0; j < i; ++j)
      MOE_EP_CHECK(p.proj_names[i] != p.proj_names[j], "{} '{}': projection names must differ; "
                   "'{}' is given twice (as {} and {})", option, text, p.proj_names[i],
                   p.proj_names.size() == 3 ? std::array{"gate", "up", "down"}[j] : std::array{"w13", "w2", ""}[j],
                   p.proj_names.size() == 3 ? std::array{"gate", "up", "down"}[i] : std::array{"w13", "w2", ""}[i]);
  }
  return p;
}

std::string TensorPattern::weight(int64_t layer, int64_t expert, int proj) const {
  std::string s = text;
  replace_all(s, "{L}", std::to_string(layer));
  replace_all(s, "{e}", std::to_string(expert));
  replace_all(s, "{proj}", proj_names.at(static_cast<size_t>(proj)));
  return s;
}

std::string TensorPattern::with_layer(int64_t layer) const {
  std::string s = text;
  replace_all(s, "{L}", std::to_string(layer));
  return s;
}

std::string TensorPattern::block_prefix(int64_t layer) const {
  const size_t at = text.find("experts");
  if (at == std::string::npos) return "";
  std::string s = text.substr(0, at);
  replace_all(s, "{L}", std::to_string(layer));
  return s;
}

std::string TensorPattern::stem(const std::string& weight) const {
  const size_t n = naming == WeightNaming::kPacked   ? 13   // "weight_packed"
                   : naming == WeightNaming::kWeight ? 6    // "weight"
                   : naming == WeightNaming::kBlocks ? 7    // "_blocks"
                                                     : 0;
  return weight.substr(0, weight.size() - n);
}

std::vector<std::string> TensorPattern::scale_names(const std::string& weight) const {
  if (naming == WeightNaming::kPacked) return {stem(weight) + "weight_scale"};
  if (naming == WeightNaming::kBlocks) return {stem(weight) + "_scales"};
  return {weight + "_scale", stem(weight) + "scale"};
}

std::string TensorPattern::global_scale_name(const std::string& weight) const {
  return naming == WeightNaming::kPacked ? stem(weight) + "weight_global_scale" : weight + "_scale_2";
}

std::string TensorPattern::input_scale_name(const std::string& weight) const {
  return stem(weight) + (naming == WeightNaming::kPacked ? "input_global_scale" : "input_scale");
}

const std::vector<KnownLayout>& known_layouts() {
  static const std::vector<KnownLayout> kLayouts = [] {
    const auto make = [](std::string_view name, const char* text, std::vector<std::string> proj,
                         std::string_view origin) {
      return KnownLayout{name, TensorPattern::parse(text, proj, "layout"), origin};
    };
    return std::vector<KnownLayout>{
        make("per-expert", "model.layers.{L}.mlp.experts.{e}.{proj}.weight",
             {"gate_proj", "up_proj", "down_proj"},
             "DeepSeek V3 / ModelOpt NVFP4 / Qwen3-MoE / per-expert MXFP4: packed e2m1 with "
             "weight_scale (and weight_scale_2), used as stored; or bf16, quantized by the layer"),
        make("deepseek-v4", "layers.{L}.ffn.experts.{e}.{proj}.weight", {"w1", "w3", "w2"},
             "DeepSeek V4's own files: I8 packed e2m1 with .scale E8M0 per 32 (MXFP4), used as "
             "stored"),
        make("deepseek-v4-hf", "model.layers.{L}.ffn.experts.{e}.{proj}.weight", {"w1", "w3", "w2"},
             "DeepSeek V4's names under transformers' model. prefix, as its save_pretrained writes "
             "them: bf16 experts quantized by the layer, or packed e2m1 with .scale as above"),
        make("compressed-tensors", "model.layers.{L}.mlp.experts.{e}.{proj}.weight_packed",
             {"gate_proj", "up_proj", "down_proj"},
             "llm-compressor NVFP4 (weight_scale e4m3, weight_global_scale = 1 / weight_scale_2) or "
             "MXFP4"),
        make("fused", "model.layers.{L}.mlp.experts.{proj}_weight", {"w13", "w2"},
             "vLLM's fused parameters w13_weight [E, 2I, H/2] / w2_weight, used as stored"),
        make("transformers", "model.layers.{L}.mlp.experts.{proj}", {"gate_up_proj", "down_proj"},
             "transformers' fused experts (DeepSeek V4 and other MoE models) bf16 [E, 2I, H] / "
             "[E, H, I], quantized by the layer to its recipe"),
        make("gpt-oss", "model.layers.{L}.mlp.experts.{proj}_blocks", {"gate_up_proj", "down_proj"},
             "gpt-oss MXFP4: recognized and refused (expert biases, its own activation)"),
    };
  }();
  return kLayouts;
}

const KnownLayout* find_layout(std::string_view name) {
  for (const KnownLayout& l : known_layouts())
    if (l.name == name) return &l;
  return nullptr;
}

std::string known_layout_names() {
  std::string s;
  for (const KnownLayout& l : known_layouts()) s += fmt::format("{}{}", s.empty() ? "" : ", ", l.name);
  return s;
}

}  // namespace moe_ep::checkpoint
