// `moe_ep run` across simulated ranks (--ranks, --layers, --eplb-redundant, --router): R
// in-process ranks on the CPU, each with its own tokens, N layers back to back on the process's
// shared symmetric workspace, checked bit for bit against the single-rank CPU layer on the same
// global batch.
#pragma once

#include "cli/run_options.h"

namespace moe_ep::cli {

// True when the options ask for anything beyond one rank and one layer.
bool wants_expert_parallel_run(const RunOptions& options);
int run_expert_parallel(const RunOptions& options);

// GPUs (cli/cmd_run_ep_cuda.cpp): --device cuda with --ranks > 1 or --nccl, or
// --simulate-ranks-on-one-gpu, or a launched rank (--ep-rank).
bool wants_cuda_expert_parallel_run(const RunOptions& options);
int run_cuda_expert_parallel(const RunOptions& options);

// One GPU (cli/cmd_run_layers_cuda.cpp): --device cuda, --ranks 1, with --layers > 1,
// --eplb-redundant or --router.
bool wants_cuda_layers_run(const RunOptions& options);
int run_cuda_layers(const RunOptions& options);

}  // namespace moe_ep::cli
