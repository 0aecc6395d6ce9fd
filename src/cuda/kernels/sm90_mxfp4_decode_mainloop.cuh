// Small-batch (decode) mxfp4 x Q8 grouped GEMM: mma.sync m16n8k32 with the operands swapped.
// The weights are the m16 side, straight from the micro-tile layout into registers (a warp's
// two micro-tiles 2w, 2w+1 of the block are exactly the A fragments of 16 output features:
// word kb of lane 4g+t decodes to a0/a2 for row g, the second micro-tile's to a1/a3); the
// tile's rows (tokens) are the n side, two n8 halves of a 16-row m tile:
//   acc[n, r] += mma_k32(w[n, kb], a[r, kb]) * 2^sa[r, kb] * 2^sw[n, kb]   (folded: * 2^sa only)
// The same products and the same per-k32 fp32 promotion as Mxfp4MainloopT, so the outputs are
// bitwise those of the 64 x 128 mma.sync kernels, with 16-row instead of 64-row tiles and the
// weights read once per m tile without a shared-memory round trip.
//
// Block: kDecodeThreads (8 warps) = kDecodeBlockN weight rows (16 per warp) x one m tile of
// kDecodeBlockM rows (routing block_m); block b = m_tile * (N / kDecodeBlockN) + n chunk.
// Weights stream from global memory kPrefetch k steps ahead of the MMAs (read once, L1 bypassed).
//
// Shared memory (decode_shared_bytes(K)):
//   A   16 rows x K bytes e4m3; 16-byte chunk c of row r at r*K + (c & ~7)*16 + ((c ^ r) & 7)*16
//       (XOR inside each 128-byte k step, so the ldmatrix rows of 8 tokens hit 8 bank groups)
//   SA  16 rows x K/32 E8M0 bytes
//   tables (folded): 15 x 8 B, then the epilogue's 8 warps x 16 floats (before the main loop:
//   the tile's 16 source rows)
#pragma once

#include <cstdint>

#include "cuda/kernels/sm90_grouped_gemm.h"
#include "cuda/kernels/sm90_mxfp4_mainloop.cuh"
#include "cuda/ptx/cp_async.cuh"
#include "cuda/ptx/ld_global.cuh"
#include "cuda/ptx/ldmatrix.cuh"
#include "cuda/ptx/mma.cuh"
#include "cuda/tile/fp4_codec.h"
#include "cuda/tile/quant_device.cuh"

namespace moe_ep::cuda {

inline constexpr int kDecodeWarps = kDecodeThreads / 32;
static_assert(kDecodeBlockN == 16 * kDecodeWarps && kDecodeBlockM == 16, "16 weight rows per warp, two n8 halves");

constexpr int decode_tables_offset(int k) { return kDecodeBlockM * k + kDecodeBlockM * (k / 32); }
constexpr int decode_shared_bytes(int k) { return decode_tables_offset(k) + 128 + kDecodeWarps * 16 * 4; }

struct DecodeTile {
  int expert, row_begin, num_rows, n_chunk;
};

// Accumulators of one thread: acc[h][c] = C fragment c of n8 half h (tokens 8h + 2t + {0,1},
// features 16w + g (c = 0, 1) and 16w + 8 + g (c = 2, 3)).
using DecodeAccumulators = float[2][4];

template <bool kFolded>
struct Mxfp4DecodeMainloop {
  static constexpr int kPrefetch = 4;  // k steps of weights in registers ahead of the MMAs

  static __device__ __forceinline__ void load_a(const GroupedGemmOperands& op, const DecodeTile& t,
                                                uint8_t* smem) {
    const int k = op.k, chunks_per_row = k / 16, rows = t.num_rows > 8 ? 16 : 8;
    // The tile's source rows once, in the epilogue's (not yet used) shared memory: one global
    // round trip instead of one per copy loop iteration.
    int32_t* source = reinterpret_cast<int32_t*>(smem + decode_tables_offset(k) + 128);
    if (threadIdx.x < kDecodeBlockM)
      source[threadIdx.x] = static_cast<int>(threadIdx.x) < t.num_rows ? a_source_row(op, t.row_begin + threadIdx.x) : 0;
    __syncthreads();
    const uint32_t a_base = ptx::smem_addr(smem);
    for (int i = threadIdx.x; i < rows * chunks_per_row; i += kDecodeThreads) {
      const int r = i / chunks_per_row, c = i % chunks_per_row;
      const bool valid = r < t.num_rows;
      const uint8_t* src = valid ? op.a + static_cast<int64_t>(source[r]) * op.a_row_bytes + c * 16 : op.a;
      ptx::cp_async_16(a_base + r * k + (c & ~7) * 16 + ((c ^ r) & 7) * 16, src, valid ? 16 : 0);
    }
    const uint32_t sa_base = a_base + kDecodeBlockM * k;
    const int words_per_row = k / 128;
    for (int i = threadIdx.x; i < rows * words_per_row; i += kDecodeThreads) {
      const int r = i / words_per_row, c = i % words_per_row;
      const bool valid = r < t.num_rows;
      const uint8_t* src = valid ? op.a_scale + static_cast<int64_t>(source[r]) * op.a_scale_row_bytes + c * 4 : op.a_scale;
      ptx::cp_async_4(sa_base + r * (k / 32) + c * 4, src, valid ? 4 : 0);
    }
    ptx::cp_async_commit();
  }

  static __device__ __forceinline__ void run(const GroupedGemmOperands& op, const DecodeTile& t, uint8_t* smem,
                                             DecodeAccumulators& acc) {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, tq = lane % 4;
    const int k = op.k, k_steps = k / kGemmBlockK;
    const bool two_halves = t.num_rows > 8;  // block-uniform
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
      for (int c = 0; c < 4; ++c) acc[h][c] = 0.0f;

    // This warp's two micro-tiles and the scale / shift words of its rows g and g + 8.
    const int64_t n8 = static_cast<int64_t>(t.expert) * (op.n / 8) + t.n_chunk * (kDecodeBlockN / 8) + 2 * warp;
    const uint8_t* w_ptr[2];
    const uint8_t* s_ptr[2];
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      w_ptr[j] = op.w + (n8 + j) * k_steps * kWeightMicroTileBytes + lane * 16;
      const int64_t n = static_cast<int64_t>(t.n_chunk) * kDecodeBlockN + 16 * warp + 8 * j + g;
      s_ptr[j] = op.w_scale + (static_cast<int64_t>(t.expert) * k_steps * op.n + n) * 4;
    }
    const int64_t s_step = static_cast<int64_t>(op.n) * 4;
    uint4 wbuf[kPrefetch][2];
    uint32_t sbuf[kPrefetch][2];
    auto fetch = [&](int slot, int ks) {
      if (ks < k_steps) {
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          wbuf[slot][j] = ptx::ld_stream_v4(w_ptr[j] + static_cast<int64_t>(ks) * kWeightMicroTileBytes);
          sbuf[slot][j] = ptx::ld_stream_u32(s_ptr[j] + ks * s_step);
        }
      }
    };
#pragma unroll
    for (int s = 0; s < kPrefetch; ++s) fetch(s, s);

    uint32_t* tables = reinterpret_cast<uint32_t*>(smem + decode_tables_offset(k));
    if constexpr (kFolded) fill_folded_tables(tables);
    load_a(op, t, smem);
    ptx::cp_async_wait<0>();
    __syncthreads();

    const uint32_t a_base = ptx::smem_addr(smem);
    const uint8_t* sa_smem = smem + kDecodeBlockM * k;
    for (int ks0 = 0; ks0 < k_steps; ks0 += kPrefetch) {
#pragma unroll
      for (int s = 0; s < kPrefetch; ++s) {
        const int ks = ks0 + s;
        if (ks >= k_steps) break;
        const uint4 w0 = wbuf[s][0], w1 = wbuf[s][1];
        const uint32_t sw0 = sbuf[s][0], sw1 = sbuf[s][1];
        fetch(s, ks + kPrefetch);
        step(a_base, sa_smem, tables, k, ks, two_halves, lane, tq, w0, w1, sw0, sw1, acc);
      }
    }
  }

  // One 128-wide k step: 4 k32 blocks x (1 or 2) n8 halves.
  static __device__ __forceinline__ void step(uint32_t a_base, const uint8_t* sa_smem, const uint32_t* tables,
                                              int k, int ks, bool two_halves, int lane, int tq, const uint4& w0,
                                              const uint4& w1, uint32_t sw0, uint32_t sw1,
                                              DecodeAccumulators& acc) {
    uint32_t b[2][2][4];   // [half][k32 pair] ldmatrix x4: b0/b1 of k blocks 2p and 2p + 1
    uint32_t sa_word[2][2];  // [half][token 2t + c]: E8M0 of the 4 k blocks
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      if (h == 1 && !two_halves) break;
      const int r = 8 * h + (lane & 7);
#pragma unroll
      for (int p = 0; p < 2; ++p) {
        const int c = 8 * ks + 4 * p + (lane >> 3);
        ptx::ldmatrix_x4(b[h][p], a_base + r * k + (c & ~7) * 16 + ((c ^ r) & 7) * 16);
      }
#pragma unroll
      for (int c = 0; c < 2; ++c)
        sa_word[h][c] = *reinterpret_cast<const uint32_t*>(sa_smem + (8 * h + 2 * tq + c) * (k / 32) + ks * 4);
    }
#pragma unroll
    for (int kb = 0; kb < 4; ++kb) {
      const uint32_t word0 = kb == 0 ? w0.x : kb == 1 ? w0.y : kb == 2 ? w0.z : w0.w;
      const uint32_t word1 = kb == 0 ? w1.x : kb == 1 ? w1.y : kb == 2 ? w1.z : w1.w;
      uint32_t a[4];  // a0 = row g lo, a1 = row g + 8 lo, a2 = row g hi, a3 = row g + 8 hi
      if constexpr (kFolded) {
        folded_decode(tables, word0, (sw0 >> (8 * kb)) & 0xFF, a[0], a[2]);
        folded_decode(tables, word1, (sw1 >> (8 * kb)) & 0xFF, a[1], a[3]);
      } else {
        decode_fp4_word(word0, a[0], a[2]);
        decode_fp4_word(word1, a[1], a[3]);
      }
      float s_w0 = 1.0f, s_w1 = 1.0f;
      if constexpr (!kFolded) {
        s_w0 = e8m0_to_float_device((sw0 >> (8 * kb)) & 0xFF);
        s_w1 = e8m0_to_float_device((sw1 >> (8 * kb)) & 0xFF);
      }
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        if (h == 1 && !two_halves) break;
        const float zero[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        float part[4];
        ptx::mma_m16n8k32_e4m3(part, a, b[h][kb / 2][2 * (kb % 2)], b[h][kb / 2][2 * (kb % 2) + 1], zero);
        const float sa0 = e8m0_to_float_device((sa_word[h][0] >> (8 * kb)) & 0xFF);
        const float sa1 = e8m0_to_float_device((sa_word[h][1] >> (8 * kb)) & 0xFF);
        if constexpr (kFolded) {
          acc[h][0] = fmaf(part[0], sa0, acc[h][0]);
          acc[h][1] = fmaf(part[1], sa1, acc[h][1]);
          acc[h][2] = fmaf(part[2], sa0, acc[h][2]);
          acc[h][3] = fmaf(part[3], sa1, acc[h][3]);
        } else {  // the operand order of Mxfp4MainloopT: sa * sw
          acc[h][0] = fmaf(part[0], sa0 * s_w0, acc[h][0]);
          acc[h][1] = fmaf(part[1], sa1 * s_w0, acc[h][1]);
          acc[h][2] = fmaf(part[2], sa0 * s_w1, acc[h][2]);
          acc[h][3] = fmaf(part[3], sa1 * s_w1, acc[h][3]);
        }
      }
    }
  }
};

__device__ __forceinline__ bool decode_tile(const GroupedGemmSchedule& s, int n, DecodeTile& t) {
  const int n_chunks = n / kDecodeBlockN;
  const int m_tile = blockIdx.x / n_chunks;
  if (m_tile >= *s.num_m_tiles) return false;
  t.n_chunk = blockIdx.x % n_chunks;
  t.expert = s.tile_expert[m_tile];
  t.row_begin = s.tile_row_begin[m_tile];
  t.num_rows = min(kDecodeBlockM, s.expert_offsets[t.expert + 1] - t.row_begin);
  return true;
}

}  // namespace moe_ep::cuda
