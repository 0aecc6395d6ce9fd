// The non-expert weights of a MoE layer that load_checkpoint_layer reads when present: the
// router (gate weight, score-correction bias) and the shared expert (bf16, or FP8 e4m3 with
// fp32 block scales, dequantized to bf16). Names and layouts: include/moe_ep/checkpoint.h.
#pragma once

#include <cstdint>

#include "moe_ep/checkpoint.h"

namespace moe_ep::checkpoint {

// Each returns the checkpoint bytes it read (0 when the tensors are absent). num_threads is a
// resolved count (>= 1, resolve_num_threads of core/thread_pool.h).
int64_t load_router(const Checkpoint& ck, int64_t layer, int64_t num_experts, int64_t hidden,
                    CheckpointLayer& out);
int64_t load_shared_expert(const Checkpoint& ck, int64_t layer, int64_t hidden, int num_threads,
                           CheckpointLayer& out);

}  // namespace moe_ep::checkpoint
