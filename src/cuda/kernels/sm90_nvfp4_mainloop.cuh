// NVFP4 x NVFP4 mainloop: both operands decoded to f16 in registers and multiplied on the f16
// tensor cores (m16n8k16) with fp32 accumulation. e2m1 * e4m3 has at most 6 significant bits
// and lies in [2^-10, 2688], so every decoded operand (q * block_scale) is exact in f16 and
// every product exact in fp32: the result equals the fp32 dot product of the dequantized
// operands up to fp32 summation order. The global scales are applied in the epilogue.
//
// The k order inside each 16-block is permuted identically for A and B (a sum does not care):
// lane (g, t) feeds elements 4t..4t+3 of the block, which are contiguous in the caller's
// packed activations (2 bytes) and in the weight micro-tiles.
//
// Shared memory of one stage (kStageBytes):
//   [0, 5120)         A   64 rows x 64 B packed e2m1, row stride 80 B (bank spread)
//   [5120, 5632)      SA  64 rows x 8 e4m3 block scales (the 8 k16 blocks of the step)
//   [5632, 13824)     B   16 weight micro-tiles of 512 B, as in global memory
//   [13824, 14848)    SW  128 columns x 8 e4m3 block scales
#pragma once

#include <cstdint>

#include "cuda/kernels/sm90_grouped_gemm_tile.cuh"
#include "cuda/ptx/cp_async.cuh"
#include "cuda/ptx/mma.cuh"
#include "cuda/tile/fp4_codec.h"

namespace moe_ep::cuda {

struct Nvfp4Mainloop {
  static constexpr int kStages = 4;
  static constexpr int kARowStride = 80;
  static constexpr int kABytes = kGemmBlockM * kARowStride;
  static constexpr int kSaBytes = kGemmBlockM * 8;
  static constexpr int kBBytes = (kGemmBlockN / 8) * kWeightMicroTileBytes;
  static constexpr int kSwBytes = kGemmBlockN * 8;
  static constexpr int kSaOffset = kABytes;
  static constexpr int kBOffset = kSaOffset + kSaBytes;
  static constexpr int kSwOffset = kBOffset + kBBytes;
  static constexpr int kStageBytes = kSwOffset + kSwBytes;
  static constexpr int kSharedBytes = kStages * kStageBytes;
  static_assert(kGemmBlockK == 128 && kGemmThreads == 256, "load mapping assumes these");

  // This thread's 16 bytes of an A row of a tile (row tid / 4, chunk tid % 4; fixed across k
  // steps) and their copy into a stage.
  struct ARows {
    const uint8_t* a;
    uint32_t a_bytes;  // 16, or 0 to zero-fill a row past the tile's end

    __device__ __forceinline__ void begin_tile(const GroupedGemmOperands& op, const TileCoord& t) {
      const int tid = threadIdx.x;
      const int r = tid / 4;
      const bool valid = r < t.num_rows;
      const int src = valid ? (op.a_row_index ? op.a_row_index[t.row_begin + r] : t.row_begin + r) : 0;
      a = valid ? op.a + static_cast<int64_t>(src) * op.a_row_bytes + (tid % 4) * 16 : op.a;
      a_bytes = valid ? 16 : 0;
    }

    __device__ __forceinline__ void issue(int k_step, uint32_t base) const {
      const int tid = threadIdx.x;
      ptx::cp_async_16(base + (tid / 4) * kARowStride + (tid % 4) * 16, a + (a_bytes ? k_step * (kGemmBlockK / 2) : 0),
                       a_bytes);
    }
  };
  using Copies = MmaStageCopies<ARows, 8, kBOffset, kSaOffset, kSwOffset>;

  // e4m3 byte -> f16x2 holding it twice.
  static __device__ __forceinline__ uint32_t scale_f16x2(uint32_t byte) {
    return ptx::cvt_f16x2_from_e4m3x2(static_cast<uint16_t>(byte | (byte << 8)));
  }

  template <int kM16s>
  static __device__ __forceinline__ void compute_m16s(const uint8_t* stage, const WarpPosition& wp,
                                                      Accumulators& acc) {
    uint4 bw[4];
    uint2 sw[4];
#pragma unroll
    for (int ni = 0; ni < 4; ++ni) {
      bw[ni] = *reinterpret_cast<const uint4*>(stage + kBOffset +
                                               (wp.col0 / 8 + ni) * kWeightMicroTileBytes + wp.lane * 16);
      sw[ni] = *reinterpret_cast<const uint2*>(stage + kSwOffset + (wp.col0 + ni * 8 + wp.group) * 8);
    }
    uint2 sa[2][2];
#pragma unroll
    for (int mi = 0; mi < kM16s; ++mi)
#pragma unroll
      for (int h = 0; h < 2; ++h)
        sa[mi][h] = *reinterpret_cast<const uint2*>(stage + kSaOffset + (wp.row0 + mi * 16 + wp.group + 8 * h) * 8);

#pragma unroll
    for (int m = 0; m < 4; ++m) {
      uint32_t b_e4m3[4][2];
#pragma unroll
      for (int ni = 0; ni < 4; ++ni) {
        const uint32_t word = m == 0 ? bw[ni].x : m == 1 ? bw[ni].y : m == 2 ? bw[ni].z : bw[ni].w;
        decode_fp4_word(word, b_e4m3[ni][0], b_e4m3[ni][1]);
      }
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int j = 2 * m + half;  // k16 block within the step
        uint32_t a[2][4];
#pragma unroll
        for (int mi = 0; mi < kM16s; ++mi)
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int r = wp.row0 + mi * 16 + wp.group + 8 * h;
            const uint32_t x16 = *reinterpret_cast<const uint16_t*>(stage + r * kARowStride + j * 8 + wp.thread_in_group * 2);
            const uint32_t e4 = decode_fp4x4_standard(x16);
            const uint32_t sword = j < 4 ? sa[mi][h].x : sa[mi][h].y;
            const uint32_t s2 = scale_f16x2((sword >> (8 * (j % 4))) & 0xFF);
            a[mi][h] = ptx::hmul2_f16(ptx::cvt_f16x2_from_e4m3x2(static_cast<uint16_t>(e4 & 0xFFFF)), s2);
            a[mi][2 + h] = ptx::hmul2_f16(ptx::cvt_f16x2_from_e4m3x2(static_cast<uint16_t>(e4 >> 16)), s2);
          }
#pragma unroll
        for (int ni = 0; ni < 4; ++ni) {
          const uint32_t e4 = b_e4m3[ni][half];
          const uint32_t sword = j < 4 ? sw[ni].x : sw[ni].y;
          const uint32_t s2 = scale_f16x2((sword >> (8 * (j % 4))) & 0xFF);
          const uint32_t b0 = ptx::hmul2_f16(ptx::cvt_f16x2_from_e4m3x2(static_cast<uint16_t>(e4 & 0xFFFF)), s2);
          const uint32_t b1 = ptx::hmul2_f16(ptx::cvt_f16x2_from_e4m3x2(static_cast<uint16_t>(e4 >> 16)), s2);
#pragma unroll
          for (int mi = 0; mi < kM16s; ++mi) ptx::mma_m16n8k16_f16(acc[mi][ni], a[mi], b0, b1, acc[mi][ni]);
        }
      }
    }
  }

  static __device__ __forceinline__ void run(const GroupedGemmOperands& op, const TileCoord& t,
                                             uint8_t* smem, Accumulators& acc) {
    const WarpPosition wp = warp_position();
    zero_accumulators(acc);
    run_mma_stage_ring<kStages, kStageBytes, Copies>(op, t, smem, wp, [&](const uint8_t* stage, auto m16s) {
      compute_m16s<decltype(m16s)::value>(stage, wp, acc);
    });
  }
};

}  // namespace moe_ep::cuda
