// Pieces shared by the grouped GEMM kernels: the tile walk and the warp layout.
//
// A block (8 warps) computes a kGemmBlockM x kGemmBlockN tile; warp w covers rows
// 32 * (w / 4) + [0, 32) and columns 32 * (w % 4) + [0, 32) as 2 (m16) x 4 (n8) MMA tiles, so
// every mainloop leaves acc[mi][ni][c] in the m16n8 C layout of ptx/mma.cuh.
#pragma once

#include <cstdint>

#include "cuda/kernels/sm90_grouped_gemm.h"
#include "cuda/kernels/sm90_persistent_tiles.cuh"

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
