#include <cmath>
#include <limits>

#include <nlohmann/json.hpp>

#include "checkpoint/json_excerpt.h"
#include "core/check.h"
#include "moe_ep/checkpoint.h"

namespace moe_ep {
namespace {

using Json = nlohmann::json;

const Json* find_key(const Json& j, const char* key) {
  const auto it = j.find(key);
  return it == j.end() || it->is_null() ? nullptr : &*it;
}

int64_t int_value(const Json& v, const std::string& source, const char* key, int64_t min) {
  if (!v.is_number_integer() || v.get<int64_t>() < min)
    MOE_EP_FAIL(ErrorCode::kInvalidArgument, "{}: key '{}' is {}; expected an integer >= {}",
                source, key, checkpoint::json_excerpt(v), min);
  return v.get<int64_t>();
}

// The first of `keys` present; required ones fail naming all of them.
std::optional<int64_t> int_key(const Json& j, const std::string& source,
                               std::initializer_list<const char*> keys, int64_t min, bool required) {
  for (const char* key : keys)
    if (const Json* v = find_key(j, key)) return int_value(*v, source, key, min);
  if (required) {
    std::string names;
    for (const char* key : keys) names += fmt::format("{}'{}'", names.empty() ? "" : " or ", key);
    MOE_EP_FAIL(ErrorCode::kInvalidArgument, "{}: key {} is missing; expected an integer >= {}",
                source, names, min);
  }
  return std::nullopt;
}

// A number in (0, max]; `max` at most FLT_MAX, so the float the library keeps is finite too.
std::optional<float> positive_float_key(const Json& j, const std::string& source, const char* key,
                                        double max = std::numeric_limits<float>::max()) {
  const Json* v = find_key(j, key);
  if (!v) return std::nullopt;
  if (!v->is_number() || !std::isfinite(v->get<double>()) || v->get<double>() <= 0 ||
      v->get<double>() > max)
    MOE_EP_FAIL(ErrorCode::kInvalidArgument, "{}: key '{}' is {}; expected a number in (0, {:g}]",
                source, key, checkpoint::json_excerpt(*v), max);
  return static_cast<float>(v->get<double>());
}

// The router's weights sum to routed_scaling_factor per token and multiply the experts' bf16
// outputs: models use 1 to 2.5, and a factor far above that overflows y (NaN, a failed check)
// rather than meaning anything.
constexpr double kMaxRoutedScalingFactor = 1024.0;

std::string string_key(const Json& j, const std::string& source, const char* key) {
  const Json* v = find_key(j, key);
  if (!v) return "";
  if (!v->is_string())
    MOE_EP_FAIL(ErrorCode::kInvalidArgument, "{}: key '{}' is {}; expected a string", source, key,
                checkpoint::json_excerpt(*v));
  return v->get<std::string>();
}

}  // namespace

bool ModelConfig::is_moe_layer(int64_t layer) const {
  return layer >= first_k_dense_replace && (num_hidden_layers == 0 || layer < num_hidden_layers);
}

ModelConfig parse_model_config(std::string_view text, const std::string& source) {
  Json j;
  try {
    j = Json::parse(text.begin(), text.end());
  } catch (const Json::exception& e) {
    MOE_EP_FAIL(ErrorCode::kInvalidArgument, "{}: not valid JSON ({})", source, e.what());
  }
  MOE_EP_CHECK(j.is_object(), "{}: is {}; expected a JSON object", source, j.type_name());
  ModelConfig c;
  c.source = source;
  c.model_type = string_key(j, source, "model_type");
  c.hidden_size = *int_key(j, source, {"hidden_size"}, 1, true);
  c.moe_intermediate_size = *int_key(j, source, {"moe_intermediate_size", "intermediate_size"}, 1, true);
  c.n_routed_experts = *int_key(j, source, {"n_routed_experts", "num_local_experts"}, 1, true);
  c.num_experts_per_tok = *int_key(j, source, {"num_experts_per_tok"}, 1, true);
  MOE_EP_CHECK(c.num_experts_per_tok <= c.n_routed_experts,
               "{}: num_experts_per_tok = {} is above the {} routed experts", source,
               c.num_experts_per_tok, c.n_routed_experts);
  c.num_hidden_layers = int_key(j, source, {"num_hidden_layers"}, 1, false).value_or(0);
  c.first_k_dense_replace = int_key(j, source, {"first_k_dense_replace"}, 0, false).value_or(0);
  c.n_shared_experts = int_key(j, source, {"n_shared_experts"}, 0, false).value_or(0);
  c.routed_scaling_factor = positive_float_key(j, source, "routed_scaling_factor", kMaxRoutedScalingFactor).value_or(1.0f);
  c.swiglu_limit = positive_float_key(j, source, "swiglu_limit");

  if (const Json* q = find_key(j, "quantization_config")) {
    const std::string qsource = source + ": quantization_config";
    MOE_EP_CHECK(q->is_object(), "{} is {}; expected an object", qsource, checkpoint::json_excerpt(*q));
    c.quant_method = string_key(*q, qsource, "quant_method");
    c.quant_algo = string_key(*q, qsource, "quant_algo");
    if (const Json* block = find_key(*q, "weight_block_size")) {
      MOE_EP_CHECK(block->is_array() && block->size() == 2,
                   "{}: key 'weight_block_size' is {}; expected [block_n, block_k]", qsource,
                   checkpoint::json_excerpt(*block));
      c.fp8_block_n = int_value((*block)[0], qsource, "weight_block_size", 1);
      c.fp8_block_k = int_value((*block)[1], qsource, "weight_block_size", 1);
    }
  }
  return c;
}

}  // namespace moe_ep
