// Pieces shared by the persistent grouped GEMMs: the tile a block takes from the routing kernel's
// m-tile list (every family), and for the warp-specialized ones (sm90_mxfp4_wgmma_mainloop.cuh,
// sm90_rs16_mainloop.cuh, sm90_rs16_wide_mainloop.cuh, sm90_mxfp4_rs_fp8_mainloop.cuh) the
// 1024-byte alignment of shared memory, the full/empty barrier pairs of the stage ring and the
// producer's walk over it.
#pragma once

#include <cstdint>
#include <type_traits>

#include "cuda/kernels/sm90_grouped_gemm.h"
#include "cuda/ptx/cp_async.cuh"
#include "cuda/ptx/mbarrier.cuh"

namespace moe_ep::cuda {

// The tile a persistent block works on: tile = m_tile * n_tiles + n_tile (block b takes b,
// b + grid, ...), m tiles of kBlockM rows listed by the routing kernel.
struct TileCoord {
  int expert;
  int row_begin;  // first permuted row of the tile
  int num_rows;   // valid rows, 1..kBlockM
  int n_tile;
};

template <int kBlockM>
__device__ __forceinline__ TileCoord tile_coord(const GroupedGemmSchedule& s, int tile, int n_tiles) {
  const int m_tile = tile / n_tiles;
  TileCoord t;
  t.n_tile = tile % n_tiles;
  t.expert = s.tile_expert[m_tile];
  t.row_begin = s.tile_row_begin[m_tile];
  t.num_rows = min(kBlockM, s.expert_offsets[t.expert + 1] - t.row_begin);
  return t;
}

// The rows below which a tile waits for a block's second pass (Cfg::kLastPassRows; 0: one pass).
template <class Cfg>
constexpr int last_pass_rows() {
  if constexpr (requires { Cfg::kLastPassRows; })
    return Cfg::kLastPassRows;
  else
    return 0;
}

// The rows of the routing's m tiles when a kernel's tiles are larger (Cfg::kListBlockM; default
// Cfg::kBlockM): a kernel of kBlockM = 2 kListBlockM walks the list of kListBlockM-row tiles and
// takes an expert's tiles 0, 2, 4, ... of it, kBlockM rows each (the last one its remaining
// rows); the others come back with num_rows = 0 (skipped).
template <class Cfg>
constexpr int list_block_m() {
  if constexpr (requires { Cfg::kListBlockM; })
    return Cfg::kListBlockM;
  else
    return Cfg::kBlockM;
}

template <int kBlockM, int kListBlockM>
__device__ __forceinline__ TileCoord merged_tile_coord(const GroupedGemmSchedule& s, int tile, int n_tiles) {
  static_assert(kBlockM == 2 * kListBlockM, "pairs of list tiles");
  TileCoord t = tile_coord<kListBlockM>(s, tile, n_tiles);
  const int first = s.expert_offsets[t.expert], end = s.expert_offsets[t.expert + 1];
  t.num_rows = (t.row_begin - first) % kBlockM == 0 ? min(kBlockM, end - t.row_begin) : 0;
  return t;
}

// Which tiles of the routing's list a kernel takes (Cfg::kTileWalk; default kEvery):
//   kEvery      every tile (a merged kernel: every even list tile with the rest of its pair);
//   kFullPairs  a merged kernel: only the even list tiles with more than kListBlockM rows left;
//   kOddLast    a kernel on the list's own tiles: only each expert's last tile where the expert
//               has an odd number of them (walking experts x n tiles, not the list).
// A kFullPairs kernel and a kOddLast one together cover every row once.
enum class TileWalk { kEvery, kFullPairs, kOddLast };

template <class Cfg>
constexpr TileWalk tile_walk() {
  if constexpr (requires { Cfg::kTileWalk; })
    return Cfg::kTileWalk;
  else
    return TileWalk::kEvery;
}

// The block's tiles in the order its producer and its consumers both walk them: by index; or,
// where last_pass_rows<Cfg>() = R > 0, first the tiles of more than R rows, then those of at most
// R (each pass by index). fn(tile, last) with last a std::bool_constant: the second pass.
template <class Cfg, class Fn>
__device__ __forceinline__ void for_each_block_tile(const GroupedGemmSchedule& s, int n_tiles, Fn&& fn) {
  constexpr int kLastRows = last_pass_rows<Cfg>();
  constexpr int kList = list_block_m<Cfg>();
  constexpr TileWalk kWalk = tile_walk<Cfg>();
  static_assert(kList == Cfg::kBlockM || kLastRows == 0, "one pass over merged tiles");
  static_assert(kWalk != TileWalk::kFullPairs || kList != Cfg::kBlockM, "pairs of a merged kernel");
  if constexpr (kWalk == TileWalk::kOddLast) {
    static_assert(kList == Cfg::kBlockM && kLastRows == 0, "the list's own tiles, one pass");
    const int num = s.num_experts * n_tiles;
    for (int tile = blockIdx.x; tile < num; tile += gridDim.x) {
      const int e = tile / n_tiles, first = s.expert_offsets[e], rows = s.expert_offsets[e + 1] - first;
      const int tiles = (rows + kList - 1) / kList;
      if (tiles % 2 == 0) continue;
      fn(TileCoord{e, first + (tiles - 1) * kList, rows - (tiles - 1) * kList, tile % n_tiles}, std::false_type{});
    }
    return;
  }
  const int num_tiles = *s.num_m_tiles * n_tiles;
  for (int tile = blockIdx.x; tile < num_tiles; tile += gridDim.x) {
    if constexpr (kList != Cfg::kBlockM) {
      const TileCoord t = merged_tile_coord<Cfg::kBlockM, kList>(s, tile, n_tiles);
      if (t.num_rows > (kWalk == TileWalk::kFullPairs ? kList : 0)) fn(t, std::false_type{});
      continue;
    }
    const TileCoord t = tile_coord<Cfg::kBlockM>(s, tile, n_tiles);
    if (kLastRows > 0 && t.num_rows <= kLastRows) continue;
    fn(t, std::false_type{});
  }
  if constexpr (kLastRows > 0)
    for (int tile = blockIdx.x; tile < num_tiles; tile += gridDim.x) {
      const TileCoord t = tile_coord<Cfg::kBlockM>(s, tile, n_tiles);
      if (t.num_rows > kLastRows) continue;
      fn(t, std::true_type{});
    }
}

// The weight side of a k step in the stage rings of the register-operand GEMMs whose producer
// copies the weights (sm90_mxfp4_rs_fp8_mainloop.cuh, sm90_rs16_wide_mainloop.cuh): the n tile's
// kBlockN / 8 weight micro-tiles and kBlockN scale words of kScaleBytes each, 16-byte cp.async
// by the producer's 128 threads (thread tid: chunk tid % 32 of micro-tiles tid / 32 + 4 j, and
// 16 bytes of scale words where tid < kDBytes / 16).
template <int kBlockN, int kScaleBytes>
struct RingWeightCopy {
  static constexpr int kWBytes = (kBlockN / 8) * kWeightMicroTileBytes;
  static constexpr int kDBytes = kBlockN * kScaleBytes;
  static constexpr int kWChunksPerThread = kWBytes / 16 / 128;
  static_assert(kWBytes % (16 * 128) == 0 && kDBytes % 16 == 0 && kDBytes / 16 <= 128, "the producer's chunks");
  const uint8_t* w_src;  // micro-tile tid / 32 of the n tile, lane chunk tid % 32, k step 0
  const uint8_t* d_src;  // 16 bytes of the n tile's scale words, k step 0

  __device__ __forceinline__ void begin_tile(const GroupedGemmOperands& op, const TileCoord& t, int k_steps,
                                             int tid) {
    const int64_t micro = static_cast<int64_t>(t.expert) * (op.n / 8) + t.n_tile * (kBlockN / 8) + tid / 32;
    w_src = op.w + micro * k_steps * kWeightMicroTileBytes + (tid % 32) * 16;
    d_src = scale_base(op, t, k_steps) + tid * 16;
  }
  // The n tile's scale words at k step 0 (k steps op.n * kScaleBytes apart).
  static __device__ __forceinline__ const uint8_t* scale_base(const GroupedGemmOperands& op, const TileCoord& t,
                                                              int k_steps) {
    return op.w_scale + (static_cast<int64_t>(t.expert) * k_steps * op.n + t.n_tile * kBlockN) * kScaleBytes;
  }
  // K step ks into the stage's W (w_dst) and D (d_dst) regions (shared addresses).
  __device__ __forceinline__ void issue(const GroupedGemmOperands& op, uint32_t w_dst, uint32_t d_dst, int ks,
                                        int k_steps, int tid) const {
    const int64_t micro_stride = static_cast<int64_t>(4) * k_steps * kWeightMicroTileBytes;  // 4 micro-tiles on
#pragma unroll
    for (int j = 0; j < kWChunksPerThread; ++j)
      ptx::cp_async_16(w_dst + (tid + 128 * j) * 16, w_src + j * micro_stride + ks * kWeightMicroTileBytes);
    if (tid < kDBytes / 16)
      ptx::cp_async_16(d_dst + tid * 16, d_src + static_cast<int64_t>(ks) * op.n * kScaleBytes);
  }
};

// The dynamic shared memory from its first 1024-byte boundary (wgmma's 128-byte swizzle).
__device__ __forceinline__ uint8_t* align_smem_1024(uint8_t* raw) {
  return raw + ((1024 - (ptx::smem_addr(raw) & 1023)) & 1023);
}

// Thread 0 initialises each stage's full barrier (128 producer arrivals) and empty barrier (one
// arrival per consumer warp); the block syncs before any use.
template <class Cfg, class Smem>
__device__ __forceinline__ void init_stage_barriers(const Smem& sm) {
  if (threadIdx.x == 0) {
    for (int s = 0; s < Cfg::kStages; ++s) {
      ptx::mbarrier_init(sm.full(s), 128);
      ptx::mbarrier_init(sm.empty(s), 4 * Cfg::kConsumers);
    }
    ptx::fence_mbarrier_init();
  }
  __syncthreads();
}

// The producer warpgroup's walk over the stage ring (cp.async): for every k step of the block's
// tiles it waits for the step's stage to be free, issues the step's copies (issue(ks, stage)) and
// commits them; Cfg::kLookahead steps later it waits for them to land, calls landed(stage) (work
// on the landed data of this thread's own copies), fences them to the async proxy (wgmma reads)
// and arrives on the stage's full barrier. begin_tile(tile) precedes each tile's first step;
// the tiles come in for_each_block_tile's order.
template <class Cfg, class Smem, class BeginTile, class Issue, class Landed>
__device__ __forceinline__ void run_ring_producer(const Smem& sm, const GroupedGemmSchedule& schedule, int n_tiles,
                                                  int k_steps, BeginTile&& begin_tile, Issue&& issue,
                                                  Landed&& landed) {
  constexpr int S = Cfg::kStages, L = Cfg::kLookahead;
  int item = 0;  // k steps issued so far (over all tiles of this block)
  auto step = [&](bool issue_one, int ks) {
    if (issue_one) {
      ptx::mbarrier_wait_parity(sm.empty(item % S), ((item / S) & 1) ^ 1);
      issue(ks, item % S);
    }
    ptx::cp_async_commit();
    const int q = item - L;
    if (q >= 0) {
      ptx::cp_async_wait<L>();
      landed(q % S);
      ptx::fence_proxy_async_shared();
      ptx::mbarrier_arrive(sm.full(q % S));
    }
    ++item;
  };
  for_each_block_tile<Cfg>(schedule, n_tiles, [&](const TileCoord& t, auto) {
    begin_tile(t);
    for (int ks = 0; ks < k_steps; ++ks) step(true, ks);
  });
  for (int d = 0; d < L; ++d) step(false, 0);
}

}  // namespace moe_ep::cuda
