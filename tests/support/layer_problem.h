// Test problems for the layer: parameters, seeded random weights and inputs, running a layer
// with a NaN-poisoned output, and the float64 relative-error metric.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "moe_ep/layer.h"
#include "support/host_tensor.h"

namespace moe_ep::testsupport {

struct Problem {
  Recipe recipe = Recipe::kMxfp4;
  int64_t num_experts = 16, hidden = 256, intermediate = 128, top_k = 4, max_tokens = 64;
  std::optional<float> clamp = 10.0f;
  bool quantize_input = true;
  // Tests default to the exact mxfp4 path (bitwise comparisons with the CPU layer); the wgmma
  // tests take the default product path (NumericsPolicy::exact_accumulation = false).
  bool exact_accumulation = true;
  int64_t shared_intermediate = 0;  // Is of the shared expert; 0 = none
  KernelOverrides overrides;  // kernel choices the test pins (none by default)

  FleetParams fleet() const { return {num_experts, max_tokens, hidden}; }
  MoeDesc desc() const;
  const RecipeTraits& traits() const { return recipe_traits(recipe); }
  std::string_view name() const { return recipe_name(recipe); }
  std::string str() const;  // every parameter, for failure messages
};

// The tiny preset (docs/spec.md §10): H=256, I=128, E=16, K=4, clamp 10.
Problem tiny_problem(Recipe recipe);
Problem tiny_problem(const std::string& recipe);  // by name ("mxfp4", "nvfp4")

struct WeightSet {
  WeightFormat format = WeightFormat::kMXFP4;
  HostTensor<uint8_t> w13, w13_scale, w2, w2_scale;  // mxfp4 / nvfp4
  HostTensor<uint16_t> w13_bf16, w2_bf16;            // bf16
  HostTensor<float> w13_global, w2_global;           // nvfp4
  HostTensor<uint16_t> shared_w13, shared_w2;        // bf16, when p.shared_intermediate > 0
  WeightPack pack() const;
};

struct WeightOptions {
  // nvfp4: odd experts get an up weight_scale_2 twice the gate's (block scales halved where
  // that is exact), so the layer must fold the ratio.
  bool distinct_gate_up_global = false;
};

// Gaussian weights (expert e's W13 scaled by 2^(e % 4) so that the clamp acts), quantized with
// the library's quantizers for the fp4 formats; the shared expert's (drawn after the routed ones,
// which stay those of the same seed without it) with W13 at 4x the routed scale.
WeightSet random_weights(const Problem& p, WeightFormat format, uint64_t seed,
                         const WeightOptions& options = {});
// The routed experts of w alone (its shared expert dropped).
WeightSet without_shared_expert(const WeightSet& w);

struct Inputs {
  int64_t tokens = 0;
  HostTensor<uint16_t> x;          // bf16 [T, H]
  HostTensor<uint8_t> a, a_scale;  // caller-quantized activations (quantize_input = false)
  HostTensor<float> a_global;
  bool ids_i32 = false;
  HostTensor<int64_t> ids64;
  HostTensor<int32_t> ids32;
  HostTensor<float> weights;

  int64_t id(int64_t t, int64_t k) const;
  void set_id(int64_t t, int64_t k, int64_t id);
  // Tensors for forward with y; x or a/a_scale/a_global by quantize_input.
  ForwardArgs args(const HostTensor<uint16_t>& y, bool quantize_input) const;
};

struct InputOptions {
  double skip_fraction = 0.0;  // share of slots set to -1
  bool ids_i32 = false;
};

// x ~ N(0, 1) with per-row scales 2^((t % 5) - 2), K distinct random experts per token,
// weights uniform in [0.1, 1).
Inputs random_inputs(const Problem& p, int64_t tokens, uint64_t seed,
                     const InputOptions& options = {});

// Fills a / a_scale / a_global from x with the library's quantizers (what a caller that
// quantizes itself would pass).
void quantize_inputs_for_caller(const Problem& p, Inputs& in);

std::shared_ptr<Runtime> cpu_runtime();
std::unique_ptr<Layer> make_layer(const Problem& p, const WeightSet& w);

inline constexpr uint16_t kBf16NaN = 0x7FC0;
HostTensor<uint16_t> poisoned_output(const Problem& p, int64_t tokens);
// Poisons y with NaN, runs forward, returns y.
HostTensor<uint16_t> run_forward(Layer& layer, const Problem& p, const Inputs& in);

// ||y - ref|| / ||ref|| in float64 (the max abs difference when ref is all zeros); NaN in y
// gives +inf.
double relative_error(const HostTensor<uint16_t>& y, const std::vector<double>& ref);
double to_double_bf16(uint16_t bits);
// Share of elements of y equal to ref (for a ref that rounds to bf16 like the recipe).
double exact_match_fraction(const HostTensor<uint16_t>& y, const std::vector<double>& ref);

}  // namespace moe_ep::testsupport
