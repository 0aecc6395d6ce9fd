// Load-time weight preparation on the GPU: the canonical packed tensors of one GEMM (docs/spec.md §4
// layout, [E, N, K/2] e2m1 + [E, N, K/B] block scales, core/weight_prep.h) -> the SM90 kernel
// layout (cuda/weight_layout.h, kernels/sm90_grouped_gemm.h). The same result, byte for byte, as
// the host conversion make_kernel_weights; tests/cuda/test_sm90_weight_prep.cpp checks it.
//
// Canonical rows are indexed globally: row = e * N + r. Kernel row n of an expert reads
// canonical row source_row(n) = gemm1_source_row(n, I) when `interleave_half` = I > 0 (GEMM 1:
// gate and up rows interleaved by 8), else n.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

namespace moe_ep::cuda {

// MXFP4 row scan, one warp per canonical row of `rows` rows starting at global row first_row:
//   row_lo / row_hi [global row]: smallest / largest E8M0 byte over the row's blocks that hold a
//     non-zero code; lo = 0xFF, hi = 0 when every block is zero (hi < lo marks that case).
//   zero_mask [global row][mask_words]: bit b of the row's mask = block b holds only zeros.
//   first_bad: atomicMin of the flat scale index (global row * K/32 + block) of a 0xFF byte.
struct Mxfp4RowScanParams {
  const uint8_t* packed = nullptr;  // [rows, K/2] of this chunk
  const uint8_t* scales = nullptr;  // [rows, K/32] of this chunk
  int64_t rows = 0, first_row = 0;
  int32_t k = 0;
  uint8_t* row_lo = nullptr;
  uint8_t* row_hi = nullptr;
  uint32_t* zero_mask = nullptr;
  unsigned long long* first_bad = nullptr;
};
constexpr int32_t mxfp4_zero_mask_words(int64_t k) { return static_cast<int32_t>((k / 32 + 31) / 32); }
cudaError_t launch_mxfp4_row_scan(const Mxfp4RowScanParams& p, cudaStream_t stream);

// Packed codes of `experts` experts (one chunk) -> their kernel tiles [E][N/8][K/128][512 B]
// (the element order is the same for MXFP4 and NVFP4).
struct WeightTileParams {
  const uint8_t* packed = nullptr;  // [experts, N, K/2]
  uint8_t* tiles = nullptr;         // [experts, N/8, K/128, 512]
  int64_t experts = 0, n = 0, k = 0, interleave_half = 0;
};
cudaError_t launch_weight_tiles(const WeightTileParams& p, cudaStream_t stream);

// Block scales of all experts -> kernel order [E][K/128][N][128/B]. Folded MXFP4 (row_base set):
// each byte becomes the shift E8M0 - row_base[e][n] of its block, or 0 for an all-zero block
// (zero_mask, from the row scan).
struct WeightScaleParams {
  const uint8_t* scales = nullptr;     // [E, N, K/B]
  uint8_t* out = nullptr;              // [E, K/128, N, 128/B]
  const uint8_t* row_base = nullptr;   // [E, N] kernel order, or null: bytes copied as they are
  const uint32_t* zero_mask = nullptr; // canonical [E*N][mask_words]; needed with row_base
  int64_t experts = 0, n = 0, k = 0, interleave_half = 0;
  int32_t block = 32;                  // 32 (MXFP4) or 16 (NVFP4)
};
cudaError_t launch_weight_scales(const WeightScaleParams& p, cudaStream_t stream);

}  // namespace moe_ep::cuda
