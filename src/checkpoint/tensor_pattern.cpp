#include "checkpoint/tensor_pattern.h"

#include <array>

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
  return {"model.layers.{L}.mlp.experts.{e}.{proj}.weight", true, {"gate_proj", "up_proj", "down_proj"}};
}

TensorPattern TensorPattern::fused_default() {
  return {"model.layers.{L}.mlp.experts.{proj}_weight", false, {"w13", "w2"}};
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
  MOE_EP_CHECK(ends_with(text, "weight"),
               "{} '{}': expected the name of a weight tensor, ending in 'weight' (its scales are "
               "found as <name>_scale, <name>_scale_2)", option, text);
  TensorPattern p;
  p.text = text;
  p.per_expert = text.find("{e}") != std::string::npos;
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

std::string scale_name(const std::string& weight) { return weight + "_scale"; }
std::string global_scale_name(const std::string& weight) { return weight + "_scale_2"; }
std::string input_scale_name(const std::string& weight) {
  return weight.substr(0, weight.size() - 6) + "input_scale";
}

}  // namespace moe_ep::checkpoint
