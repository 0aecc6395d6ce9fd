#include <algorithm>
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

// Optional keys read by some layouts only: a value of the wrong kind is recorded, not refused.
class Lenient {
 public:
  Lenient(ModelConfig& c, std::string prefix) : c_(c), prefix_(std::move(prefix)) {}

  void ignore(const char* key, const Json& v, std::string reason) {
    c_.ignored.push_back({prefix_ + key, checkpoint::json_excerpt(v), std::move(reason)});
  }
  std::optional<std::string> string(const Json& j, const char* key, const char* read_by) {
    const Json* v = find_key(j, key);
    if (!v) return std::nullopt;
    if (v->is_string()) return v->get<std::string>();
    ignore(key, *v, fmt::format("expected a string; read only by {}", read_by));
    return std::nullopt;
  }
  std::optional<int64_t> integer(const Json& j, const char* key, int64_t min, const char* read_by) {
    const Json* v = find_key(j, key);
    if (!v) return std::nullopt;
    if (v->is_number_integer() && v->get<int64_t>() >= min) return v->get<int64_t>();
    ignore(key, *v, fmt::format("expected an integer >= {}; read only by {}", min, read_by));
    return std::nullopt;
  }

 private:
  ModelConfig& c_;
  std::string prefix_;
};

constexpr const char* kRouterReaders = "the router (moe_ep run --router, load_layer's router)";

}  // namespace

const ModelConfig::IgnoredKey* ModelConfig::ignored_key(std::string_view key) const {
  for (const IgnoredKey& k : ignored)
    if (k.key == key) return &k;
  return nullptr;
}

bool ModelConfig::is_moe_layer(int64_t layer) const {
  return layer >= first_k_dense_replace && (num_hidden_layers == 0 || layer < num_hidden_layers);
}

std::optional<bool> ModelConfig::is_hash_layer(int64_t layer) const {
  if (!mlp_layer_types.empty()) {
    if (layer < 0 || layer >= static_cast<int64_t>(mlp_layer_types.size())) return std::nullopt;
    return mlp_layer_types[static_cast<size_t>(layer)] == "hash_moe";
  }
  if (num_hash_layers) return layer < *num_hash_layers;
  return std::nullopt;
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
  c.n_routed_experts = *int_key(j, source, {"n_routed_experts", "num_local_experts", "num_experts"}, 1, true);
  c.num_experts_per_tok = *int_key(j, source, {"num_experts_per_tok"}, 1, true);
  MOE_EP_CHECK(c.num_experts_per_tok <= c.n_routed_experts,
               "{}: num_experts_per_tok = {} is above the {} routed experts", source,
               c.num_experts_per_tok, c.n_routed_experts);
  c.num_hidden_layers = int_key(j, source, {"num_hidden_layers"}, 1, false).value_or(0);
  c.first_k_dense_replace = int_key(j, source, {"first_k_dense_replace"}, 0, false).value_or(0);
  c.routed_scaling_factor = positive_float_key(j, source, "routed_scaling_factor", kMaxRoutedScalingFactor).value_or(1.0f);
  c.swiglu_limit = positive_float_key(j, source, "swiglu_limit");

  Lenient top(c, "");
  c.n_shared_experts = top.integer(j, "n_shared_experts", 0, "inspect's summary").value_or(0);
  c.scoring_func = top.string(j, "scoring_func", kRouterReaders).value_or("");
  c.num_hash_layers = top.integer(j, "num_hash_layers", 0, kRouterReaders);
  c.vocab_size = top.integer(j, "vocab_size", 1, kRouterReaders).value_or(0);
  if (const Json* types = find_key(j, "mlp_layer_types")) {
    const bool strings = types->is_array() &&
                         std::all_of(types->begin(), types->end(), [](const Json& t) { return t.is_string(); });
    if (strings) {
      for (const Json& t : *types) c.mlp_layer_types.push_back(t.get<std::string>());
    } else {
      top.ignore("mlp_layer_types", *types,
                 fmt::format("expected a list of \"hash_moe\" / \"moe\"; read only by {}", kRouterReaders));
    }
  }

  if (const Json* q = find_key(j, "quantization_config")) {
    if (!q->is_object()) {
      top.ignore("quantization_config", *q,
                 "expected an object; read only for FP8 shared-expert block sizes and a note on the "
                 "expert format");
      return c;
    }
    Lenient quant(c, "quantization_config.");
    c.quant_method = quant.string(*q, "quant_method", "a note on the expert format").value_or("");
    c.quant_algo = quant.string(*q, "quant_algo", "a note on the expert format").value_or("");
    if (const Json* block = find_key(*q, "weight_block_size")) {
      const auto dim = [](const Json& v) { return v.is_number_integer() && v.get<int64_t>() >= 1; };
      if (block->is_array() && block->size() == 2 && dim((*block)[0]) && dim((*block)[1])) {
        c.fp8_block_n = (*block)[0].get<int64_t>();
        c.fp8_block_k = (*block)[1].get<int64_t>();
        c.fp8_block_given = true;
      } else {
        quant.ignore("weight_block_size", *block,
                     "expected [block_n, block_k] (integers >= 1); read only by FP8 shared experts "
                     "with one fp32 scale per block");
      }
    }
  }
  return c;
}

}  // namespace moe_ep
