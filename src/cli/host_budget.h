// The host memory a synthetic run will need, checked before anything is generated.
#pragma once

#include <cstdint>

#include "cli/problem.h"

namespace moe_ep::cli {

// Throws kUnsupported when the inputs, outputs and weights of a run of `tokens_per_rank` tokens
// on setup.world_size ranks (and `extent`'s layers and redundant experts) do not fit in the
// available host memory; the message names the bytes, the available figure and the flags
// (--tokens, --ranks, --layers, --eplb-redundant, --preset) that drive the size.
void check_host_budget(const ProblemSetup& setup, int64_t tokens_per_rank,
                       const HostBudgetExtent& extent);

}  // namespace moe_ep::cli
