#include "cli/problem.h"

#include <algorithm>
#include <cmath>
#include <optional>

#include <fmt/format.h>

#include "cli/host_budget.h"
#include "cli/progress.h"
#include "core/check.h"
#include "moe_ep/quant.h"

namespace moe_ep::cli {

void add_problem_options(CLI::App& cmd, ProblemOptions& o, const std::string& default_preset_note) {
  cmd.add_option("--preset", o.preset,
                 fmt::format("model preset: {} ({})", testing::preset_names(), default_preset_note));
  cmd.add_option("--backend", o.backend, fmt::format("recipe (kernel family): {}", recipe_names()))
      ->capture_default_str();
  cmd.add_option("--device", o.device, "auto, cpu, cuda or cuda:N (auto: cuda:0 when present)")
      ->capture_default_str();
  cmd.add_option("--weights", o.weights,
                 "weight format handed to the layer: native (the recipe's own), mxfp4, nvfp4, bf16")
      ->capture_default_str();
  cmd.add_option("--seed", o.seed, "seed of the synthetic weights and inputs")
      ->check(integer_at_least(0))->capture_default_str();
  cmd.add_option("--max-tokens-per-rank", o.max_tokens_per_rank,
                 "FleetParams.max_tokens_per_rank (default: max(T, the preset's default))")
      ->check(integer_at_least(1));
  cmd.add_option("--holes", o.holes, "fraction of topk_ids slots set to -1")
      ->check(number_in_range(0.0, 1.0))->capture_default_str();
  cmd.add_option("--activation-clamp", o.activation_clamp,
                 "SwiGLU clamp c (a value >= 0, or none for +inf; default: the preset's)")
      ->check(decimal_number_or({"none"}));
  cmd.add_flag("--exact-accumulation", o.exact_accumulation,
               "mxfp4 on the GPU: fp32-exact k32 sums (mma.sync) instead of FP8 wgmma at large T");
  cmd.add_flag("--fast-math", o.fast_math, "GPU: approximate exp / reciprocal in SiLU");
  auto* knobs = "Kernel overrides (default: the implementation selects; `moe_ep run --json` prints it)";
  cmd.add_option("--threads", o.threads, "CPU threads of the CPU backend (default: all)")
      ->check(integer_at_least(1))->group(knobs);
  cmd.add_option("--kernel", o.kernel, "GEMM kernel family: auto, decode, mma, wgmma, wgmma-rs, decode-wgmma (docs/kernels.md: "
                 "the forms of each family per recipe)")
      ->check(non_empty())->group(knobs);
  cmd.add_option("--tile", o.tile, "with --kernel wgmma / wgmma-rs: that family's output tile MxN (SM90: mxfp4 "
                 "64x256; nvfp4 wgmma 128x128, 64x256)")
      ->check(non_empty())->group(knobs);
  cmd.add_option("--decode-max-tokens", o.decode_max_tokens, "auto: decode GEMMs up to this T")
      ->check(integer_at_least(0))->group(knobs);
  cmd.add_option("--decode-split-k", o.decode_split_k,
                 "decode GEMMs: K in 1 or 2 parts per block (2: two warps walk each row group's K)")
      ->check(integer_at_least(1))->group(knobs);
  cmd.add_flag("--no-fold", o.no_fold, "mxfp4 on the GPU: keep E8M0 block scales (no FP8 folding)")
      ->group(knobs);
  auto* fuse = cmd.add_flag("--fuse-quantize-route", o.fuse_quantize_route,
                            "GPU: the quantization of x and the routing in one launch (default: auto)")
                   ->group(knobs);
  cmd.add_flag("--no-fuse-quantize-route", o.no_fuse_quantize_route,
               "GPU: the quantization of x and the routing in two launches")
      ->group(knobs)
      ->excludes(fuse);
  auto* one_token = cmd.add_flag("--one-token-layer", o.one_token_layer,
                                 "SM90 mxfp4: at T = 1 the whole layer in two launches (default: auto)")
                        ->group(knobs);
  cmd.add_flag("--no-one-token-layer", o.no_one_token_layer, "SM90 mxfp4: T = 1 on the decode chain")
      ->group(knobs)
      ->excludes(one_token);
}

namespace {

WeightFormat weight_format_of(const std::string& name, const RecipeTraits& recipe) {
  if (name == "native") return recipe.native_format;
  return ::moe_ep::parse_weight_format(name, "--weights");
}

std::optional<float> parse_clamp(const std::string& text, std::optional<float> preset_clamp) {
  if (text.empty()) return preset_clamp;
  if (text == "none") return std::nullopt;
  float c = 0.0f;
  size_t used = 0;
  bool ok = true;
  try {
    c = std::stof(text, &used);
  } catch (const std::exception&) {
    ok = false;
  }
  MOE_EP_CHECK(ok && used == text.size(), "--activation-clamp '{}' is not a number; expected a "
               "finite value >= 0 or none", text);
  return c;  // range checked by validate_desc
}

KernelOverrides parse_overrides(const ProblemOptions& o) {
  KernelOverrides k;
  k.num_threads = o.threads;
  if (!o.kernel.empty()) k.gemm = parse_gemm_kernel(o.kernel, "--kernel");
  if (!o.tile.empty()) k.tile = parse_tile_shape(o.tile, "--tile");
  if (o.decode_max_tokens >= 0) k.decode_max_tokens = o.decode_max_tokens;
  if (o.decode_split_k > 0) k.decode_split_k = o.decode_split_k;
  if (o.no_fold) k.fold_fp8 = false;
  if (o.fuse_quantize_route || o.no_fuse_quantize_route) k.fuse_quantize_route = o.fuse_quantize_route;
  if (o.one_token_layer || o.no_one_token_layer) k.one_token_layer = o.one_token_layer;
  return k;
}

}  // namespace

ProblemSetup plan_problem(const ProblemOptions& o, int64_t max_num_tokens, int world_size) {
  return plan_problem(testing::find_preset(o.preset, "--preset"), o, max_num_tokens, world_size);
}

ProblemSetup plan_problem(const testing::Preset& preset, const ProblemOptions& o,
                          int64_t max_num_tokens, int world_size) {
  ProblemSetup s;
  s.preset = &preset;
  const Recipe recipe = parse_recipe(o.backend, "--backend");
  const RecipeTraits& traits = recipe_traits(recipe);
  s.world_size = world_size;
  s.weight_format = weight_format_of(o.weights, traits);

  MoeDesc& d = s.desc;
  d.recipe = recipe;
  d.fleet.num_experts = s.preset->num_experts;
  d.fleet.hidden_size = s.preset->hidden_size;
  d.fleet.max_tokens_per_rank = o.max_tokens_per_rank > 0
                                    ? o.max_tokens_per_rank
                                    : std::max(max_num_tokens, s.preset->max_tokens_per_rank);
  // Checked here rather than by the first forward, so a long weight generation is not wasted.
  MOE_EP_CHECK(max_num_tokens <= d.fleet.max_tokens_per_rank,
               "--tokens {} is above max_tokens_per_rank = {} (--max-tokens-per-rank); expected "
               "T <= max_tokens_per_rank", max_num_tokens, d.fleet.max_tokens_per_rank);
  d.intermediate_size = s.preset->intermediate_size;
  d.top_k = s.preset->top_k;
  d.activation_clamp = parse_clamp(o.activation_clamp, std::isfinite(s.preset->activation_clamp)
                                                          ? std::optional<float>(s.preset->activation_clamp)
                                                          : std::nullopt);
  d.numerics.exact_accumulation = o.exact_accumulation;
  d.numerics.fast_math = o.fast_math;
  try {
    validate_desc(d, world_size);
  } catch (const Error& e) {  // name the flag where one drives the field
    if (e.parameter() == "activation_clamp")
      MOE_EP_FAIL(ErrorCode::kInvalidArgument, "--activation-clamp {}: {}", o.activation_clamp, e.message());
    throw;
  }
  s.overrides = parse_overrides(o);

  MOE_EP_CHECK(traits.accepts(s.weight_format), "--weights {} is not accepted by recipe '{}'",
               weight_format_name(s.weight_format), traits.name);

  s.device = resolve_device(o.device);
  const std::string reason = can_implement(d, world_size, s.device.device, s.weight_format);
  MOE_EP_CHECK_CODE(reason.empty(), ErrorCode::kUnsupported, "--device {} with --backend {}: {}",
                    o.device, o.backend, reason);
  s.implementation = std::string(select_implementation(d, world_size, s.device.device, s.weight_format));
  check_host_budget(s, max_num_tokens, o.budget);
  return s;
}

testing::HostWeights generate_weights(const ProblemSetup& s, uint64_t seed) {
  testing::WeightSpec spec;
  spec.hidden_size = s.desc.fleet.hidden_size;
  spec.intermediate_size = s.desc.intermediate_size;
  spec.format = s.weight_format;
  spec.seed = seed;
  spec.num_slots = s.desc.fleet.num_experts;
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
  spec.hidden_size = s.desc.fleet.hidden_size;
  spec.num_experts = s.desc.fleet.num_experts;
  spec.top_k = s.desc.top_k;
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
  j["backend"] = s.desc.traits().name;
  j["implementation"] = s.implementation;
  j["device"] = s.device.device.str();
  j["device_name"] = s.device.name;
  if (s.device.compute_capability) j["compute_capability"] = s.device.compute_capability;
  j["weight_format"] = weight_format_name(s.weight_format);
  j["ranks"] = s.world_size;
  j["seed"] = o.seed;
  j["H"] = s.desc.fleet.hidden_size;
  j["I"] = s.desc.intermediate_size;
  j["E"] = s.desc.fleet.num_experts;
  j["K"] = s.desc.top_k;
  j["Is"] = s.desc.shared_intermediate_size;  // the shared expert's; 0: none
  j["activation_clamp"] = json_number(s.desc.activation_clamp.value_or(INFINITY));
  j["max_tokens_per_rank"] = s.desc.fleet.max_tokens_per_rank;
  j["hole_fraction"] = o.holes;
  j["exact_accumulation"] = s.desc.numerics.exact_accumulation;
  j["fast_math"] = s.desc.numerics.fast_math;
  j["overrides"] = s.overrides.str();
  return j;
}

}  // namespace moe_ep::cli
