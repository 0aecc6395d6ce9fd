// Routing for world size 1: topk_ids [T, K] -> expert-grouped rows (one block, or one block per
// chunk of slots in two launches where the slots are many).
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
  // [sm90_route_chunks(T * K)][E]: rows per expert of each chunk of slots (the chunked form's
  // workspace; null: one block routes every slot).
  int32_t* chunk_rows = nullptr;
};

// Routing of more than kRouteOneBlockMaxSlots slots is chunked: one block per chunk of at least
// kRouteChunkSlots slots (at most kRouteMaxChunks chunks), in two launches (counts, then rows), so
// the scattered row writes come from many SMs.
inline constexpr int kRouteOneBlockMaxSlots = 4096;
inline constexpr int kRouteChunkSlots = 2048;
inline constexpr int kRouteMaxChunks = 128;
int sm90_route_chunk_slots(int64_t num_slots);
int sm90_route_chunks(int64_t num_slots);  // 0: one block
// The most chunks of any slot count up to max_slots (chunk_rows holds this many rows of E).
int sm90_route_chunks_bound(int64_t max_slots);

// Shared memory of the one-block launch (a function of E; the chunked form's is smaller); plan
// time checks it against the device limit.
size_t sm90_permute_shared_bytes(int num_experts);
cudaError_t configure_sm90_permute(int num_experts);
// The one-block form, or the chunked one where chunk_rows is set and the slots are many.
cudaError_t launch_sm90_permute(const PermuteParams& params, cudaStream_t stream);

}  // namespace moe_ep::cuda
