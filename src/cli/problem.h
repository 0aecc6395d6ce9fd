// The synthetic problem behind `moe_ep run` and `moe_ep bench`: flags shared by both, their
// validation (all of it before any weight is generated), and the generated host data.
#pragma once

#include <cstdint>
#include <string>

#include <CLI/CLI.hpp>

#include "cli/cli_common.h"
#include "moe_ep/backend.h"
#include "moe_ep/desc.h"
#include "moe_ep/kernel_config.h"
#include "moe_ep/weights.h"
#include "testing/presets.h"
#include "testing/synthetic.h"

namespace moe_ep::cli {

// What multiplies into a run's host allocations besides T and the preset (check_host_budget).
struct HostBudgetExtent {
  int64_t ranks = 0;             // --ranks; 0: the planned world size
  int64_t layers = 1;            // --layers: each layer holds its own weight copy
  int64_t redundant_experts = 0; // --eplb-redundant: physical experts beyond the preset's
};

struct ProblemOptions {
  std::string preset = "tiny";
  std::string backend = "mxfp4";   // the recipe (docs/spec.md: a backend name picks a kernel family)
  std::string device = "auto";
  std::string weights = "native";  // native (the backend's own format), mxfp4, nvfp4, bf16
  uint64_t seed = 1;
  int64_t max_tokens_per_rank = 0;  // 0: max(largest T, the preset's default)
  double holes = 0.0;               // fraction of -1 slots in topk_ids
  int threads = 0;                  // KernelOverrides::num_threads; 0: the library's default
  bool exact_accumulation = false;  // NumericsPolicy::exact_accumulation
  bool fast_math = false;           // NumericsPolicy::fast_math
  std::string activation_clamp;     // "" (the preset's), a value >= 0, or "none" (+inf)
  // kernel overrides (KernelOverrides): "" leaves the implementation's choice
  std::string kernel, tile;
  int64_t decode_max_tokens = -1;
  int decode_split_k = 0;   // 0: the implementation's
  bool no_fold = false;
  bool fuse_quantize_route = false, no_fuse_quantize_route = false;  // neither: the implementation's
  bool one_token_layer = false, no_one_token_layer = false;  // neither: the implementation's
  HostBudgetExtent budget;  // set by the subcommand from its own flags, before planning
};

// Registers --preset --backend --device --weights --seed --max-tokens-per-rank --holes --threads
// --exact-accumulation --fast-math --activation-clamp --kernel --tile --decode-max-tokens
// --decode-split-k --no-fold --fuse-quantize-route --no-fuse-quantize-route.
void add_problem_options(CLI::App& cmd, ProblemOptions& options, const std::string& default_preset_note);

// Everything a run needs to know before allocating, validated by the library's own checks.
struct ProblemSetup {
  const testing::Preset* preset = nullptr;
  MoeDesc desc;
  KernelOverrides overrides;
  WeightFormat weight_format = WeightFormat::kMXFP4;
  ResolvedDevice device;
  std::string implementation;  // "cpu", "cuda-sm90"
  int world_size = 1;
};

// Throws moe_ep::Error (kInvalidArgument / kUnsupported) naming the flag and the allowed values.
ProblemSetup plan_problem(const ProblemOptions& options, int64_t max_num_tokens, int world_size);
// The same on a preset of the caller's (a checkpoint layer's shapes); options.preset is not read.
// The preset must outlive the setup. A non-finite activation_clamp means none.
ProblemSetup plan_problem(const testing::Preset& preset, const ProblemOptions& options,
                          int64_t max_num_tokens, int world_size);

// Generates the weights of every expert (num_experts slots), with a progress bar on a TTY.
testing::HostWeights generate_weights(const ProblemSetup& setup, uint64_t seed);

testing::HostInputs generate_inputs(const ProblemSetup& setup, const ProblemOptions& options,
                                    int64_t num_tokens, int64_t stream_idx = 0);

// Bytes of one expert's weights in `format` for shapes H, I (elements + scales + globals).
int64_t expert_weight_bytes(WeightFormat format, int64_t hidden_size, int64_t intermediate_size);

Json problem_json(const ProblemSetup& setup, const ProblemOptions& options);

}  // namespace moe_ep::cli
