// Pieces shared by the mma.sync grouped GEMM kernels: the tile walk, the warp layout and the
// cp.async ring of their mainloops (sm90_mxfp4_mainloop.cuh, sm90_nvfp4_mainloop.cuh).
//
// A block (8 warps) computes a kGemmBlockM x kGemmBlockN tile; warp w covers rows
// 32 * (w / 4) + [0, 32) and columns 32 * (w % 4) + [0, 32) as 2 (m16) x 4 (n8) MMA tiles, so
// every mainloop leaves acc[mi][ni][c] in the m16n8 C layout of ptx/mma.cuh.
#pragma once

#include <cstdint>
#include <type_traits>

#include "cuda/kernels/sm90_grouped_gemm.h"
#include "cuda/kernels/sm90_persistent_tiles.cuh"
#include "cuda/ptx/cp_async.cuh"

namespace moe_ep::cuda {

inline constexpr int kWarpTileM = 32;
inline constexpr int kWarpTileN = 32;
inline constexpr int kWarpsN = kGemmBlockN / kWarpTileN;  // 4
static_assert(kGemmThreads / 32 == (kGemmBlockM / kWarpTileM) * kWarpsN, "8 warps cover the tile");

using Accumulators = float[2][4][4];

struct WarpPosition {
  int warp, lane, group, thread_in_group, row0, col0;  // row0/col0: the warp tile's origin
};

__device__ __forceinline__ WarpPosition warp_position() {
  WarpPosition w;
  w.warp = threadIdx.x / 32;
  w.lane = threadIdx.x % 32;
  w.group = w.lane / 4;
  w.thread_in_group = w.lane % 4;
  w.row0 = (w.warp / kWarpsN) * kWarpTileM;
  w.col0 = (w.warp % kWarpsN) * kWarpTileN;
  return w;
}

// The A row that GEMM row `row` reads (op.a_row_index, identity when null).
__device__ __forceinline__ int a_source_row(const GroupedGemmOperands& op, int row) {
  return op.a_row_index ? op.a_row_index[row] : row;
}

__device__ __forceinline__ void zero_accumulators(Accumulators& acc) {
#pragma unroll
  for (int mi = 0; mi < 2; ++mi)
#pragma unroll
    for (int ni = 0; ni < 4; ++ni)
#pragma unroll
      for (int c = 0; c < 4; ++c) acc[mi][ni][c] = 0.0f;
}

// This thread's copies of a tile's k steps into a stage of the mma.sync mainloops' cp.async ring,
// with kScaleBytes of block scales per row and k step for both operands (mxfp4: 4 E8M0, nvfp4:
// 8 e4m3): the mainloop's activation rows (ARows: begin_tile(op, tile), issue(k_step, stage
// address)); the n tile's kGemmBlockN / 8 weight micro-tiles (two 16-byte chunks a thread) to
// kBOffset; the activation scales of the tile's rows (thread r < kGemmBlockM: row r's, zeros past
// the tile) to kSaOffset; the n tile's weight scale words (the next kSwBytes / 16 threads, 16 bytes
// each) to kSwOffset. The sources are the tile's, at k step 0.
template <class ARows, int kScaleBytes, int kBOffset, int kSaOffset, int kSwOffset>
struct MmaStageCopies {
  static constexpr int kSwBytes = kGemmBlockN * kScaleBytes;
  ARows a;
  const uint8_t* sa;
  uint32_t sa_bytes;  // kScaleBytes, or 0 to zero-fill a row past the tile's end
  const uint8_t* w;   // the n tile's first micro-tile
  const uint8_t* sw;

  __device__ __forceinline__ void begin_tile(const GroupedGemmOperands& op, const TileCoord& t) {
    a.begin_tile(op, t);
    const int tid = threadIdx.x;
    const bool sa_valid = tid < t.num_rows;
    sa = op.a_scale;
    if (tid < kGemmBlockM && sa_valid) {
      const int row = t.row_begin + tid;
      const int src = op.a_row_index ? op.a_row_index[row] : row;
      sa = op.a_scale + static_cast<int64_t>(src) * op.a_scale_row_bytes;
    }
    sa_bytes = sa_valid ? kScaleBytes : 0;
    const int64_t k_steps = op.k / kGemmBlockK;
    const int64_t n8 = static_cast<int64_t>(t.expert) * (op.n / 8) + t.n_tile * (kGemmBlockN / 8);
    w = op.w + (n8 * k_steps) * kWeightMicroTileBytes;
    sw = op.w_scale + (static_cast<int64_t>(t.expert) * k_steps * op.n + t.n_tile * kGemmBlockN) * kScaleBytes;
  }

  // K step k_step into the stage at `stage`.
  __device__ __forceinline__ void issue(const GroupedGemmOperands& op, int k_step, uint8_t* stage) const {
    const int tid = threadIdx.x;
    const uint32_t base = ptx::smem_addr(stage);
    const int64_t k_steps = op.k / kGemmBlockK;
    a.issue(k_step, base);
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int chunk = tid + kGemmThreads * i;
      const int micro = chunk / 32, part = chunk % 32;
      ptx::cp_async_16(base + kBOffset + chunk * 16,
                       w + (micro * k_steps + k_step) * kWeightMicroTileBytes + part * 16);
    }
    if (tid < kGemmBlockM) {
      const uint8_t* src = sa + (sa_bytes ? k_step * kScaleBytes : 0);
      if constexpr (kScaleBytes == 4)
        ptx::cp_async_4(base + kSaOffset + tid * 4, src, sa_bytes);
      else
        ptx::cp_async_8(base + kSaOffset + tid * 8, src, sa_bytes);
    } else if (tid < kGemmBlockM + kSwBytes / 16) {
      const int part = tid - kGemmBlockM;
      ptx::cp_async_16(base + kSwOffset + part * 16,
                       sw + static_cast<int64_t>(k_step) * op.n * kScaleBytes + part * 16);
    }
  }
};

// The k loop of the mma.sync mainloops over tile t: a cp.async ring of kStages stages of
// kStageBytes at smem, kStages - 1 steps in flight, filled by Copies (MmaStageCopies);
// compute(stage, m16s) runs a landed step on the warp's m16 sub-tiles that hold rows of the tile
// (m16s a std::integral_constant, 2 or 1; a warp whose rows lie past the tile skips the MMA and
// scale work, warp-uniformly, which would otherwise dominate small-T tiles). One __syncthreads a
// step: step ks has landed for every thread and step ks - 1 is no longer read. Returns with every
// copy landed and read.
template <int kStages, int kStageBytes, class Copies, class Compute>
__device__ __forceinline__ void run_mma_stage_ring(const GroupedGemmOperands& op, const TileCoord& t, uint8_t* smem,
                                                   const WarpPosition& wp, Compute&& compute) {
  Copies copies;
  copies.begin_tile(op, t);
  const int k_steps = op.k / kGemmBlockK;
#pragma unroll
  for (int st = 0; st < kStages - 1; ++st) {
    if (st < k_steps) copies.issue(op, st, smem + st * kStageBytes);
    ptx::cp_async_commit();
  }
  for (int ks = 0; ks < k_steps; ++ks) {
    ptx::cp_async_wait<kStages - 2>();
    __syncthreads();
    const int next = ks + kStages - 1;
    if (next < k_steps) copies.issue(op, next, smem + (next % kStages) * kStageBytes);
    ptx::cp_async_commit();
    const uint8_t* stage = smem + (ks % kStages) * kStageBytes;
    if (wp.row0 + 16 < t.num_rows)
      compute(stage, std::integral_constant<int, 2>{});
    else if (wp.row0 < t.num_rows)
      compute(stage, std::integral_constant<int, 1>{});
  }
  ptx::cp_async_wait<0>();
  __syncthreads();
}

// The persistent walk: block b takes tiles b, b + grid, ... of num_m_tiles * n_tiles.
template <class Mainloop, class Epilogue, class Params>
__device__ __forceinline__ void run_grouped_gemm(const Params& p, uint8_t* smem) {
  const int n_tiles = p.op.n / kGemmBlockN;
  const int num_tiles = *p.schedule.num_m_tiles * n_tiles;
  for (int tile = blockIdx.x; tile < num_tiles; tile += gridDim.x) {
    const TileCoord t = tile_coord<kGemmBlockM>(p.schedule, tile, n_tiles);
    Accumulators acc;
    Mainloop::run(p.op, t, smem, acc);
    Epilogue::apply(p.epilogue, p.op, t, acc, smem + Mainloop::kSharedBytes);
    __syncthreads();  // the next tile's prologue overwrites shared memory
  }
}

}  // namespace moe_ep::cuda
