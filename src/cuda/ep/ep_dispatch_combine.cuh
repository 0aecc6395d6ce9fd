// Expert-parallel dispatch, combine and reduce over the device workspace (moe_ep/workspace.h,
// "device workspace"), written once over a peer policy so that the same kernels run with NCCL
// LSA pointers and barriers, NCCL GIN puts and signals (cuda/nccl) and the one-GPU simulation
// (cuda/ep/sim_peers.cuh).
//
// A peer policy P provides, on the device:
//   put_row(me, g, peer, dst_offset, src, src_offset, bytes, lane)   a warp: `bytes` from src
//       (this rank's memory; at src_offset of its window when in_window) to the peer's window
//   put_value(me, peer, dst_offset, value)                           one thread: 4 bytes
//   fence_before_arrive()                 thread 0 of a CTA: its puts are ordered before what
//                                         it writes next (the arrival counter)
//   barrier(me, g, sync, phase)           the whole CTA: announce this rank, wait for every
//       peer with a bounded poll (globaltimer, g.timeout_ns); a wait that gives up records
//       rank and phase in `sync` (kEpErrorPeerTimeout) and returns instead of hanging
//
// Each kernel's CTAs split the rank's rows; the last CTA of a rank to finish (a counter in the
// rank's sync region) runs the step's cleanup and the barrier, so one launch is one protocol
// step, with no host synchronization (CUDA-graph capturable).
#pragma once

#include <cstdint>

#include <cuda_bf16.h>

#include "cuda/ep/ep_params.h"
#include "cuda/ptx/sync.cuh"
#include "cuda/tile/bf16x8_sum.cuh"

namespace moe_ep::cuda::ep {

using Region = DeviceWorkspaceRegionId;

template <class Peers>
struct EpLaunch {
  EpHostLaunch host;
  Peers peers;
};

// ---- helpers for policies that address peers through pointers (LSA, simulation) ----

// A warp copies `bytes` (a multiple of 4) from src to dst: 16-byte vectors when both are
// 16-byte aligned and bytes % 16 == 0, else 4-byte words.
__device__ __forceinline__ void warp_copy(std::byte* dst, const std::byte* src, int bytes, int lane) {
  const bool vec16 = ((reinterpret_cast<uintptr_t>(dst) | reinterpret_cast<uintptr_t>(src) |
                       static_cast<uintptr_t>(bytes)) & 15) == 0;
  if (vec16) {
    auto* d = reinterpret_cast<uint4*>(dst);
    const auto* s = reinterpret_cast<const uint4*>(src);
    for (int i = lane; i < bytes / 16; i += 32) d[i] = s[i];
  } else {
    auto* d = reinterpret_cast<uint32_t*>(dst);
    const auto* s = reinterpret_cast<const uint32_t*>(src);
    for (int i = lane; i < bytes / 4; i += 32) d[i] = s[i];
  }
}

__device__ __forceinline__ void record_timeout(EpSync* sync, uint32_t phase, int peer, uint32_t epoch) {
  if (atomicCAS(&sync->timeout_phase, 0u, phase) == 0u) {
    sync->timeout_peer = peer;
    sync->timeout_epoch = epoch;
  }
  atomicOr(&sync->error_flags, kEpErrorPeerTimeout);
  atomicExch(&sync->broken, 1u);
}

// The barrier of pointer policies: rank r stores the new epoch into inbox[r] of every peer
// (release), then polls its own inbox[q] of every peer q (acquire) until q's epoch arrives or
// g.timeout_ns passes. window_of(q) is rank q's window as this rank addresses it.
template <ptx::Scope kScope, class WindowOf>
__device__ void flag_barrier(WindowOf window_of, const EpRankArgs& me, const EpGeometry& g,
                             EpSync* sync, uint32_t phase) {
  __shared__ uint32_t epoch;
  __shared__ uint32_t skip;
  if (threadIdx.x == 0) {
    epoch = sync->epoch + 1;
    skip = *reinterpret_cast<volatile uint32_t*>(&sync->broken);
  }
  __syncthreads();
  const int64_t inbox = g.at(Region::kSync) + kDeviceSyncHeaderBytes;
  if (!skip) {
    for (int q = threadIdx.x; q < g.world_size; q += blockDim.x)
      if (q != me.rank)
        ptx::st_release<kScope>(reinterpret_cast<uint32_t*>(window_of(q) + inbox) + me.rank, epoch);
    const auto* mine = reinterpret_cast<const uint32_t*>(me.window + inbox);
    for (int q = threadIdx.x; q < g.world_size; q += blockDim.x) {
      if (q == me.rank) continue;
      const uint64_t start = ptx::globaltimer_ns();
      while (!ptx::epoch_reached(ptx::ld_acquire<kScope>(mine + q), epoch)) {
        if (ptx::globaltimer_ns() - start > g.timeout_ns) {
          record_timeout(sync, phase, q, epoch);
          break;
        }
        __nanosleep(64);
      }
    }
  }
  __syncthreads();
  if (threadIdx.x == 0) sync->epoch = epoch;
}

// ---- the three steps ----

__device__ __forceinline__ int64_t load_id(const EpRankArgs& me, int64_t slot) {
  return me.ids_are_int64 ? static_cast<const int64_t*>(me.topk_ids)[slot]
                          : static_cast<const int32_t*>(me.topk_ids)[slot];
}

// Every CTA calls this at the end of its share; the rank's last CTA runs cleanup() and the
// barrier (the whole CTA), the others return.
template <class Peers, class Cleanup>
__device__ void finish_step(const Peers& peers, const EpRankArgs& me, const EpGeometry& g,
                            uint32_t phase, Cleanup cleanup) {
  auto* sync = reinterpret_cast<EpSync*>(me.window + g.at(Region::kSync));
  __shared__ uint32_t is_last;
  __syncthreads();
  if (threadIdx.x == 0) {
    peers.fence_before_arrive();
    is_last = atomicAdd(&sync->blocks_done, 1u) == gridDim.x - 1;
    if (is_last) {
      sync->blocks_done = 0;
      __threadfence();
    }
  }
  __syncthreads();
  if (!is_last) return;
  cleanup();
  __syncthreads();
  peers.barrier(me, g, sync, phase);
}

// Step 1. Slot (t, k) of rank `me` with a valid id goes to row me*C + t*K + k of the owner's
// recv_* regions: the quantized row, its scales (and global), the routing weight and the local
// expert id. Then every rank's recv_counts[me] = T*K, and the "dispatch" barrier.
template <class Peers>
__global__ void __launch_bounds__(kEpThreads) ep_dispatch_kernel(const __grid_constant__ EpLaunch<Peers> p) {
  const EpRankArgs& me = p.host.ranks[blockIdx.y];
  const EpGeometry& g = p.host.geo;
  if ((p.host.absent_ranks >> me.rank) & 1u) return;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t num_slots = static_cast<int64_t>(me.num_tokens) * g.top_k;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kEpWarps;
  bool bad_id = false;
  for (int64_t s = static_cast<int64_t>(blockIdx.x) * kEpWarps + warp; s < num_slots; s += stride) {
    const int64_t id = load_id(me, s);
    if (id < 0 || id >= g.num_experts) {
      bad_id |= id < -1 || id >= g.num_experts;
      continue;
    }
    const int dest = static_cast<int>(id / g.num_local_experts);
    const int64_t t = s / g.top_k;
    const int64_t row = static_cast<int64_t>(me.rank) * g.slots_per_source + s;
    const int64_t code_src = me.src_in_window ? g.at(Region::kSendCodes) + t * g.code_bytes : -1;
    const int64_t scale_src = me.src_in_window ? g.at(Region::kSendScales) + t * g.scale_bytes : -1;
    p.peers.put_row(me, g, dest, g.at(Region::kRecvCodes) + row * g.code_bytes,
                    me.src_codes + t * g.code_bytes, code_src, g.code_bytes, lane);
    p.peers.put_row(me, g, dest, g.at(Region::kRecvScales) + row * g.scale_bytes,
                    me.src_scales + t * g.scale_bytes, scale_src, g.scale_bytes, lane);
    if (lane == 0) {
      if (g.has_global) p.peers.put_value(me, dest, g.at(Region::kRecvGlobal) + row * 4, me.src_global[t]);
      p.peers.put_value(me, dest, g.at(Region::kRecvWeight) + row * 4, me.topk_weights[s]);
      p.peers.put_value(me, dest, g.at(Region::kRecvExpert) + row * 4,
                        static_cast<int32_t>(id - static_cast<int64_t>(dest) * g.num_local_experts));
    }
  }
  auto* sync = reinterpret_cast<EpSync*>(me.window + g.at(Region::kSync));
  if (bad_id && lane == 0) atomicOr(&sync->error_flags, kEpErrorIdOutOfRange);
  if (blockIdx.x == 0)
    for (int d = threadIdx.x; d < g.world_size; d += blockDim.x)
      p.peers.put_value(me, d, g.at(Region::kRecvCounts) + 4 * me.rank, static_cast<int32_t>(num_slots));
  finish_step(p.peers, me, g, kPhaseDispatch, [] {});
}

// Step 2 (after the local experts wrote expert_out): every non-empty received row goes back to
// combine[t, k] of its source (row i of source block src is that source's slot i = t*K + k);
// the rows' recv_expert and the rank's recv_counts are reset, then the "combine" barrier.
// Dynamic shared memory: (R + 1) int64 row prefixes.
template <class Peers>
__global__ void __launch_bounds__(kEpThreads) ep_combine_kernel(const __grid_constant__ EpLaunch<Peers> p) {
  const EpRankArgs& me = p.host.ranks[blockIdx.y];
  const EpGeometry& g = p.host.geo;
  if ((p.host.absent_ranks >> me.rank) & 1u) return;
  extern __shared__ int64_t prefix[];  // [R + 1]: rows received from sources < src
  auto* counts = reinterpret_cast<int32_t*>(me.window + g.at(Region::kRecvCounts));
  if (threadIdx.x == 0) {
    prefix[0] = 0;
    for (int src = 0; src < g.world_size; ++src) {
      const int32_t n = counts[src];
      prefix[src + 1] = prefix[src] + (n >= 0 && n <= g.slots_per_source ? n : 0);
    }
  }
  __syncthreads();
  auto* expert = reinterpret_cast<int32_t*>(me.window + g.at(Region::kRecvExpert));
  const int64_t row_bytes = 2 * static_cast<int64_t>(g.hidden);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t total = prefix[g.world_size];
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kEpWarps;
  for (int64_t j = static_cast<int64_t>(blockIdx.x) * kEpWarps + warp; j < total; j += stride) {
    int src = 0;
    while (prefix[src + 1] <= j) ++src;
    const int64_t i = j - prefix[src];
    const int64_t row = static_cast<int64_t>(src) * g.slots_per_source + i;
    if (expert[row] < 0) continue;
    const int64_t out = g.at(Region::kExpertOut) + row * row_bytes;
    p.peers.put_row(me, g, src, g.at(Region::kCombine) + i * row_bytes, me.window + out, out,
                    static_cast<int>(row_bytes), lane);
    __syncwarp();
    if (lane == 0) expert[row] = -1;
  }
  finish_step(p.peers, me, g, kPhaseCombine, [&] {
    for (int src = threadIdx.x; src < g.world_size; src += blockDim.x) counts[src] = 0;
  });
}

// Step 3: y[t] = bf16(sum over valid k, in slot order, of fp32(combine[t, k])), zeros for a
// token without a valid slot (the world-size-1 combine's order and rounding); with y_add (the
// shared expert's output) y[t] = bf16(fp32(that bf16 sum) + fp32(y_add[t])), as the world-size-1
// combine. Thread = 8 consecutive columns of one token.
template <class Peers>
__global__ void __launch_bounds__(kEpThreads) ep_reduce_kernel(const __grid_constant__ EpLaunch<Peers> p) {
  const EpRankArgs& me = p.host.ranks[blockIdx.y];
  const EpGeometry& g = p.host.geo;
  if ((p.host.absent_ranks >> me.rank) & 1u) return;
  const int64_t chunks = g.hidden / 8;
  const int64_t total = static_cast<int64_t>(me.num_tokens) * chunks;
  const auto* combine = reinterpret_cast<const uint16_t*>(me.window + g.at(Region::kCombine));
  for (int64_t item = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; item < total;
       item += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = item / chunks, col = (item % chunks) * 8;
    Bf16x8Sum sum;
    for (int k = 0; k < g.top_k; ++k) {
      const int64_t id = load_id(me, t * g.top_k + k);
      if (id >= 0 && id < g.num_experts) sum.add(combine + (t * g.top_k + k) * g.hidden + col);
    }
    if (me.y_add != nullptr) sum.round_then_add(me.y_add + t * g.hidden + col);
    sum.store(me.y + t * g.hidden + col);
  }
}

// Host side: one launch of `step` (blockIdx.x = CTA of the rank, blockIdx.y = the rank's slot).
template <class Peers>
cudaError_t launch_ep_step(EpStep step, const EpLaunch<Peers>& p, cudaStream_t stream) {
  const dim3 grid(p.host.blocks_per_rank, p.host.num_ranks);
  switch (step) {
    case EpStep::kDispatch:
      ep_dispatch_kernel<Peers><<<grid, kEpThreads, 0, stream>>>(p);
      break;
    case EpStep::kCombine:
      ep_combine_kernel<Peers><<<grid, kEpThreads, (p.host.geo.world_size + 1) * sizeof(int64_t), stream>>>(p);
      break;
    case EpStep::kReduce:
      ep_reduce_kernel<Peers><<<grid, kEpThreads, 0, stream>>>(p);
      break;
  }
  return cudaGetLastError();
}

}  // namespace moe_ep::cuda::ep
