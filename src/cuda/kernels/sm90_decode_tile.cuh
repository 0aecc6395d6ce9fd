// The work of one block of the decode (small-batch) GEMMs, shared by the mxfp4 and nvfp4
// families: 8 warps x 16 weight rows (the MMA's m side) against one m tile of up to 16 routed
// rows (the n side, two n8 halves). Block b = m_tile * (N / kDecodeBlockN) + n chunk.
#pragma once

#include <cstdint>

#include "cuda/kernels/sm90_grouped_gemm.h"
#include "cuda/ptx/ld_global.cuh"

namespace moe_ep::cuda {

inline constexpr int kDecodeWarps = kDecodeThreads / 32;
static_assert(kDecodeBlockN == 16 * kDecodeWarps && kDecodeBlockM == 16, "16 weight rows per warp, two n8 halves");

// Blocks of 8 warps per SM a decode kernel is built for: 3 (<= 80 registers) with kDecodePrefetch
// k steps of weights in registers ahead of the MMAs.
inline constexpr int kDecodeMinBlocks = 3;

struct DecodeTile {
  int expert, row_begin, num_rows, n_chunk;
};

// Accumulators of one thread: acc[h][c] = C fragment c of n8 half h (tokens 8h + 2t + {0,1},
// features 16w + g (c = 0, 1) and 16w + 8 + g (c = 2, 3)).
using DecodeAccumulators = float[2][4];

__device__ __forceinline__ void zero_accumulators(DecodeAccumulators& acc) {
#pragma unroll
  for (int h = 0; h < 2; ++h)
#pragma unroll
    for (int c = 0; c < 4; ++c) acc[h][c] = 0.0f;
}

// K split in two parts per block (kGroups 16-row groups, warp w in part w / kGroups): the second
// part's warps store their sums at `area` (32 kGroups threads x 8 floats of shared memory that no
// warp reads any more, nothing copies into), the first part's add them to their own (first part
// + second part: the same order every run). Every thread of the block calls it.
template <int kGroups>
__device__ __forceinline__ void add_second_k_half(float* area, DecodeAccumulators& acc) {
  const int part = static_cast<int>(threadIdx.x / 32) / kGroups;
  float* sums = area + (threadIdx.x % (32 * kGroups)) * 8;
  __syncthreads();  // every warp is done reading the area
  if (part == 1) {
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
      for (int c = 0; c < 4; ++c) sums[4 * h + c] = acc[h][c];
  }
  __syncthreads();
  if (part == 0) {
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
      for (int c = 0; c < 4; ++c) acc[h][c] = __fadd_rn(acc[h][c], sums[4 * h + c]);
  }
}

// kBlockRows: the weight rows of a block (kDecodeBlockN; half of it with K split in two).
template <int kBlockRows = kDecodeBlockN>
__device__ __forceinline__ bool decode_tile(const GroupedGemmSchedule& s, int n, DecodeTile& t) {
  const int n_chunks = n / kBlockRows;
  const int m_tile = blockIdx.x / n_chunks;
  if (m_tile >= *s.num_m_tiles) return false;
  t.n_chunk = blockIdx.x % n_chunks;
  t.expert = s.tile_expert[m_tile];
  t.row_begin = s.tile_row_begin[m_tile];
  t.num_rows = min(kDecodeBlockM, s.expert_offsets[t.expert + 1] - t.row_begin);
  return true;
}

// The first of the two micro-tiles (8 weight rows each) of the 16-row group `group` of the block's
// n chunk (kGroups groups), counted over the layer's micro-tiles: micro-tile u's k step ks is at
// op.w + (u * k_steps + ks) * kWeightMicroTileBytes.
template <int kGroups = kDecodeWarps>
__device__ __forceinline__ int64_t decode_micro_tile(const GroupedGemmOperands& op, const DecodeTile& t, int group) {
  return static_cast<int64_t>(t.expert) * (op.n / 8) + t.n_chunk * (2 * kGroups) + 2 * group;
}

// One warp's weights, streamed from global memory into a ring of kPrefetch k steps in registers
// (read once, L1 bypassed): its two micro-tiles 2w, 2w + 1 of the block's n chunk (features
// 16w + g and 16w + 8 + g, lane 4g + t's 16 bytes of each) and the scale word of those two rows
// per k step (ScaleWord: uint32_t = 4 bytes, mxfp4; uint2 = 8 bytes, nvfp4; the [E][K/128][N][bytes]
// layout of sm90_grouped_gemm.h). Slot s holds k step ks with ks % kPrefetch = s: the caller
// consumes a slot, refills it with fetch(slot) (the next k step in order) and calls advance()
// after every round of kPrefetch slots, so nothing is copied between registers.
// kGroups: the block's 16-row groups (warp w streams group w % kGroups); first_step, steps: the
// k steps this warp streams (all of them, or its part of a split K).
template <class ScaleWord, int kPrefetch, int kGroups = kDecodeWarps>
struct DecodeWeightStream {
  static constexpr int kScaleBytes = sizeof(ScaleWord);
  const uint8_t* w_ptr[2];  // micro-tile j at the round's first k step
  const uint8_t* s_ptr;     // row g's scale word at the next k step to fetch (row g + 8: 8 words on)
  int64_t s_step;
  uint4 w[kPrefetch][2];
  ScaleWord s[kPrefetch][2];

  // Fetches k steps first_step .. first_step + kPrefetch - 1 (those of the warp's steps).
  __device__ __forceinline__ DecodeWeightStream(const GroupedGemmOperands& op, const DecodeTile& t, int k_steps,
                                                int first_step = 0, int steps = -1) {
    const int warp = kGroups == kDecodeWarps ? threadIdx.x / 32 : (threadIdx.x / 32) % kGroups;
    const int lane = threadIdx.x % 32, g = lane / 4;
    const int64_t n8 = decode_micro_tile<kGroups>(op, t, warp);
#pragma unroll
    for (int j = 0; j < 2; ++j)
      w_ptr[j] = op.w + ((n8 + j) * k_steps + first_step) * kWeightMicroTileBytes + lane * 16;
    s_step = static_cast<int64_t>(op.n) * kScaleBytes;
    s_ptr = op.w_scale + (static_cast<int64_t>(t.expert) * k_steps * op.n +
                          static_cast<int64_t>(t.n_chunk) * (16 * kGroups) + 16 * warp + g) * kScaleBytes +
            first_step * s_step;
    if (steps < 0) steps = k_steps;
#pragma unroll
    for (int slot = 0; slot < kPrefetch; ++slot)
      if (slot < steps) fetch(slot);
    advance();
  }

  __device__ __forceinline__ void fetch(int slot) {
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      w[slot][j] = ptx::ld_stream_v4(w_ptr[j] + slot * kWeightMicroTileBytes);
      if constexpr (kScaleBytes == 4)
        s[slot][j] = ptx::ld_stream_u32(s_ptr + 8 * kScaleBytes * j);
      else
        s[slot][j] = ptx::ld_stream_v2(s_ptr + 8 * kScaleBytes * j);
    }
    s_ptr += s_step;
  }

  __device__ __forceinline__ void advance() {
#pragma unroll
    for (int j = 0; j < 2; ++j) w_ptr[j] += kPrefetch * kWeightMicroTileBytes;
  }
};

}  // namespace moe_ep::cuda
