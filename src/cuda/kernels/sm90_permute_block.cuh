// The routing of sm90_permute.h as the work of one block of kPermuteThreads threads (the routing
// kernel, and block 0 of the quantize-and-route kernel). smem: sm90_permute_shared_bytes(E).
// Calls grid_dependency_wait before it reads the ids and launch_dependents after it.
#pragma once

#include <cstdint>
#include <type_traits>

#include "cuda/kernels/sm90_permute.h"
#include "cuda/ptx/griddep.cuh"
#include "moe_ep/layer.h"

namespace moe_ep::cuda {

inline constexpr int kPermuteThreads = 1024;
inline constexpr int kPermuteWarps = kPermuteThreads / 32;

// Warp w owns the contiguous slot segment [w * seg, (w + 1) * seg) (seg a multiple of 32), so the
// warps in order and each warp's steps of 32 slots in order visit the slots in flat order: a
// warp's rows of expert e follow those of the warps before it.
// Shared memory: count[E], running[E] (int32), then warp_rows[kWarps][E] (int32): the rows warp w
// gives expert e, then (after the scan) the rows that warps before w give e, then during the
// scatter that plus the rows w has placed so far.
// Ids are read kPermuteStepsAhead steps of 32 slots at a time, so a warp has that many loads in
// flight instead of one.
inline constexpr int kPermuteStepsAhead = 8;

template <class Id>
__device__ __forceinline__ void permute_block(const PermuteParams& p, int32_t* smem) {
  constexpr int kThreads = kPermuteThreads, kWarps = kPermuteWarps, kAhead = kPermuteStepsAhead;
  const int E = p.num_experts;
  int32_t* count = smem;
  int32_t* running = smem + E;
  int32_t* warp_rows = smem + 2 * E;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int num_slots = p.num_tokens * p.top_k;
  const int seg = (num_slots + 32 * kWarps - 1) / (32 * kWarps) * 32;
  const int seg_begin = min(warp * seg, num_slots), seg_end = min(seg_begin + seg, num_slots);
  const Id* ids = static_cast<const Id*>(p.topk_ids);
  int32_t* my_rows = warp_rows + warp * E;

  for (int i = tid; i < kWarps * E; i += kThreads) warp_rows[i] = 0;
  ptx::grid_dependency_wait();  // the ids, and every workspace region this kernel writes
  ptx::launch_dependents();
  __syncthreads();

  // The expert of one slot's id (-1 past the segment, for -1 and for a bad id, which it flags).
  auto expert_of = [&](Id id) -> int {
    if (id < -1 || id >= static_cast<Id>(E)) {
      atomicOr(p.error_flags, kErrorExpertIdOutOfRange);
      return -1;
    }
    return static_cast<int>(id);
  };
  // f(slot, e, weight) for each slot of this warp's segment in order, kAhead steps of ids (and,
  // with kWeights, topk weights) loaded at once, before any of them is looked at.
  auto for_each_slot = [&](auto with_weights, auto&& f) {
    constexpr bool kWeights = decltype(with_weights)::value;
    for (int base = seg_begin; base < seg_end; base += 32 * kAhead) {
      Id id[kAhead];
      float w[kAhead];
#pragma unroll
      for (int j = 0; j < kAhead; ++j) {
        const int i = base + 32 * j + lane;
        id[j] = i < seg_end ? ids[i] : Id(-1);
        w[j] = kWeights && i < seg_end ? p.topk_weights[i] : 0.0f;
      }
#pragma unroll
      for (int j = 0; j < kAhead; ++j)
        if (base + 32 * j < seg_end) f(base + 32 * j + lane, expert_of(id[j]), w[j]);  // warp-uniform
    }
  };

  // 1. Rows per expert and warp.
  for_each_slot(std::false_type{}, [&](int, int e, float) {
    const unsigned peers = __match_any_sync(0xFFFFFFFFu, e);
    if (e >= 0 && (peers & ((1u << lane) - 1)) == 0) atomicAdd(&my_rows[e], __popc(peers));
  });
  __syncthreads();

  // 2. Per expert, exclusive scan over the warps; then exclusive scans of rows and of m-tiles per
  // expert (warp 0), then the tile list.
  for (int e = tid; e < E; e += kThreads) {
    int s = 0;
    for (int w = 0; w < kWarps; ++w) {
      const int c = warp_rows[w * E + e];
      warp_rows[w * E + e] = s;
      s += c;
    }
    count[e] = s;
  }
  __syncthreads();
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

  // 3. Stable scatter: each warp over its segment again, in order. A step's lanes of one expert
  // read the warp's running row count, then its lowest lane advances it (only this warp touches
  // its row of warp_rows, so no barrier beyond the warp's own).
  for_each_slot(std::true_type{}, [&](int i, int e, float weight) {
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
    } else if (i < seg_end) {
      p.slot_row[i] = -1;
    }
  });
}

}  // namespace moe_ep::cuda
