// MXFP4 x Q8 mainloop: FP8 tensor-core MMA (m16n8k32 e4m3) with the per-32 scales applied in
// fp32 at every k block, so the result is exact whatever the spread of the block exponents:
//   acc[r, n] += mma_k32(a[r, kb], w[n, kb]) * 2^sa[r, kb] * 2^sw[n, kb]
// Folded weights (kFolded, tile/fp4_codec.h): the weight exponent is in the decoded e4m3 value
// (table of shift d[n, kb]), so only the activation scale is applied per k block,
//   acc[r, n] += mma_k32(a[r, kb], w[n, kb] * 2^(d - 8)) * 2^sa[r, kb],
// and the epilogue multiplies by the column factor; every term is the unfolded one times the
// same power of two, so the sums round identically.
// Weights stay FP4 in memory and in shared memory; each lane decodes its own B fragments to
// e4m3 in registers (tile/fp4_codec.h). A multi-stage cp.async pipeline feeds shared memory.
//
// Shared memory of one stage (kStageBytes):
//   [0, 8192)        A   64 rows x 128 B e4m3; 16-byte chunk c of row r at r*128 + (c ^ (r&7))*16
//   [8192, 16384)    B   16 weight micro-tiles of 512 B, as in global memory
//   [16384, 16640)   SA  64 rows x 4 E8M0 bytes (the 4 k32 blocks of the step)
//   [16640, 17152)   SW  128 columns x 4 E8M0 bytes (folded: shifts)
// After the stages (folded only): the 15 decode tables, 8 bytes each.
#pragma once

#include <cstdint>

#include "cuda/kernels/sm90_grouped_gemm_tile.cuh"
#include "cuda/ptx/cp_async.cuh"
#include "cuda/ptx/ldmatrix.cuh"
#include "cuda/ptx/mma.cuh"
#include "cuda/tile/fp4_codec.h"
#include "cuda/tile/quant_device.cuh"

namespace moe_ep::cuda {

// The folded decode tables in shared memory (filled by the block before its first k step).
__device__ __forceinline__ void fill_folded_tables(uint32_t* tables) {
  if (threadIdx.x < 2 * kFoldedShifts)
    tables[threadIdx.x] = folded_table_word(static_cast<int>(threadIdx.x) / 2, (threadIdx.x % 2) * 4);
}

__device__ __forceinline__ void folded_decode(const uint32_t* tables, uint32_t word, uint32_t shift,
                                              uint32_t& b0, uint32_t& b1) {
  const uint2 t = reinterpret_cast<const uint2*>(tables)[shift];
  decode_fp4_word_with(word, t.x, t.y, b0, b1);
}

template <bool kFolded>
struct Mxfp4MainloopT {
  static constexpr int kStages = 4;
  static constexpr int kABytes = kGemmBlockM * kGemmBlockK;
  static constexpr int kBBytes = (kGemmBlockN / 8) * kWeightMicroTileBytes;
  static constexpr int kSaBytes = kGemmBlockM * 4;
  static constexpr int kSwBytes = kGemmBlockN * 4;
  static constexpr int kStageBytes = kABytes + kBBytes + kSaBytes + kSwBytes;
  static constexpr int kSharedBytes = kStages * kStageBytes + (kFolded ? 128 : 0);
  static_assert(kGemmBlockK == 128 && kGemmThreads == 256, "load mapping assumes these");

  // This thread's A rows of a tile (rows tid / 8 + 32 i, 16-byte chunk tid % 8; fixed across k
  // steps) and their copy into a stage.
  struct ARows {
    const uint8_t* a[2];
    uint32_t a_bytes[2];  // 16, or 0 to zero-fill a row past the tile's end

    __device__ __forceinline__ void begin_tile(const GroupedGemmOperands& op, const TileCoord& t) {
      const int tid = threadIdx.x;
      auto a_row = [&](int r) -> const uint8_t* {
        const int row = t.row_begin + r;
        const int src = op.a_row_index ? op.a_row_index[row] : row;
        return op.a + static_cast<int64_t>(src) * op.a_row_bytes;
      };
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        const int r = tid / 8 + 32 * i;
        const bool valid = r < t.num_rows;
        a[i] = valid ? a_row(r) + (tid % 8) * 16 : op.a;
        a_bytes[i] = valid ? 16 : 0;
      }
    }

    __device__ __forceinline__ void issue(int k_step, uint32_t base) const {
      const int tid = threadIdx.x;
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        const int r = tid / 8 + 32 * i, c = tid % 8;
        ptx::cp_async_16(base + r * 128 + ((c ^ (r & 7)) << 4), a[i] + (a_bytes[i] ? k_step * kGemmBlockK : 0),
                         a_bytes[i]);
      }
    }
  };
  using Copies = MmaStageCopies<ARows, 4, kABytes, kABytes + kBBytes, kABytes + kBBytes + kSaBytes>;

  template <int kM16s>
  static __device__ __forceinline__ void compute_m16s(const uint8_t* stage, const uint32_t* tables,
                                                      const WarpPosition& wp, Accumulators& acc) {
    const uint8_t* sa_smem = stage + kABytes + kBBytes;
    const uint8_t* sw_smem = sa_smem + kSaBytes;
    uint4 bw[4];
    uint32_t sw_word[4][2];
#pragma unroll
    for (int ni = 0; ni < 4; ++ni) {
      bw[ni] = *reinterpret_cast<const uint4*>(stage + kABytes +
                                               (wp.col0 / 8 + ni) * kWeightMicroTileBytes + wp.lane * 16);
      if constexpr (kFolded) {  // the shifts of this lane's B column
        sw_word[ni][0] = *reinterpret_cast<const uint32_t*>(sw_smem + (wp.col0 + ni * 8 + wp.group) * 4);
      } else {
#pragma unroll
        for (int c = 0; c < 2; ++c)
          sw_word[ni][c] = *reinterpret_cast<const uint32_t*>(sw_smem + (wp.col0 + ni * 8 + wp.thread_in_group * 2 + c) * 4);
      }
    }
    uint32_t sa_word[2][2];
#pragma unroll
    for (int mi = 0; mi < kM16s; ++mi)
#pragma unroll
      for (int h = 0; h < 2; ++h)
        sa_word[mi][h] = *reinterpret_cast<const uint32_t*>(sa_smem + (wp.row0 + mi * 16 + wp.group + 8 * h) * 4);

    const uint32_t a_base = ptx::smem_addr(stage);
#pragma unroll
    for (int kb = 0; kb < 4; ++kb) {
      uint32_t a[2][4];
#pragma unroll
      for (int mi = 0; mi < kM16s; ++mi) {
        const int r = wp.row0 + mi * 16 + ((wp.lane >> 3) & 1) * 8 + (wp.lane & 7);
        const int c = kb * 2 + (wp.lane >> 4);
        ptx::ldmatrix_x4(a[mi], a_base + r * 128 + ((c ^ (r & 7)) << 4));
      }
      float sa[2][2], sw[4][2];
#pragma unroll
      for (int mi = 0; mi < kM16s; ++mi)
#pragma unroll
        for (int h = 0; h < 2; ++h) sa[mi][h] = e8m0_to_float_device((sa_word[mi][h] >> (8 * kb)) & 0xFF);
      if constexpr (!kFolded) {
#pragma unroll
        for (int ni = 0; ni < 4; ++ni)
#pragma unroll
          for (int c = 0; c < 2; ++c) sw[ni][c] = e8m0_to_float_device((sw_word[ni][c] >> (8 * kb)) & 0xFF);
      }
#pragma unroll
      for (int ni = 0; ni < 4; ++ni) {
        const uint32_t word = kb == 0 ? bw[ni].x : kb == 1 ? bw[ni].y : kb == 2 ? bw[ni].z : bw[ni].w;
        uint32_t b0, b1;
        if constexpr (kFolded)
          folded_decode(tables, word, (sw_word[ni][0] >> (8 * kb)) & 0xFF, b0, b1);
        else
          decode_fp4_word(word, b0, b1);
#pragma unroll
        for (int mi = 0; mi < kM16s; ++mi) {
          float part[4];
          ptx::mma_m16n8k32_e4m3_via_f16(part, a[mi], b0, b1);
          if constexpr (kFolded) {
            acc[mi][ni][0] = fmaf(part[0], sa[mi][0], acc[mi][ni][0]);
            acc[mi][ni][1] = fmaf(part[1], sa[mi][0], acc[mi][ni][1]);
            acc[mi][ni][2] = fmaf(part[2], sa[mi][1], acc[mi][ni][2]);
            acc[mi][ni][3] = fmaf(part[3], sa[mi][1], acc[mi][ni][3]);
          } else {
            acc[mi][ni][0] = fmaf(part[0], sa[mi][0] * sw[ni][0], acc[mi][ni][0]);
            acc[mi][ni][1] = fmaf(part[1], sa[mi][0] * sw[ni][1], acc[mi][ni][1]);
            acc[mi][ni][2] = fmaf(part[2], sa[mi][1] * sw[ni][0], acc[mi][ni][2]);
            acc[mi][ni][3] = fmaf(part[3], sa[mi][1] * sw[ni][1], acc[mi][ni][3]);
          }
        }
      }
    }
  }

  static __device__ __forceinline__ void run(const GroupedGemmOperands& op, const TileCoord& t,
                                             uint8_t* smem, Accumulators& acc) {
    const WarpPosition wp = warp_position();
    zero_accumulators(acc);
    uint32_t* tables = reinterpret_cast<uint32_t*>(smem + kStages * kStageBytes);
    if constexpr (kFolded) fill_folded_tables(tables);  // read after the first k step's barrier
    run_mma_stage_ring<kStages, kStageBytes, Copies>(op, t, smem, wp, [&](const uint8_t* stage, auto m16s) {
      compute_m16s<decltype(m16s)::value>(stage, tables, wp, acc);
    });
  }
};

using Mxfp4Mainloop = Mxfp4MainloopT<false>;
using Mxfp4FoldedMainloop = Mxfp4MainloopT<true>;

}  // namespace moe_ep::cuda
