// The routing of sm90_permute.h as the work of one block of kPermuteThreads threads (the routing
// kernel, and block 0 of the quantize-and-route kernel). smem: sm90_permute_shared_bytes(E).
// Calls grid_dependency_wait before it reads the ids and launch_dependents after it.
#pragma once

#include <cstdint>

#include "cuda/kernels/sm90_permute.h"
#include "cuda/ptx/griddep.cuh"
#include "moe_ep/layer.h"

namespace moe_ep::cuda {

inline constexpr int kPermuteThreads = 1024;
inline constexpr int kPermuteWarps = kPermuteThreads / 32;

// Shared memory: count[E], running[E] (int32), then warp_prefix[kWarps][E] (int32): the rows
// that warps before w of the current chunk give expert e, made absolute by the scan.
template <class Id>
__device__ __forceinline__ void permute_block(const PermuteParams& p, int32_t* smem) {
  constexpr int kThreads = kPermuteThreads, kWarps = kPermuteWarps;
  const int E = p.num_experts;
  int32_t* count = smem;
  int32_t* running = smem + E;
  int32_t* warp_prefix = smem + 2 * E;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int num_slots = p.num_tokens * p.top_k;
  const Id* ids = static_cast<const Id*>(p.topk_ids);

  for (int e = tid; e < E; e += kThreads) count[e] = 0;
  for (int i = tid; i < kWarps * E; i += kThreads) warp_prefix[i] = 0;
  ptx::grid_dependency_wait();  // the ids, and every workspace region this kernel writes
  ptx::launch_dependents();
  __syncthreads();

  auto expert_of = [&](int slot) -> int {
    const Id id = ids[slot];
    if (id < -1 || id >= static_cast<Id>(E)) {
      atomicOr(p.error_flags, kErrorExpertIdOutOfRange);
      return -1;
    }
    return static_cast<int>(id);
  };

  // 1. Rows per expert.
  for (int i = tid; i < num_slots; i += kThreads) {
    const int e = expert_of(i);
    if (e >= 0) atomicAdd(&count[e], 1);
  }
  __syncthreads();

  // 2. Exclusive scans of rows and of m-tiles per expert (warp 0), then the tile list.
  if (warp == 0) {
    int row_base = 0, tile_base = 0;
    for (int e0 = 0; e0 < E; e0 += 32) {
      const int e = e0 + lane;
      const int rows = e < E ? count[e] : 0;
      const int tiles = (rows + p.block_m - 1) / p.block_m;
      int row_incl = rows, tile_incl = tiles;
#pragma unroll
      for (int off = 1; off < 32; off *= 2) {
        const int r = __shfl_up_sync(0xFFFFFFFFu, row_incl, off);
        const int t = __shfl_up_sync(0xFFFFFFFFu, tile_incl, off);
        if (lane >= off) {
          row_incl += r;
          tile_incl += t;
        }
      }
      if (e < E) {
        p.expert_offsets[e] = row_base + row_incl - rows;
        running[e] = row_base + row_incl - rows;
        count[e] = tile_base + tile_incl - tiles;  // now: first tile of expert e
      }
      row_base += __shfl_sync(0xFFFFFFFFu, row_incl, 31);
      tile_base += __shfl_sync(0xFFFFFFFFu, tile_incl, 31);
    }
    if (lane == 0) {
      p.expert_offsets[E] = row_base;
      *p.num_m_tiles = tile_base;
    }
  }
  __syncthreads();
  for (int e = tid; e < E; e += kThreads) {
    const int row_begin = running[e];
    const int rows = (e + 1 < E ? running[e + 1] : p.expert_offsets[E]) - row_begin;
    for (int j = 0; j * p.block_m < rows; ++j) {
      p.tile_expert[count[e] + j] = e;
      p.tile_row_begin[count[e] + j] = row_begin + j * p.block_m;
    }
  }

  // 3. Stable scatter, one chunk of kThreads slots at a time (slot order = flat index).
  for (int chunk = 0; chunk < num_slots; chunk += kThreads) {
    const int i = chunk + tid;
    const int e = i < num_slots ? expert_of(i) : -1;
    const unsigned peers = __match_any_sync(0xFFFFFFFFu, e);
    const int rank = __popc(peers & ((1u << lane) - 1));
    if (e >= 0 && rank == 0) warp_prefix[warp * E + e] = __popc(peers);
    __syncthreads();
    for (int x = tid; x < E; x += kThreads) {
      int s = running[x];
      for (int w = 0; w < kWarps; ++w) {
        const int c = warp_prefix[w * E + x];
        if (c != 0) warp_prefix[w * E + x] = s;
        s += c;
      }
      running[x] = s;
    }
    __syncthreads();
    if (e >= 0) {
      const int row = warp_prefix[warp * E + e] + rank;
      p.row_token[row] = i / p.top_k;
      p.row_weight[row] = p.topk_weights[i];
      p.slot_row[i] = row;
    } else if (i < num_slots) {
      p.slot_row[i] = -1;
    }
    __syncwarp();
    if (e >= 0 && rank == 0) warp_prefix[warp * E + e] = 0;  // zero again for the next chunk
    __syncwarp();
  }
}

}  // namespace moe_ep::cuda
