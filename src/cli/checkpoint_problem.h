// `moe_ep run --checkpoint DIR --layer N` (and `bench`): one real MoE layer of a safetensors
// checkpoint in place of the synthetic weights, on the same synthetic activations and with the
// same checks. The hook into run/bench is three calls:
//
//   setup   = checkpoint.given() ? plan_checkpoint_problem(...) : plan_problem(...);
//   weights = checkpoint.given() ? checkpoint_weights(setup)    : generate_weights(...);
//   print_checkpoint_summary(setup) / add_checkpoint_json(setup, json)   (no-ops otherwise)
//
// With --router the checkpoint's own router replaces the synthetic routing:
//   route_with_checkpoint_router(setup, inputs, seed)   (after generate_inputs)
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "cli/cli_common.h"
#include "cli/problem.h"
#include "moe_ep/checkpoint.h"
#include "testing/synthetic.h"

namespace moe_ep::cli {

// How the reader finds a checkpoint's MoE layers: the flags `run`/`bench --checkpoint` and
// `inspect` share.
struct CheckpointLayoutOptions {
  std::string layout = "auto";          // --layout
  std::string tensor_pattern;           // --tensor-pattern
  std::vector<std::string> proj_names;  // --proj-names
  bool shared_expert = true;            // false: --no-shared-expert

  LayerLoadOptions load_options(int num_threads) const;
  // "layout auto" or "layout auto, tensor pattern P": what a "no MoE layer found" names.
  std::string describe() const;
};

// Registers --layout --tensor-pattern --proj-names --no-shared-expert; `prefix` starts each help
// text (e.g. "--checkpoint: ").
void add_checkpoint_layout_options(CLI::App& cmd, CheckpointLayoutOptions& options, const std::string& prefix,
                                   const std::string& group);

struct CheckpointRunOptions {
  std::string path;                     // --checkpoint
  int64_t layer = -1;                   // --layer; -1: the first MoE layer found
  CheckpointLayoutOptions layout;
  int64_t top_k = 0;                    // --top-k; 0: num_experts_per_tok of config.json
  const CLI::App* command = nullptr;    // to tell whether --backend was typed

  bool given() const { return !path.empty(); }
};

// The values of --layout: "auto" and the known layouts' names; the names alone, comma-separated.
std::vector<std::string> checkpoint_layout_choices();
std::string checkpoint_layout_list();

// Registers --checkpoint --layer --layout --tensor-pattern --proj-names --top-k --no-shared-expert.
void add_checkpoint_run_options(CLI::App& cmd, CheckpointRunOptions& options);

// Throws kUnsupported when --checkpoint is combined with what generates its own weights
// (expert parallelism: --ranks, --layers, EPLB, --shared-expert, GPU ranks; and for bench
// --router): a checkpoint runs one layer on one rank. `run --router` is the caller's to allow.
void refuse_checkpoint_expert_parallel(const CheckpointRunOptions& options, bool expert_parallel);

// Throws kInvalidArgument when a checkpoint-only flag (--layer, --layout, --tensor-pattern,
// --proj-names, --top-k, --no-shared-expert) is given without --checkpoint, or --preset with it (the checkpoint's
// config and tensors give the shapes).
void check_checkpoint_flags(const CheckpointRunOptions& options);

// Loads the layer (timed: checkpoint bytes per second) and plans the problem for its shapes,
// with the library's checks of plan_problem. Without --backend the checkpoint's own format
// picks the family (mxfp4 or nvfp4); --weights must be native or the checkpoint's format.
ProblemSetup plan_checkpoint_problem(const ProblemOptions& problem, const CheckpointRunOptions& options,
                                     int64_t max_num_tokens, int world_size);

// The loaded layer's weights for a setup of plan_checkpoint_problem (the loaded copy is
// released).
testing::HostWeights checkpoint_weights(const ProblemSetup& setup);

// The loaded layer of a setup of plan_checkpoint_problem, without a copy (`moe_ep bench --load`):
// its pack (views into the loaded layer), its load time and bytes, and its release.
WeightPack checkpoint_pack(const ProblemSetup& setup);
double checkpoint_load_seconds(const ProblemSetup& setup);
void release_checkpoint(const ProblemSetup& setup);

// `moe_ep run --checkpoint --router`: replaces the generated ids and weights of `inputs` by the
// checkpoint router's (route_deepseek_v4 on the host): logits[t, e] = the fp32 sum over h, in
// order, of x[t, h] * W[e, h]; a hash layer's token ids are drawn uniformly from [0, vocab) with
// `seed`. Throws kUnsupported naming the reason when the router is absent or is not DeepSeek
// V4's (CheckpointRouter::unsupported_reason). Returns a one-line description.
std::string route_with_checkpoint_router(const ProblemSetup& setup, testing::HostInputs& inputs,
                                         uint64_t seed);

// Nothing for setups of plan_problem.
void print_checkpoint_summary(const ProblemSetup& setup);
void add_checkpoint_json(const ProblemSetup& setup, Json& json);

}  // namespace moe_ep::cli
