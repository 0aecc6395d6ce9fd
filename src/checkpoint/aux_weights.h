// The non-expert weights of a MoE layer that load_checkpoint_layer reads when present, under the
// layer's block prefix ("model.layers.3.mlp.", "layers.3.ffn."): the router (gate weight,
// score-correction bias, hash table) and the shared expert (bf16, or FP8 / NVFP4 / MXFP4
// dequantized to bf16). Names, layouts and rules: include/moe_ep/checkpoint.h.
#pragma once

#include <cstdint>
#include <string>

#include "moe_ep/checkpoint.h"

namespace moe_ep::checkpoint {

// Each returns the checkpoint bytes it read (0 when the tensors are absent). num_threads is a
// resolved count (>= 1, resolve_num_threads of core/thread_pool.h).
int64_t load_router(const Checkpoint& ck, int64_t layer, const std::string& block_prefix,
                    int64_t num_experts, int64_t hidden, CheckpointLayer& out);
// `load`: false leaves a shared expert the checkpoint has out of the layer, with a note.
int64_t load_shared_expert(const Checkpoint& ck, int64_t layer, const std::string& block_prefix,
                           int64_t hidden, int num_threads, bool load, CheckpointLayer& out);

}  // namespace moe_ep::checkpoint
