// In-place replacement of one local expert's canonical host weights (EPLB moves an expert's
// weights into a physical slot), shared by the single-rank and the multi-rank CPU layers.
#pragma once

#include <cstdint>

#include "core/weight_prep.h"

namespace moe_ep::cpu {

// Converts `one_expert` (a checked pack of one expert, E_loc = 1) for `recipe` and copies it
// over local expert `local_expert` of `weights`. Throws what prepare_host_weights throws, and
// leaves `weights` unchanged then.
void replace_host_expert(Recipe recipe, HostExpertWeights& weights,
                         int64_t local_expert, const WeightPack& one_expert,
                         const ParallelFor& parallel_for = serial_for);

}  // namespace moe_ep::cpu
