// The frame of the register-operand GEMMs (sm90_rs16_mainloop.cuh, sm90_rs16_wide_mainloop.cuh,
// sm90_mxfp4_rs_fp8_mainloop.cuh): the shared memory after their stage ring and its accessors,
// the producer's copies of a tile's token rows into a stage, and the split of a block into the
// producer warpgroup and the consumers.
#pragma once

#include <cstdint>

#include "cuda/kernels/sm90_grouped_gemm.h"
#include "cuda/kernels/sm90_persistent_tiles.cuh"
#include "cuda/ptx/cp_async.cuh"
#include "cuda/ptx/wgmma.cuh"

namespace moe_ep::cuda {

// The shared memory after kStages stages of kStageBytes (base aligned to 1024 bytes):
//   amax   [kConsumers][kBlockM][4 warps] fp32, the epilogues' per-token area
//   own    kOwnBytes of the mainloop's own (rs-fp8: its decode table)
//   full[kStages], empty[kStages]  mbarriers (full: 128 producer arrivals; empty: one per
//                                  consumer warp)
// and the slack that align_smem_1024 may skip.
template <int kStages, int kStageBytes, int kConsumers, int kBlockM, int kOwnBytes = 0>
struct RsRingLayout {
  static constexpr int kAmaxBytes = kConsumers * 4 * kBlockM * 4;
  static constexpr int kOffAmax = kStages * kStageBytes;
  static constexpr int kOffOwn = kOffAmax + kAmaxBytes;
  static constexpr int kOffBarriers = kOffOwn + kOwnBytes;
  static constexpr int kSharedBytes = kOffBarriers + 2 * kStages * 8 + 1024;
  static_assert(kSharedBytes <= 232448, "H100/H200 allow 227 KiB of shared memory per block");
};

// The ring's shared memory of a configuration Cfg (its kStages, kStageBytes, kBlockM and
// Layout = RsRingLayout); stage s starts with the tile's token rows (the wgmma B operand).
template <class Cfg>
struct RsRingSmem {
  uint8_t* base;
  __device__ __forceinline__ uint8_t* a(int s) const { return base + s * Cfg::kStageBytes; }
  __device__ __forceinline__ float* amax(int wg) const {
    return reinterpret_cast<float*>(base + Cfg::Layout::kOffAmax) + wg * 4 * Cfg::kBlockM;
  }
  __device__ __forceinline__ uint8_t* own() const { return base + Cfg::Layout::kOffOwn; }
  __device__ __forceinline__ uint64_t* full(int s) const {
    return reinterpret_cast<uint64_t*>(base + Cfg::Layout::kOffBarriers) + s;
  }
  __device__ __forceinline__ uint64_t* empty(int s) const { return full(Cfg::kStages) + s; }
};

// The producer's copies of a tile's token rows: per k step, kColBlocks column blocks of 128 bytes
// of each row (kColBytes apart in the stage), K-major with the 128-byte swizzle of ptx/wgmma.cuh.
// Thread tid copies 16-byte chunk tid % 8 of rows tid / 8 + 16 j (a_row_index gathers; rows past
// the tile are zero-filled).
template <int kRowsPerThread, int kColBlocks, int kColBytes>
struct RsTokenRows {
  const uint8_t* src[kRowsPerThread];  // row tid / 8 + 16 j at chunk tid % 8, k step 0; null past the tile

  __device__ __forceinline__ void begin_tile(const GroupedGemmOperands& op, const TileCoord& t, int tid) {
#pragma unroll
    for (int j = 0; j < kRowsPerThread; ++j) {
      const int r = tid / 8 + 16 * j;
      const int row = t.row_begin + r;
      src[j] = r < t.num_rows
                   ? op.a + static_cast<int64_t>(op.a_row_index ? op.a_row_index[row] : row) * op.a_row_bytes +
                         (tid % 8) * 16
                   : nullptr;
    }
  }

  // K step ks into the stage's rows at dst (a shared address).
  __device__ __forceinline__ void issue(const GroupedGemmOperands& op, uint32_t dst, int ks, int tid) const {
    const int c = tid % 8;
#pragma unroll
    for (int j = 0; j < kRowsPerThread; ++j) {
      const int row = tid / 8 + 16 * j;
#pragma unroll
      for (int cb = 0; cb < kColBlocks; ++cb)
        ptx::cp_async_16(dst + cb * kColBytes + row * 128 + ((c ^ (row & 7)) << 4),
                         src[j] ? src[j] + ks * (128 * kColBlocks) + cb * 128 : op.a, src[j] ? 16 : 0);
    }
  }
};

// The extent of a block's work: the k steps of a tile, the n tiles, and all tiles of the routing's
// list (its m tiles x n tiles).
struct RsBlockWork {
  int k_steps, n_tiles, num_tiles;
};

// The start of a block: thread 0 initialises the stage barriers (the block syncs); every thread
// gets the block's work.
template <class Cfg, class Smem>
__device__ __forceinline__ RsBlockWork rs_block_start(const Smem& sm, const GroupedGemmOperands& op,
                                                      const GroupedGemmSchedule& schedule) {
  init_stage_barriers<Cfg>(sm);
  RsBlockWork w;
  w.k_steps = op.k / Cfg::kBlockK;
  w.n_tiles = op.n / Cfg::kBlockN;
  w.num_tiles = *schedule.num_m_tiles * w.n_tiles;
  return w;
}

// The producer warpgroup (threads 0 .. 127): at Cfg::kProducerRegs registers, its walk over the
// stage ring (run_ring_producer) with a Producer: begin_tile(op, tile, k_steps, tid),
// issue(op, sm, ks, k_steps, stage, tid), landed(sm, stage, tid).
template <class Cfg, class Producer, class Smem>
__device__ __forceinline__ void run_rs_producer(const Smem& sm, const GroupedGemmOperands& op,
                                                const GroupedGemmSchedule& schedule, const RsBlockWork& w, int tid) {
  ptx::setmaxnreg_dec<Cfg::kProducerRegs>();
  Producer prod;
  const int k_steps = w.k_steps;
  run_ring_producer<Cfg>(
      sm, schedule, w.n_tiles, k_steps, [&](const TileCoord& t) { prod.begin_tile(op, t, k_steps, tid); },
      [&](int ks, int s) { prod.issue(op, sm, ks, k_steps, s, tid); }, [&](int s) { prod.landed(sm, s, tid); });
}

// A consumer thread (warpgroups 1 ..), at Cfg::kConsumerRegs registers: its warpgroup wg among
// the consumers, its warp and lane, g = lane / 4 and t = lane % 4. It holds weight rows
// d_row = 64 wg + 16 warp + g and d_row + 8 of the n tile, in its micro-tiles micro and micro + 1.
struct RsConsumerThread {
  int wg, warp, lane, g, t, micro, d_row;
};

template <class Cfg>
__device__ __forceinline__ RsConsumerThread rs_consumer_thread() {
  ptx::setmaxnreg_inc<Cfg::kConsumerRegs>();
  const int tid = threadIdx.x;
  RsConsumerThread c;
  c.wg = tid / 128 - 1;
  c.warp = (tid / 32) % 4;
  c.lane = tid % 32;
  c.g = c.lane / 4;
  c.t = c.lane % 4;
  c.micro = 8 * c.wg + 2 * c.warp;
  c.d_row = 64 * c.wg + 16 * c.warp + c.g;
  return c;
}

}  // namespace moe_ep::cuda
