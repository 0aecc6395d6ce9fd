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

  struct Sources {
    const uint8_t* a;
    uint32_t a_bytes;
    const uint8_t* sa;
    uint32_t sa_bytes;
    const uint8_t* w;
    const uint8_t* sw;
  };

  static __device__ __forceinline__ Sources sources(const GroupedGemmOperands& op, const TileCoord& t) {
    const int tid = threadIdx.x;
    Sources s;
    const int r = tid / 4;
    const bool valid = r < t.num_rows;
    const int src = valid ? (op.a_row_index ? op.a_row_index[t.row_begin + r] : t.row_begin + r) : 0;
    s.a = valid ? op.a + static_cast<int64_t>(src) * op.a_row_bytes + (tid % 4) * 16 : op.a;
    s.a_bytes = valid ? 16 : 0;
    const bool sa_valid = tid < t.num_rows;
    s.sa = op.a_scale;
    if (tid < kGemmBlockM && sa_valid) {
      const int row = t.row_begin + tid;
      s.sa = op.a_scale + static_cast<int64_t>(op.a_row_index ? op.a_row_index[row] : row) * op.a_scale_row_bytes;
    }
    s.sa_bytes = sa_valid ? 8 : 0;
    const int64_t k_steps = op.k / kGemmBlockK;
    const int64_t n8 = static_cast<int64_t>(t.expert) * (op.n / 8) + t.n_tile * (kGemmBlockN / 8);
    s.w = op.w + (n8 * k_steps) * kWeightMicroTileBytes;
    s.sw = op.w_scale + (static_cast<int64_t>(t.expert) * k_steps * op.n + t.n_tile * kGemmBlockN) * 8;
    return s;
  }

  static __device__ __forceinline__ void load_stage(const GroupedGemmOperands& op, const Sources& s,
                                                    int k_step, uint8_t* stage) {
    const int tid = threadIdx.x;
    const uint32_t base = ptx::smem_addr(stage);
    const int64_t k_steps = op.k / kGemmBlockK;
    ptx::cp_async_16(base + (tid / 4) * kARowStride + (tid % 4) * 16,
                     s.a + (s.a_bytes ? k_step * (kGemmBlockK / 2) : 0), s.a_bytes);
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int chunk = tid + kGemmThreads * i;
      const int micro = chunk / 32, part = chunk % 32;
      ptx::cp_async_16(base + kBOffset + chunk * 16,
                       s.w + (micro * k_steps + k_step) * kWeightMicroTileBytes + part * 16);
    }
    if (tid < kGemmBlockM) {
      ptx::cp_async_8(base + kSaOffset + tid * 8, s.sa + (s.sa_bytes ? k_step * 8 : 0), s.sa_bytes);
    } else if (tid < kGemmBlockM + kSwBytes / 16) {
      const int part = tid - kGemmBlockM;
      ptx::cp_async_16(base + kSwOffset + part * 16,
                       s.sw + static_cast<int64_t>(k_step) * op.n * 8 + part * 16);
    }
  }

  // e4m3 byte -> f16x2 holding it twice.
  static __device__ __forceinline__ uint32_t scale_f16x2(uint32_t byte) {
    return ptx::cvt_f16x2_from_e4m3x2(static_cast<uint16_t>(byte | (byte << 8)));
  }

  // m16 sub-tiles wholly past the tile's valid rows are skipped (warp-uniform): small-T tiles
  // hold a few rows, and their MMA and scale work would otherwise dominate.
  static __device__ __forceinline__ void compute_stage(const uint8_t* stage, const WarpPosition& wp,
                                                       int num_rows, Accumulators& acc) {
    if (wp.row0 + 16 < num_rows)
      compute_m16s<2>(stage, wp, acc);
    else if (wp.row0 < num_rows)
      compute_m16s<1>(stage, wp, acc);
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
#pragma unroll
    for (int mi = 0; mi < 2; ++mi)
#pragma unroll
      for (int ni = 0; ni < 4; ++ni)
#pragma unroll
        for (int c = 0; c < 4; ++c) acc[mi][ni][c] = 0.0f;

    const Sources s = sources(op, t);
    const int k_steps = op.k / kGemmBlockK;
#pragma unroll
    for (int st = 0; st < kStages - 1; ++st) {
      if (st < k_steps) load_stage(op, s, st, smem + st * kStageBytes);
      ptx::cp_async_commit();
    }
    for (int ks = 0; ks < k_steps; ++ks) {
      ptx::cp_async_wait<kStages - 2>();
      __syncthreads();
      const int next = ks + kStages - 1;
      if (next < k_steps) load_stage(op, s, next, smem + (next % kStages) * kStageBytes);
      ptx::cp_async_commit();
      compute_stage(smem + (ks % kStages) * kStageBytes, wp, t.num_rows, acc);
    }
    ptx::cp_async_wait<0>();
    __syncthreads();
  }
};

}  // namespace moe_ep::cuda
