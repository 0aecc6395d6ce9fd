// Routing for world size 1: topk_ids [T, K] -> expert-grouped rows, in one block.
//
// Row order is (expert, token, slot): expert e owns rows [expert_offsets[e], expert_offsets[e+1])
// and within an expert rows follow the flat slot index t*K + k. The order, and so every
// downstream sum, is independent of thread scheduling. Ids outside [-1, E) are treated as -1
// and raise kErrorExpertIdOutOfRange in *error_flags (sticky; never cleared here).
//
// Outputs (all in the layer's workspace, fully rewritten by every launch):
//   expert_offsets [E+1], num_m_tiles [1], tile_expert / tile_row_begin [num_m_tiles]
//   (block_m rows per tile, per expert), row_token / row_weight [rows] (source token and
//   topk weight of each row), slot_row [T*K] (the row of each slot, -1 when skipped).
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

namespace moe_ep::cuda {

struct PermuteParams {
  const void* topk_ids = nullptr;  // [T, K] int32 or int64
  int32_t ids_are_int64 = 0;
  const float* topk_weights = nullptr;  // [T, K]
  int32_t num_tokens = 0, top_k = 0, num_experts = 0;
  int32_t block_m = 0;
  int32_t* expert_offsets = nullptr;
  int32_t* num_m_tiles = nullptr;
  int32_t* tile_expert = nullptr;
  int32_t* tile_row_begin = nullptr;
  int32_t* row_token = nullptr;
  float* row_weight = nullptr;
  int32_t* slot_row = nullptr;
  uint32_t* error_flags = nullptr;
};

// Shared memory of the launch (a function of E); plan time checks it against the device limit.
size_t sm90_permute_shared_bytes(int num_experts);
cudaError_t configure_sm90_permute(int num_experts);
cudaError_t launch_sm90_permute(const PermuteParams& params, cudaStream_t stream);

}  // namespace moe_ep::cuda
