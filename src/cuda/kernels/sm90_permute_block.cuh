// The routing of sm90_permute.h, device side: the one-block form (permute_block: the routing
// kernel for few slots, and block 0 of the quantize-and-route kernel; smem
// sm90_permute_shared_bytes(E)) and the two launches of the chunked form for many slots
// (route_chunk_count_block, route_chunk_scatter_block: one block per chunk of slots). Each calls
// grid_dependency_wait before it reads the ids and launch_dependents after it.
//
// Both forms give row order (expert, flat slot index): the warps of a block own contiguous
// segments of its slots (a multiple of 32 each), in warp order, and each warp walks its segment
// in order, 32 slots a step, so a warp's rows of expert e follow those of the warps (and, chunked,
// the blocks) before it. Ids are read kPermuteStepsAhead steps at a time, so a warp has that many
// loads in flight.
#pragma once

#include <cstdint>

#include "cuda/kernels/sm90_permute.h"
#include "cuda/ptx/griddep.cuh"
#include "moe_ep/layer.h"

namespace moe_ep::cuda {

inline constexpr int kPermuteThreads = 1024;
inline constexpr int kPermuteWarps = kPermuteThreads / 32;
inline constexpr int kPermuteStepsAhead = 8;

// One warp's slots [begin, end) of the routing.
template <class Id>
struct RouteWarpSlots {
  const PermuteParams& p;
  int begin, end, lane;

  // The slots of a block's range [first, last) that warp `warp` of kWarps owns.
  template <int kWarps>
  static __device__ __forceinline__ RouteWarpSlots of_block_range(const PermuteParams& p, int first, int last) {
    const int warp = threadIdx.x / 32;
    const int seg = (last - first + 32 * kWarps - 1) / (32 * kWarps) * 32;
    const int begin = min(first + warp * seg, last);
    return {p, begin, min(begin + seg, last), static_cast<int>(threadIdx.x % 32)};
  }

  // The expert of one slot's id: -1 for -1 and for a bad id, which it flags.
  __device__ __forceinline__ int expert_of(Id id) const {
    if (id < -1 || id >= static_cast<Id>(p.num_experts)) {
      atomicOr(p.error_flags, kErrorExpertIdOutOfRange);
      return -1;
    }
    return static_cast<int>(id);
  }

  // f(slot, e, weight) for each slot in order (lanes past `end` with e = -1), kPermuteStepsAhead
  // steps of ids (and, with kWeights, topk weights) loaded before any of them is looked at.
  template <bool kWeights, class F>
  __device__ __forceinline__ void for_each(F&& f) const {
    constexpr int kAhead = kPermuteStepsAhead;
    const Id* ids = static_cast<const Id*>(p.topk_ids);
    for (int base = begin; base < end; base += 32 * kAhead) {
      Id id[kAhead];
      float w[kAhead];
#pragma unroll
      for (int j = 0; j < kAhead; ++j) {
        const int i = base + 32 * j + lane;
        id[j] = i < end ? ids[i] : Id(-1);
        w[j] = kWeights && i < end ? p.topk_weights[i] : 0.0f;
      }
#pragma unroll
      for (int j = 0; j < kAhead; ++j)
        if (base + 32 * j < end) f(base + 32 * j + lane, expert_of(id[j]), w[j]);  // warp-uniform
    }
  }

  // Adds this warp's rows of each expert to rows[e] (a shared array; another warp may add to the
  // same one).
  __device__ __forceinline__ void count(int32_t* rows) const {
    for_each<false>([&](int, int e, float) {
      const unsigned peers = __match_any_sync(0xFFFFFFFFu, e);
      if (e >= 0 && (peers & ((1u << lane) - 1)) == 0) atomicAdd(&rows[e], __popc(peers));
    });
  }

  // Writes each slot's row: running[e] + my_rows[e] + its rank among the earlier slots of e
  // (my_rows: this warp's own row of the scan, advanced as it goes; only this warp touches it).
  __device__ __forceinline__ void scatter(const int32_t* running, int32_t* my_rows) const {
    for_each<true>([&](int i, int e, float weight) {
      const unsigned peers = __match_any_sync(0xFFFFFFFFu, e);
      const int rank = __popc(peers & ((1u << lane) - 1));
      const int before = e >= 0 ? my_rows[e] : 0;
      __syncwarp();
      if (e >= 0 && rank == 0) my_rows[e] = before + __popc(peers);
      __syncwarp();
      if (e >= 0) {
        const int row = running[e] + before + rank;
        p.row_token[row] = i / p.top_k;
        p.row_weight[row] = weight;
        p.slot_row[i] = row;
      } else if (i < end) {
        p.slot_row[i] = -1;
      }
    });
  }
};

// warp_rows [kWarps][E]: per expert, the warps' row counts -> their exclusive scan over the warps;
// the totals into total[e] (when given).
template <int kWarps>
__device__ __forceinline__ void scan_warp_rows(int32_t* warp_rows, int32_t* total, int E) {
  for (int e = threadIdx.x; e < E; e += blockDim.x) {
    int s = 0;
    for (int w = 0; w < kWarps; ++w) {
      const int c = warp_rows[w * E + e];
      warp_rows[w * E + e] = s;
      s += c;
    }
    if (total != nullptr) total[e] = s;
  }
}

// Warp 0 (then a block barrier): from rows[e] (rows per expert), row_begin[e] (the exclusive scan
// of rows) and rows[e] := the first m tile of expert e; with `write`, also expert_offsets, the
// tile count and the tile list.
__device__ __forceinline__ void expert_offsets_and_tiles(const PermuteParams& p, int32_t* rows, int32_t* row_begin,
                                                         bool write) {
  const int E = p.num_experts, lane = threadIdx.x % 32;
  if (threadIdx.x < 32) {
    int row_base = 0, tile_base = 0;
    for (int e0 = 0; e0 < E; e0 += 32) {
      const int e = e0 + lane;
      const int n = e < E ? rows[e] : 0;
      const int tiles = (n + p.block_m - 1) / p.block_m;
      int row_incl = n, tile_incl = tiles;
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
        row_begin[e] = row_base + row_incl - n;
        rows[e] = tile_base + tile_incl - tiles;
        if (write) p.expert_offsets[e] = row_base + row_incl - n;
      }
      row_base += __shfl_sync(0xFFFFFFFFu, row_incl, 31);
      tile_base += __shfl_sync(0xFFFFFFFFu, tile_incl, 31);
    }
    if (write && lane == 0) {
      p.expert_offsets[E] = row_base;
      *p.num_m_tiles = tile_base;
    }
  }
  __syncthreads();
  if (!write) return;
  for (int e = threadIdx.x; e < E; e += blockDim.x) {
    const int begin = row_begin[e];
    const int n = (e + 1 < E ? row_begin[e + 1] : p.expert_offsets[E]) - begin;
    for (int j = 0; j * p.block_m < n; ++j) {
      p.tile_expert[rows[e] + j] = e;
      p.tile_row_begin[rows[e] + j] = begin + j * p.block_m;
    }
  }
}

// ---- one block: every slot ----------------------------------------------------------------------
// Shared memory: rows[E], running[E], warp_rows[kPermuteWarps][E] (int32).
template <class Id>
__device__ __forceinline__ void permute_block(const PermuteParams& p, int32_t* smem) {
  const int E = p.num_experts;
  int32_t* rows = smem;
  int32_t* running = smem + E;
  int32_t* warp_rows = smem + 2 * E;
  const auto slots = RouteWarpSlots<Id>::template of_block_range<kPermuteWarps>(p, 0, p.num_tokens * p.top_k);
  for (int i = threadIdx.x; i < kPermuteWarps * E; i += kPermuteThreads) warp_rows[i] = 0;
  ptx::grid_dependency_wait();  // the ids, and every workspace region this kernel writes
  ptx::launch_dependents();
  __syncthreads();
  slots.count(warp_rows + (threadIdx.x / 32) * E);
  __syncthreads();
  scan_warp_rows<kPermuteWarps>(warp_rows, rows, E);
  __syncthreads();
  expert_offsets_and_tiles(p, rows, running, true);
  slots.scatter(running, warp_rows + (threadIdx.x / 32) * E);
}

// ---- chunked: block c routes slots [c * chunk_slots, (c + 1) * chunk_slots) ----------------------
inline constexpr int kRouteChunkThreads = 256;
inline constexpr int kRouteChunkWarps = kRouteChunkThreads / 32;

// Launch 1: the chunk's rows per expert -> p.chunk_rows[c][E]. Shared memory: rows[E].
template <class Id>
__device__ __forceinline__ void route_chunk_count_block(const PermuteParams& p, int chunk_slots, int32_t* rows) {
  const int E = p.num_experts, c = blockIdx.x, num_slots = p.num_tokens * p.top_k;
  const int first = min(c * chunk_slots, num_slots), last = min(first + chunk_slots, num_slots);
  for (int e = threadIdx.x; e < E; e += kRouteChunkThreads) rows[e] = 0;
  ptx::grid_dependency_wait();
  ptx::launch_dependents();
  __syncthreads();
  RouteWarpSlots<Id>::template of_block_range<kRouteChunkWarps>(p, first, last).count(rows);
  __syncthreads();
  for (int e = threadIdx.x; e < E; e += kRouteChunkThreads) p.chunk_rows[static_cast<int64_t>(c) * E + e] = rows[e];
}

// Launch 2: every chunk's counts -> the experts' totals (block 0 writes the offsets and the tile
// list) and the rows of the chunks before this one; then the chunk's rows as permute_block's.
// Shared memory: rows[E], running[E], before[E], warp_rows[kRouteChunkWarps][E] (int32).
template <class Id>
__device__ __forceinline__ void route_chunk_scatter_block(const PermuteParams& p, int chunk_slots, int32_t* smem) {
  const int E = p.num_experts, c = blockIdx.x, chunks = gridDim.x, num_slots = p.num_tokens * p.top_k;
  const int first = min(c * chunk_slots, num_slots), last = min(first + chunk_slots, num_slots);
  int32_t* rows = smem;
  int32_t* running = smem + E;
  int32_t* before = smem + 2 * E;
  int32_t* warp_rows = smem + 3 * E;
  const auto slots = RouteWarpSlots<Id>::template of_block_range<kRouteChunkWarps>(p, first, last);
  for (int i = threadIdx.x; i < kRouteChunkWarps * E; i += kRouteChunkThreads) warp_rows[i] = 0;
  ptx::grid_dependency_wait();  // the counts of launch 1
  ptx::launch_dependents();
  for (int e = threadIdx.x; e < E; e += kRouteChunkThreads) {
    int total = 0, mine = 0;
    for (int k = 0; k < chunks; ++k) {
      if (k == c) mine = total;
      total += p.chunk_rows[static_cast<int64_t>(k) * E + e];
    }
    rows[e] = total;
    before[e] = mine;
  }
  __syncthreads();
  slots.count(warp_rows + (threadIdx.x / 32) * E);
  __syncthreads();
  scan_warp_rows<kRouteChunkWarps>(warp_rows, nullptr, E);
  expert_offsets_and_tiles(p, rows, running, c == 0);
  __syncthreads();  // the tile list above reads running
  for (int e = threadIdx.x; e < E; e += kRouteChunkThreads) running[e] += before[e];
  __syncthreads();
  slots.scatter(running, warp_rows + (threadIdx.x / 32) * E);
}

}  // namespace moe_ep::cuda
