// `moe_ep bench --load`: the time to make a layer ready, from weights in host memory (generated
// first, untimed) or, with --checkpoint, from the checkpoint file (read + prepare, end to end),
// in bytes of expert weights per second.
#pragma once

#include "cli/checkpoint_problem.h"
#include "cli/problem.h"

namespace moe_ep::cli {

int bench_load(const ProblemOptions& problem, const CheckpointRunOptions& checkpoint, int repeats,
               bool json);

}  // namespace moe_ep::cli
