#include "cli/problem.h"

#include <algorithm>

#include <fmt/format.h>

#include "cli/host_budget.h"
#include "cli/progress.h"
#include "core/check.h"
#include "moe_ep/quant.h"

namespace moe_ep::cli {

void add_problem_options(CLI::App& cmd, ProblemOptions& o, const std::string& default_preset_note) {
  cmd.add_option("--preset", o.preset,
                 fmt::format("model preset: {} ({})", testing::preset_names(), default_preset_note));
  cmd.add_option("--backend", o.backend,
                 fmt::format("kernel family: {}", backend_names()))->capture_default_str();
  cmd.add_option("--device", o.device, "auto, cpu, cuda or cuda:N (auto: cuda:0 when present)")
      ->capture_default_str();
  cmd.add_option("--weights", o.weights,
                 "weight format handed to the layer: native (the backend's own), mxfp4, nvfp4, bf16")
      ->capture_default_str();
  cmd.add_option("--seed", o.seed, "seed of the synthetic weights and inputs")
      ->check(integer_at_least(0))->capture_default_str();
  cmd.add_option("--max-tokens-per-rank", o.max_tokens_per_rank,
                 "FleetParams.max_tokens_per_rank (default: max(T, the preset's default))")
      ->check(integer_at_least(1));
  cmd.add_option("--holes", o.holes, "fraction of topk_ids slots set to -1")
      ->check(number_in_range(0.0, 1.0))->capture_default_str();
  cmd.add_option("--threads", o.threads, "CPU threads of the CPU backend (default: all)")
      ->check(integer_at_least(1));
  cmd.add_flag("--exact-accumulation", o.exact_accumulation,
               "mxfp4 on the GPU: fp32-exact k32 sums (mma.sync) instead of FP8 wgmma at large T");
}

namespace {

WeightFormat parse_weight_format(const std::string& name, const FamilyProperties& family) {
  if (name == "native") return family.name == "nvfp4" ? WeightFormat::kNVFP4 : WeightFormat::kMXFP4;
  if (name == "mxfp4") return WeightFormat::kMXFP4;
  if (name == "nvfp4") return WeightFormat::kNVFP4;
  if (name == "bf16") return WeightFormat::kBF16;
  MOE_EP_FAIL(ErrorCode::kInvalidArgument,
              "--weights '{}' is not a weight format; allowed: native, mxfp4, nvfp4, bf16", name);
}

}  // namespace

ProblemSetup plan_problem(const ProblemOptions& o, int64_t max_num_tokens, int world_size) {
  ProblemSetup s;
  s.preset = &testing::find_preset(o.preset, "--preset");
  const FamilyProperties& family = find_family(o.backend, "--backend");
  s.world_size = world_size;
  s.weight_format = parse_weight_format(o.weights, family);

  s.fleet.num_experts = s.preset->num_experts;
  s.fleet.hidden_size = s.preset->hidden_size;
  s.fleet.max_tokens_per_rank = o.max_tokens_per_rank > 0
                                    ? o.max_tokens_per_rank
                                    : std::max(max_num_tokens, s.preset->max_tokens_per_rank);
  // Checked here rather than by the first forward, so a long weight generation is not wasted.
  MOE_EP_CHECK(max_num_tokens <= s.fleet.max_tokens_per_rank,
               "--tokens {} is above max_tokens_per_rank = {} (--max-tokens-per-rank); expected "
               "T <= max_tokens_per_rank", max_num_tokens, s.fleet.max_tokens_per_rank);
  s.config.family = std::string(family.name);
  s.config.intermediate_size = s.preset->intermediate_size;
  s.config.top_k = s.preset->top_k;
  s.config.activation_clamp = s.preset->activation_clamp;
  s.config.exact_accumulation = o.exact_accumulation;
  validate_config(s.fleet, s.config, world_size);

  bool format_ok = false;
  for (WeightFormat f : family.weight_formats) format_ok |= (f == s.weight_format);
  MOE_EP_CHECK(format_ok, "--weights {} is not accepted by backend '{}'", weight_format_name(s.weight_format),
               family.name);

  s.device = resolve_device(o.device);
  std::string reason;
  const Implementation* impl =
      find_implementation(family, s.device.device, s.device.compute_capability, &reason);
  MOE_EP_CHECK_CODE(impl != nullptr, ErrorCode::kUnsupported, "--device {} with --backend {}: {}",
                    o.device, o.backend, reason);
  s.implementation = std::string(impl->name);
  check_host_budget(s, max_num_tokens);
  return s;
}

testing::HostWeights generate_weights(const ProblemSetup& s, uint64_t seed) {
  testing::WeightSpec spec;
  spec.hidden_size = s.fleet.hidden_size;
  spec.intermediate_size = s.config.intermediate_size;
  spec.format = s.weight_format;
  spec.seed = seed;
  spec.num_slots = s.fleet.num_experts;
  ProgressBar bar(fmt::format("weights {} x{} ({})", s.preset->name, spec.num_slots,
                              weight_format_name(s.weight_format)),
                  spec.num_slots);
  auto w = testing::make_weights(spec, [&](int64_t done, int64_t) { bar.update(done); });
  bar.finish();
  return w;
}

testing::HostInputs generate_inputs(const ProblemSetup& s, const ProblemOptions& o, int64_t num_tokens,
                                    int64_t stream_idx) {
  testing::InputSpec spec;
  spec.num_tokens = num_tokens;
  spec.hidden_size = s.fleet.hidden_size;
  spec.num_experts = s.fleet.num_experts;
  spec.top_k = s.config.top_k;
  spec.hole_fraction = o.holes;
  spec.routed_scaling_factor = s.preset->routed_scaling_factor;
  spec.seed = o.seed;
  spec.stream_idx = stream_idx;
  return testing::make_inputs(spec);
}

int64_t expert_weight_bytes(WeightFormat format, int64_t H, int64_t I) {
  const int64_t elements = 3 * H * I;  // W13 [2I, H] + W2 [H, I]
  switch (format) {
    case WeightFormat::kMXFP4: return elements / 2 + elements / kMxBlock;
    case WeightFormat::kNVFP4: return elements / 2 + elements / kNvBlock + 3 * 4;
    case WeightFormat::kBF16: return elements * 2;
  }
  return 0;
}

Json problem_json(const ProblemSetup& s, const ProblemOptions& o) {
  Json j;
  j["preset"] = s.preset->name;
  j["backend"] = s.config.family;
  j["implementation"] = s.implementation;
  j["device"] = s.device.device.str();
  j["device_name"] = s.device.name;
  if (s.device.compute_capability) j["compute_capability"] = s.device.compute_capability;
  j["weight_format"] = weight_format_name(s.weight_format);
  j["ranks"] = s.world_size;
  j["seed"] = o.seed;
  j["H"] = s.fleet.hidden_size;
  j["I"] = s.config.intermediate_size;
  j["E"] = s.fleet.num_experts;
  j["K"] = s.config.top_k;
  j["activation_clamp"] = json_number(s.config.activation_clamp.value_or(INFINITY));
  j["max_tokens_per_rank"] = s.fleet.max_tokens_per_rank;
  j["hole_fraction"] = o.holes;
  j["exact_accumulation"] = s.config.exact_accumulation;
  return j;
}

}  // namespace moe_ep::cli
