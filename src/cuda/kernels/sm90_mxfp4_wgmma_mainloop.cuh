// MXFP4 x Q8 grouped GEMM on wgmma (sm_90a), warp-specialized, for folded mxfp4 weights
// (w_scale = shifts d in 0..14, tile/fp4_codec.h; w_col_scale applied by the epilogue):
//   acc[r, n] += wgmma_k32(a[r, kb], B'[n, kb]) * 2^(sa[r, kb] - 127)
// B' = e2m1 * 2^(d - 8) is exact in e4m3, so per k32 block only the activation scale is
// promoted (one FMA per accumulator). Each k32 product starts from a zero accumulator
// (scale-d = 0) and is added in fp32 by the consumer.
//
// Block of 3 warpgroups (384 threads), one block per SM, persistent over the (m tile, n tile)
// list of the routing kernel (tile = m_tile * n_tiles + n_tile, block b takes b, b + grid, ...):
//   WG 0      producer: cp.async of the gathered A rows (16 B, rows via a_row_index), their
//             E8M0 scales, the FP4 micro-tiles and the shifts into a raw slot; kLookahead
//             k steps later each quad of lanes decodes the raw rows its lanes copied to e4m3 into
//             the stage's B' tile.
//   WG 1, 2   consumers: a 64 x 128 sub-tile each (kBlockM / 64 along m, kBlockN / 128 along
//             n), m64n128k32 wgmma per k32 block, fp32 promotion, then the epilogue straight
//             from registers. While one promotes, the other's wgmma runs.
// A producer warp decodes only what its own lanes copied (after cp.async.wait_group and
// __syncwarp), so the producer needs no barrier of its own; stages are handed over with mbarriers
// (full: 128 producer arrivals, empty: one arrival per consumer warp).
//
// Shared memory (base aligned to 1024 bytes here):
//   stage s < kStages:  A  kBlockM x 128 B   K-major, 128-byte swizzle (ptx/wgmma.cuh)
//                       B' kBlockN x 128 B   same layout
//   sa[kStages]         kBlockM x 4 B        E8M0 of the 4 k32 blocks of the step, per row
//   raw[kRawSlots]      kBlockN / 8 micro-tiles of 512 B; lane l = 4g + t's 16 B at
//                       64 g + 16 (t ^ (g >> 1)), so that the transposed 4-byte reads of a quad
//                       are free of bank conflicts
//   shift[kRawSlots]    4-byte shift words (4 k32 blocks of one row), one per row, 8 rows of a
//                       micro-tile at 32 B each (copied 16 B per lane by lanes 0..2j-1 of its warp)
//   table               16 x 8 B: e4m3 magnitude bytes of codes 0..7 for shift d (15 unused)
//   full[kStages], empty[kStages]  mbarriers
#pragma once

#include <cstdint>

#include "cuda/kernels/sm90_grouped_gemm.h"
#include "cuda/kernels/sm90_persistent_tiles.cuh"
#include "cuda/ptx/cp_async.cuh"
#include "cuda/ptx/mbarrier.cuh"
#include "cuda/ptx/wgmma.cuh"
#include "cuda/tile/fp4_codec.h"
#include "cuda/tile/quant_device.cuh"

namespace moe_ep::cuda {

template <int kBlockM_, int kBlockN_, int kStages_>
struct WgmmaTileConfig {
  static constexpr int kBlockM = kBlockM_;
  static constexpr int kBlockN = kBlockN_;
  static constexpr int kBlockK = 128;
  static constexpr int kStages = kStages_;
  static constexpr int kLookahead = 2;  // k steps between a raw copy and its decode
  static constexpr int kRawSlots = kLookahead + 1;
  static constexpr int kWgM = kBlockM / 64, kWgN = kBlockN / 128;
  static constexpr int kConsumers = kWgM * kWgN;
  static constexpr int kThreads = 128 * (1 + kConsumers);
  static_assert(kConsumers == 2, "one producer and two consumer warpgroups");
  static_assert(kStages > kLookahead, "the producer must be able to run kLookahead steps ahead");
  // Register split (setmaxnreg): 384 threads start at 168 each (65536 / 384, rounded down to 8).
  static constexpr int kProducerRegs = 88;
  static constexpr int kConsumerRegs = 208;
  static_assert(128 * kProducerRegs + 256 * kConsumerRegs <= 384 * 168, "register file");

  static constexpr int kABytes = kBlockM * kBlockK;
  static constexpr int kBBytes = kBlockN * kBlockK;
  static constexpr int kStageBytes = kABytes + kBBytes;
  static constexpr int kSaBytes = kBlockM * 4;
  static constexpr int kRawBytes = (kBlockN / 8) * kWeightMicroTileBytes;
  static constexpr int kRawChunks = kRawBytes / 16;
  static constexpr int kChunksPerThread = kRawChunks / 128;  // micro-tile = one warp's 32 chunks
  static constexpr int kShiftBytes = kRawChunks * 4;
  static constexpr int kARowsPerThread = kBlockM / 16;     // 8 chunks of 16 B per row
  static constexpr int kTableBytes = 16 * 8;

  static constexpr int kOffSa = kStages * kStageBytes;
  static constexpr int kOffRaw = kOffSa + kStages * kSaBytes;
  static constexpr int kOffShift = kOffRaw + kRawSlots * kRawBytes;
  static constexpr int kOffTable = kOffShift + kRawSlots * kShiftBytes;
  static constexpr int kOffBarriers = kOffTable + kTableBytes;
  static constexpr int kSharedBytes = kOffBarriers + 2 * kStages * 8 + 1024;  // + alignment slack
  static_assert(kStageBytes % 1024 == 0 && kABytes % 1024 == 0, "wgmma tiles are 1024-byte aligned");
  static_assert(kSharedBytes <= 232448, "H100/H200 allow 227 KiB of shared memory per block");
};

// The tile configuration built: 64 x 256, two consumers side by side along n, sharing A.
using WgmmaTile64x256 = WgmmaTileConfig<64, 256, 4>;

// Position of a consumer thread's accumulator fragment in the tile.
struct WgmmaFragment {
  int row;   // tile row of acc[4i + {0,1}]; acc[4i + {2,3}] is row + 8
  int col;   // kernel column (0..N) of acc[4i] is col + 8i; acc[4i + 1] is col + 8i + 1
  int t;     // lane % 4
};

template <class Cfg>
struct WgmmaSmem {
  uint8_t* base;
  __device__ __forceinline__ uint8_t* a(int s) const { return base + s * Cfg::kStageBytes; }
  __device__ __forceinline__ uint8_t* b(int s) const { return a(s) + Cfg::kABytes; }
  __device__ __forceinline__ uint8_t* sa(int s) const { return base + Cfg::kOffSa + s * Cfg::kSaBytes; }
  __device__ __forceinline__ uint8_t* raw(int r) const { return base + Cfg::kOffRaw + r * Cfg::kRawBytes; }
  __device__ __forceinline__ uint8_t* shift(int r) const { return base + Cfg::kOffShift + r * Cfg::kShiftBytes; }
  __device__ __forceinline__ uint8_t* table() const { return base + Cfg::kOffTable; }
  __device__ __forceinline__ uint64_t* full(int s) const {
    return reinterpret_cast<uint64_t*>(base + Cfg::kOffBarriers) + s;
  }
  __device__ __forceinline__ uint64_t* empty(int s) const { return full(Cfg::kStages) + s; }
};

// ---- producer warpgroup ----------------------------------------------------------------------
template <class Cfg>
struct WgmmaProducer {
  // Per tile: the gathered A rows of this thread's chunks (-1: past the tile, zero-filled).
  int a_row[Cfg::kARowsPerThread];
  int sa_row;  // A row of this thread's scale word (threads < kBlockM), -1 when none
  const uint8_t* w_tile;      // micro-tile (n8 block of this warp, k step 0) + lane * 16
  const uint8_t* shift_tile;  // this lane's 16 B (4 rows) of the warp's micro-tiles, k step 0

  __device__ __forceinline__ void begin_tile(const GroupedGemmOperands& op, const TileCoord& t,
                                             int k_steps, int tid) {
    auto source_row = [&](int r) {
      if (r >= t.num_rows) return -1;
      const int row = t.row_begin + r;
      return op.a_row_index ? op.a_row_index[row] : row;
    };
#pragma unroll
    for (int j = 0; j < Cfg::kARowsPerThread; ++j) a_row[j] = source_row(tid / 8 + 16 * j);
    sa_row = tid < Cfg::kBlockM ? source_row(tid) : -1;
    const int warp = tid / 32, lane = tid % 32;
    const int64_t n8 = static_cast<int64_t>(t.expert) * (op.n / 8) + t.n_tile * (Cfg::kBlockN / 8) + warp;
    w_tile = op.w + n8 * k_steps * kWeightMicroTileBytes + lane * 16;
    const int64_t n = static_cast<int64_t>(t.n_tile) * Cfg::kBlockN + warp * 8 + (32 * (lane / 2) + 4 * (lane % 2));
    shift_tile = op.w_scale + (static_cast<int64_t>(t.expert) * k_steps * op.n + n) * 4;
  }

  // cp.async of k step ks into stage s (A, sa) and raw slot r (FP4, shifts).
  __device__ __forceinline__ void issue(const GroupedGemmOperands& op, const WgmmaSmem<Cfg>& sm, int ks,
                                        int k_steps, int s, int r, int tid) const {
    const uint32_t a_dst = ptx::smem_addr(sm.a(s));
#pragma unroll
    for (int j = 0; j < Cfg::kARowsPerThread; ++j) {
      const int row = tid / 8 + 16 * j, c = tid % 8;
      const bool valid = a_row[j] >= 0;
      const uint8_t* src = valid ? op.a + static_cast<int64_t>(a_row[j]) * op.a_row_bytes + ks * Cfg::kBlockK + c * 16
                                 : op.a;
      ptx::cp_async_16(a_dst + row * 128 + ((c ^ (row & 7)) << 4), src, valid ? 16 : 0);
    }
    if (tid < Cfg::kBlockM) {
      const bool valid = sa_row >= 0;
      const uint8_t* src = valid ? op.a_scale + static_cast<int64_t>(sa_row) * op.a_scale_row_bytes + ks * 4 : op.a_scale;
      ptx::cp_async_4(ptx::smem_addr(sm.sa(s)) + tid * 4, src, valid ? 4 : 0);
    }
    const uint32_t raw_dst = ptx::smem_addr(sm.raw(r));
    const uint32_t shift_dst = ptx::smem_addr(sm.shift(r));
    const int64_t micro_stride = static_cast<int64_t>(4) * k_steps * kWeightMicroTileBytes;  // 4 warps apart
#pragma unroll
    for (int j = 0; j < Cfg::kChunksPerThread; ++j) {
      const int chunk = tid + 128 * j;
      ptx::cp_async_16(raw_dst + raw_offset(chunk), w_tile + j * micro_stride + ks * kWeightMicroTileBytes);
    }
    const int warp = tid / 32, lane = tid % 32;  // lane 2j + h: rows 4h..4h+3 of micro-tile warp + 4j
    if (lane < 2 * Cfg::kChunksPerThread)
      ptx::cp_async_16(shift_dst + (warp + 4 * (lane / 2)) * 32 + (lane % 2) * 16,
                       shift_tile + static_cast<int64_t>(ks) * op.n * 4);
  }

  // Where raw chunk `chunk` (micro-tile chunk / 32, lane chunk % 32) lies in its slot.
  static __device__ __forceinline__ uint32_t raw_offset(int chunk) {
    const int lane = chunk % 32, g = lane / 4, t = lane % 4;
    return (chunk / 32) * kWeightMicroTileBytes + g * 64 + ((t ^ (g >> 1)) << 4);
  }

  // The 4 lanes t = 0..3 of a quad share row n = 8 * micro + g; lane t takes k32
  // block kb = t of all four (word t of lanes t' = 0..3: k = 32t + 4t' + {0..3} lo, + 16 hi),
  // so one shift and one table per micro-tile row, and whole 16-byte chunks 2t (lo) and 2t + 1
  // (hi) of the B' row to store. Reads data copied by the other lanes of the quad (the caller
  // orders them with __syncwarp).
  static __device__ __forceinline__ void decode_quad(const WgmmaSmem<Cfg>& sm, int s, int r, int tid) {
    const int warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
    const uint8_t* table = sm.table();
    uint8_t* b = sm.b(s);
#pragma unroll
    for (int j = 0; j < Cfg::kChunksPerThread; ++j) {
      const int micro = warp + 4 * j;
      const uint8_t* rows = sm.raw(r) + micro * kWeightMicroTileBytes + g * 64 + 4 * t;
      uint32_t w[4];
#pragma unroll
      for (int tp = 0; tp < 4; ++tp) w[tp] = *reinterpret_cast<const uint32_t*>(rows + ((tp ^ (g >> 1)) << 4));
      const uint32_t d = sm.shift(r)[micro * 32 + g * 4 + t] & 0xF;
      const uint2 tab = *reinterpret_cast<const uint2*>(table + d * 8);
      uint32_t lo[4], hi[4];
#pragma unroll
      for (int tp = 0; tp < 4; ++tp) decode_fp4_word_with(w[tp], tab.x, tab.y, lo[tp], hi[tp]);
      uint8_t* row = b + (8 * micro + g) * 128;
      *reinterpret_cast<uint4*>(row + (((2 * t) ^ g) << 4)) = make_uint4(lo[0], lo[1], lo[2], lo[3]);
      *reinterpret_cast<uint4*>(row + (((2 * t + 1) ^ g) << 4)) = make_uint4(hi[0], hi[1], hi[2], hi[3]);
    }
  }
};

// ---- the kernel body -------------------------------------------------------------------------
// Epilogue::apply(ep, op, tile, fragment, acc): writes the valid rows of a 64 x 128 sub-tile.
template <class Cfg, class Epilogue, class Params>
__device__ __forceinline__ void run_wgmma_grouped_gemm(const Params& p, uint8_t* smem_raw) {
  // (align_smem_1024 + init_stage_barriers of sm90_persistent_tiles.cuh, kept inline so this
  // kernel's code stays as it is.)
  const uint32_t raw_addr = ptx::smem_addr(smem_raw);
  const WgmmaSmem<Cfg> sm{smem_raw + ((1024 - (raw_addr & 1023)) & 1023)};
  const int tid = threadIdx.x;
  if (tid < 16) {
    uint2 entry = make_uint2(0u, 0u);
    if (tid < kFoldedShifts) entry = make_uint2(folded_table_word(tid, 0), folded_table_word(tid, 4));
    reinterpret_cast<uint2*>(sm.table())[tid] = entry;
  }
  if (tid == 0) {
    for (int s = 0; s < Cfg::kStages; ++s) {
      ptx::mbarrier_init(sm.full(s), 128);
      ptx::mbarrier_init(sm.empty(s), 4 * Cfg::kConsumers);
    }
    ptx::fence_mbarrier_init();
  }
  __syncthreads();

  const GroupedGemmOperands& op = p.op;
  const int k_steps = op.k / Cfg::kBlockK;
  const int n_tiles = op.n / Cfg::kBlockN;
  const int num_tiles = *p.schedule.num_m_tiles * n_tiles;
  constexpr int S = Cfg::kStages, L = Cfg::kLookahead, R = Cfg::kRawSlots;

  if (tid < 128) {
    ptx::setmaxnreg_dec<Cfg::kProducerRegs>();
    WgmmaProducer<Cfg> prod;
    int item = 0;  // k steps issued so far (over all tiles of this block)
    auto step = [&](bool issue_one, int ks) {
      if (issue_one) {
        ptx::mbarrier_wait_parity(sm.empty(item % S), ((item / S) & 1) ^ 1);
        prod.issue(op, sm, ks, k_steps, item % S, item % R, tid);
      }
      ptx::cp_async_commit();
      const int q = item - L;  // the step decoded now
      if (q >= 0) {
        ptx::cp_async_wait<L>();
        __syncwarp();  // the quad's raw chunks, copied by its 4 lanes, have landed
        WgmmaProducer<Cfg>::decode_quad(sm, q % S, q % R, tid);
        ptx::fence_proxy_async_shared();
        ptx::mbarrier_arrive(sm.full(q % S));
      }
      ++item;
    };
    for (int tile = blockIdx.x; tile < num_tiles; tile += gridDim.x) {
      prod.begin_tile(op, tile_coord<Cfg::kBlockM>(p.schedule, tile, n_tiles), k_steps, tid);
      for (int ks = 0; ks < k_steps; ++ks) step(true, ks);
    }
    for (int d = 0; d < L; ++d) step(false, 0);
  } else {
    ptx::setmaxnreg_inc<Cfg::kConsumerRegs>();
    const int wg = tid / 128 - 1, warp = (tid / 32) % 4, lane = tid % 32;
    const int m0 = (wg / Cfg::kWgN) * 64, n0 = (wg % Cfg::kWgN) * 128;
    const int row0 = m0 + 16 * warp + lane / 4;
    int item = 0;
    for (int tile = blockIdx.x; tile < num_tiles; tile += gridDim.x) {
      const TileCoord t = tile_coord<Cfg::kBlockM>(p.schedule, tile, n_tiles);
      const bool active = m0 < t.num_rows;  // warpgroup-uniform
      float acc[64];
#pragma unroll
      for (int i = 0; i < 64; ++i) acc[i] = 0.0f;
      for (int ks = 0; ks < k_steps; ++ks, ++item) {
        const int s = item % S;
        ptx::mbarrier_wait_parity(sm.full(s), (item / S) & 1);
        if (active) {
          const uint32_t sa0 = *reinterpret_cast<const uint32_t*>(sm.sa(s) + row0 * 4);
          const uint32_t sa1 = *reinterpret_cast<const uint32_t*>(sm.sa(s) + (row0 + 8) * 4);
          const uint64_t desc_a = ptx::wgmma_desc_k_major_sw128(ptx::smem_addr(sm.a(s) + m0 * 128));
          const uint64_t desc_b = ptx::wgmma_desc_k_major_sw128(ptx::smem_addr(sm.b(s) + n0 * 128));
#pragma unroll
          for (int kb = 0; kb < 4; ++kb) {
            float part[64];
            ptx::wgmma_fence();
            ptx::wgmma_m64n128k32_e4m3_zero_d(part, desc_a + 2 * kb, desc_b + 2 * kb);  // +32 B along k
            ptx::wgmma_commit_group();
            ptx::wgmma_wait_group<0>();
            ptx::fence_operands(part);
            const float s0 = e8m0_to_float_device((sa0 >> (8 * kb)) & 0xFF);
            const float s1 = e8m0_to_float_device((sa1 >> (8 * kb)) & 0xFF);
#pragma unroll
            for (int i = 0; i < 16; ++i) {
              acc[4 * i + 0] = fmaf(part[4 * i + 0], s0, acc[4 * i + 0]);
              acc[4 * i + 1] = fmaf(part[4 * i + 1], s0, acc[4 * i + 1]);
              acc[4 * i + 2] = fmaf(part[4 * i + 2], s1, acc[4 * i + 2]);
              acc[4 * i + 3] = fmaf(part[4 * i + 3], s1, acc[4 * i + 3]);
            }
          }
        }
        __syncwarp();
        if (lane == 0) ptx::mbarrier_arrive(sm.empty(s));
      }
      if (active) {
        const WgmmaFragment f{row0, t.n_tile * Cfg::kBlockN + n0 + 2 * (lane % 4), lane % 4};
        Epilogue::apply(p.epilogue, op, t, f, acc);
      }
    }
  }
}

}  // namespace moe_ep::cuda
