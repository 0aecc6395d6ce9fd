// The work of one block of the decode (small-batch) GEMMs, shared by the mxfp4 and nvfp4
// families: 8 warps x 16 weight rows (the MMA's m side) against one m tile of up to 16 routed
// rows (the n side, two n8 halves). Block b = m_tile * (N / kDecodeBlockN) + n chunk.
#pragma once

#include "cuda/kernels/sm90_grouped_gemm.h"

namespace moe_ep::cuda {

inline constexpr int kDecodeWarps = kDecodeThreads / 32;
static_assert(kDecodeBlockN == 16 * kDecodeWarps && kDecodeBlockM == 16, "16 weight rows per warp, two n8 halves");

struct DecodeTile {
  int expert, row_begin, num_rows, n_chunk;
};

// Accumulators of one thread: acc[h][c] = C fragment c of n8 half h (tokens 8h + 2t + {0,1},
// features 16w + g (c = 0, 1) and 16w + 8 + g (c = 2, 3)).
using DecodeAccumulators = float[2][4];

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
