// Grouped (per-expert) GEMMs of the layer: host-visible parameters and launchers.
//
// Rows of every GEMM are the permuted (expert-grouped) rows of sm90_permute: expert e owns rows
// [expert_offsets[e], expert_offsets[e+1]). The routing kernel also lists the m-tiles
// (tile_expert, tile_row_begin; kGemmBlockM rows each, the last one of an expert partial), so
// the persistent GEMM grid walks tiles = m_tile * (n / kGemmBlockN) + n_tile without a host sync.
//
// Weight layouts (written by weight_layout.cpp; N = output features, K = reduction):
//   w        [E][N/8][K/128][512 B]  micro-tiles of 8 rows x 128 k; lane l = 4*g + t of a warp
//                                    owns bytes [16l, 16l+16): row g, four 32-bit words.
//            mxfp4: word j = k block j (32 wide), values k = 32j + 4t + {0..3} (lo) and
//                   32j + 16 + 4t + {0..3} (hi), in the nibble order of tile/fp4_codec.h.
//            nvfp4: word j = k16 blocks 2j (lo) and 2j+1 (hi), values 16b + 4t + {0..3}.
//   w_scale  mxfp4: [E][K/128][N][4]  E8M0 of the four k32 blocks of a 128-wide k step (or,
//                                    folded, their shifts 0..14 with w_col_scale)
//            nvfp4: [E][K/128][N][8]  e4m3 of the eight k16 blocks
//   GEMM 1 rows are interleaved by 8: row block 2b holds gate rows 8b..8b+7, block 2b+1 the
//   up rows I+8b..; so a 128-wide n tile yields 64 complete SwiGLU outputs.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

namespace moe_ep::cuda {

inline constexpr int kGemmBlockM = 64;
inline constexpr int kGemmBlockN = 128;
inline constexpr int kGemmBlockK = 128;
inline constexpr int kGemmThreads = 256;
inline constexpr int kWeightMicroTileBytes = 512;  // 8 rows x 128 k of FP4

struct GroupedGemmSchedule {
  const int32_t* num_m_tiles;     // [1]
  const int32_t* tile_expert;     // [max_m_tiles]
  const int32_t* tile_row_begin;  // [max_m_tiles]
  const int32_t* expert_offsets;  // [E + 1]
  int32_t num_experts = 0;        // E (the walks over experts: TileWalk::kOddLast)
};

struct GroupedGemmOperands {
  int32_t n = 0, k = 0;
  // A: row r of the GEMM reads A row a_row_index[r] (identity when null).
  const uint8_t* a = nullptr;        // mxfp4: e4m3 [rows, k]; nvfp4: packed e2m1 [rows, k/2]
  int64_t a_row_bytes = 0;
  const uint8_t* a_scale = nullptr;  // mxfp4: E8M0 [rows, k/32]; nvfp4: e4m3 [rows, k/16]
  int64_t a_scale_row_bytes = 0;
  const float* a_global = nullptr;   // nvfp4: per A row encode factor g (dequant q * s / g)
  const int32_t* a_row_index = nullptr;
  const uint8_t* w = nullptr;
  const uint8_t* w_scale = nullptr;
  const float* w_global = nullptr;   // nvfp4: [E] weight_scale_2
  // mxfp4 folded into the FP8 window (w_scale = shifts, tile/fp4_codec.h): factor of output
  // column n of expert e, [E][N]; the epilogues multiply the fp32 accumulator by it.
  const float* w_col_scale = nullptr;
};

// GEMM 1 epilogue: gu = bf16(acc); h = silu(min(gate, c)) * clamp(up, -c, c) * row_weight.
// mxfp4 writes Q8(h) (e4m3 [rows, I] + E8M0 [rows, I/32]); nvfp4 writes fp32 h [rows, I].
struct SwigluEpilogueParams {
  const float* row_weight = nullptr;  // [rows]
  float clamp = 0.0f;                 // +inf when the layer has no clamp
  int32_t fast_math = 0;
  int32_t intermediate = 0;           // I
  uint8_t* h_q = nullptr;
  uint8_t* h_scale = nullptr;
  float* h_f32 = nullptr;
};

// GEMM 2 epilogue: o = bf16(acc) [rows, n].
struct StoreEpilogueParams {
  uint16_t* out = nullptr;
  // The decode GEMM 2 with the combine fused (launch_sm90_*_decode_gemm2_combine; unused by the
  // other kernels): y [T, n] as kernels/sm90_combine.h writes it (no addend), each token's 128
  // columns of a chunk by the block that stores the last of its slot rows there. counters
  // [T, n / kDecodeBlockN] are zero before the launch, and are again after it (the block that
  // completes one resets it).
  uint16_t* y = nullptr;
  const int32_t* slot_row = nullptr;   // [T, top_k], -1 for a slot without a row
  const int32_t* row_token = nullptr;  // [rows]
  uint32_t* counters = nullptr;
  int32_t num_tokens = 0, top_k = 0;
};

struct Gemm1Params {
  GroupedGemmSchedule schedule;
  GroupedGemmOperands op;
  SwigluEpilogueParams epilogue;
};

struct Gemm2Params {
  GroupedGemmSchedule schedule;
  GroupedGemmOperands op;
  StoreEpilogueParams epilogue;
};

// configure_*: raises the kernel's shared-memory limit and reports how many blocks fit on one
// multiprocessor (the persistent grid is at most that times the SM count). Called at plan time.
cudaError_t configure_sm90_mxfp4_grouped_gemm1(int* blocks_per_sm);
cudaError_t configure_sm90_mxfp4_grouped_gemm2(int* blocks_per_sm);
cudaError_t configure_sm90_nvfp4_grouped_gemm1(int* blocks_per_sm);
cudaError_t configure_sm90_nvfp4_grouped_gemm2(int* blocks_per_sm);

cudaError_t launch_sm90_mxfp4_grouped_gemm1(const Gemm1Params& params, int grid, cudaStream_t stream);
cudaError_t launch_sm90_mxfp4_grouped_gemm2(const Gemm2Params& params, int grid, cudaStream_t stream);
cudaError_t launch_sm90_nvfp4_grouped_gemm1(const Gemm1Params& params, int grid, cudaStream_t stream);
cudaError_t launch_sm90_nvfp4_grouped_gemm2(const Gemm2Params& params, int grid, cudaStream_t stream);

// wgmma (sm_90a) mxfp4 grouped GEMMs, warp-specialized (sm90_mxfp4_wgmma_mainloop.cuh), for
// FOLDED weights only (w_scale = shifts 0..14, w_col_scale set). Same params and outputs as
// the mma.sync kernels above; the routing must list m-tiles of the tile's block_m, and n must
// be a multiple of its block_n.
enum class WgmmaTile { k64x256, k128x128 };
struct WgmmaTileShape {
  int block_m, block_n;
};
constexpr WgmmaTileShape wgmma_tile_shape(WgmmaTile tile) {
  return tile == WgmmaTile::k64x256 ? WgmmaTileShape{64, 256} : WgmmaTileShape{128, 128};
}
inline constexpr WgmmaTile kWgmmaDefaultTile = WgmmaTile::k64x256;
inline constexpr int kWgmmaBlockM = wgmma_tile_shape(kWgmmaDefaultTile).block_m;
inline constexpr int kWgmmaThreads = 384;  // 1 producer + 2 consumer warpgroups

// Producer decode mapping (sm90_mxfp4_wgmma_mainloop.cuh): kQuad (default) or kLane, kept for A/B.
enum class WgmmaDecode { kQuad, kLane };

cudaError_t configure_sm90_mxfp4_wgmma_grouped_gemm1(WgmmaTile tile, int* blocks_per_sm,
                                                     WgmmaDecode decode = WgmmaDecode::kQuad);
cudaError_t configure_sm90_mxfp4_wgmma_grouped_gemm2(WgmmaTile tile, int* blocks_per_sm,
                                                     WgmmaDecode decode = WgmmaDecode::kQuad);
cudaError_t launch_sm90_mxfp4_wgmma_grouped_gemm1(WgmmaTile tile, const Gemm1Params& params, int grid,
                                                  cudaStream_t stream, WgmmaDecode decode = WgmmaDecode::kQuad);
cudaError_t launch_sm90_mxfp4_wgmma_grouped_gemm2(WgmmaTile tile, const Gemm2Params& params, int grid,
                                                  cudaStream_t stream, WgmmaDecode decode = WgmmaDecode::kQuad);

// bf16-wgmma mxfp4 grouped GEMMs with the weights as the register operand
// (sm90_rs16_mainloop.cuh), FOLDED weights only: A is bf16 [rows, k] in the rs order along k
// (launch_sm90_q8_to_rs_bf16; a_row_bytes = 2k, no a_scale), m tiles of kRsBlockM rows, n and k
// multiples of 128. Same epilogue params and outputs as the kernels above.
inline constexpr int kRsBlockM = 128;
inline constexpr int kRsThreads = 384;  // 1 producer + 2 consumer warpgroups
cudaError_t configure_sm90_mxfp4_rs_grouped_gemm1(int* blocks_per_sm);
cudaError_t configure_sm90_mxfp4_rs_grouped_gemm2(int* blocks_per_sm);
cudaError_t launch_sm90_mxfp4_rs_grouped_gemm1(const Gemm1Params& params, int grid, cudaStream_t stream);
cudaError_t launch_sm90_mxfp4_rs_grouped_gemm2(const Gemm2Params& params, int grid, cudaStream_t stream);
// The same GEMMs on four consumer warpgroups (sm90_rs16_wide_mainloop.cuh): m tiles of
// kRsWideBlockM rows, n tiles of kRsWideBlockN; the same A, params and outputs, bitwise.
inline constexpr int kRsWideBlockM = 64;
inline constexpr int kRsWideBlockN = 256;
cudaError_t configure_sm90_mxfp4_rs_wide_grouped_gemm1(int* blocks_per_sm);
cudaError_t configure_sm90_mxfp4_rs_wide_grouped_gemm2(int* blocks_per_sm);
cudaError_t launch_sm90_mxfp4_rs_wide_grouped_gemm1(const Gemm1Params& params, int grid, cudaStream_t stream);
cudaError_t launch_sm90_mxfp4_rs_wide_grouped_gemm2(const Gemm2Params& params, int grid, cudaStream_t stream);
// GEMM 1 of those on 128-token tiles (m64n128k16 wgmmas) over the routing's list of
// kRsWideBlockM-row m tiles: an expert's full pairs of list tiles as 128-token tiles, then (a
// second launch, 64-token tiles) its odd last list tile, so no tile carries more than 63 empty
// rows. The same A, params and outputs, bitwise; its GEMM 2 can stay on 64-row tiles (wgmma-rs
// 64x256) over the same routing. Needs schedule.num_experts.
inline constexpr int kRsWide128BlockM = 128;
cudaError_t configure_sm90_mxfp4_rs_wide128_grouped_gemm1(int* blocks_per_sm);
cudaError_t launch_sm90_mxfp4_rs_wide128_grouped_gemm1(const Gemm1Params& params, int grid, cudaStream_t stream);
// A of the 16-bit register-operand GEMMs (wgmma-bf16, nvfp4-wgmma): 16-bit rows of op.k
// elements in their kernel's order, no block scales (an nvfp4 row keeps its a_global factor).
inline void set_16bit_activations(GroupedGemmOperands& op, const uint16_t* a) {
  op.a = reinterpret_cast<const uint8_t*>(a);
  op.a_row_bytes = 2 * static_cast<int64_t>(op.k);
  op.a_scale = nullptr;
  op.a_scale_row_bytes = 0;
}
// Q8 rows (e4m3 [rows, k] + E8M0 [rows, k / 32]) -> bf16 [rows, k]: element k' of each 128-wide
// k step at position rs_position_of_k(k') of that step, value e4m3 * 2^(E8M0 - 127) (exact).
// rows bounds the grid; row_count (device, may be null) the rows converted, when it is smaller
// (the routed rows of h: rows past them are neither read nor written).
cudaError_t launch_sm90_q8_to_rs_bf16(const uint8_t* a, const uint8_t* a_scale, int64_t rows,
                                      const int32_t* row_count, int k, uint16_t* out, cudaStream_t stream);

// f16-wgmma nvfp4 grouped GEMMs with the weights as the register operand
// (sm90_rs16_mainloop.cuh, Nvfp4F16RsWeights): A is f16 [rows, k] in the order of
// tile/nvfp4_f16_codec.h (launch_sm90_nvfp4_to_rs_f16; a_row_bytes = 2k, no a_scale; a_global
// and w_global as for the nvfp4 kernels above), m tiles of kRsBlockM rows, n and k multiples of
// 128. Same params and outputs as the nvfp4 kernels above (GEMM 1: fp32 h; GEMM 2: bf16 o).
cudaError_t configure_sm90_nvfp4_rs_grouped_gemm1(int* blocks_per_sm);
cudaError_t configure_sm90_nvfp4_rs_grouped_gemm2(int* blocks_per_sm);
cudaError_t launch_sm90_nvfp4_rs_grouped_gemm1(const Gemm1Params& params, int grid, cudaStream_t stream);
cudaError_t launch_sm90_nvfp4_rs_grouped_gemm2(const Gemm2Params& params, int grid, cudaStream_t stream);
// The same on 64-token x 256-row tiles, four consumer warpgroups (kRsWideBlockM x kRsWideBlockN).
cudaError_t configure_sm90_nvfp4_rs_wide_grouped_gemm1(int* blocks_per_sm);
cudaError_t configure_sm90_nvfp4_rs_wide_grouped_gemm2(int* blocks_per_sm);
cudaError_t launch_sm90_nvfp4_rs_wide_grouped_gemm1(const Gemm1Params& params, int grid, cudaStream_t stream);
cudaError_t launch_sm90_nvfp4_rs_wide_grouped_gemm2(const Gemm2Params& params, int grid, cudaStream_t stream);
// NVFP4 rows (packed e2m1 [rows, k / 2] in standard order + e4m3 [rows, k / 16]) -> f16 [rows, k]:
// element k' of each 128-wide k step at position nvfp4_f16_position_of_k(k') of that step, value
// e2m1 * e4m3 block scale (exact; the row's global factor stays with the GEMM's epilogue). rows
// and row_count as for launch_sm90_q8_to_rs_bf16.
cudaError_t launch_sm90_nvfp4_to_rs_f16(const uint8_t* packed, const uint8_t* scales, int64_t rows,
                                        const int32_t* row_count, int k, uint16_t* out, cudaStream_t stream);

// FP8-wgmma mxfp4 grouped GEMMs with the weights as the register operand
// (sm90_mxfp4_rs_fp8_mainloop.cuh), FOLDED weights only: A and its scales are the Q8 rows as for
// the kernels above, m tiles of block_m = 64 or 96 rows (the routing must list tiles of that
// size), n a multiple of block_n, k of 128. Same params and outputs as the kernels above.
// block_n = kRsFp8BlockN (two consumer warpgroups), or kRsFp8WideBlockN with block_m = 64 (four:
// the same outputs, bit for bit). narrow_tails (four consumers only): a tile of at most 48 rows runs
// n48 wgmmas (the same outputs; faster where experts hold few rows, slower where they hold many).
inline constexpr int kRsFp8BlockN = 128;
inline constexpr int kRsFp8WideBlockN = 256;
cudaError_t configure_sm90_mxfp4_rs_fp8_grouped_gemm1(int block_m, int* blocks_per_sm, int block_n = kRsFp8BlockN,
                                                      bool narrow_tails = false);
cudaError_t configure_sm90_mxfp4_rs_fp8_grouped_gemm2(int block_m, int* blocks_per_sm, int block_n = kRsFp8BlockN,
                                                      bool narrow_tails = false);
cudaError_t launch_sm90_mxfp4_rs_fp8_grouped_gemm1(int block_m, const Gemm1Params& params, int grid,
                                                   cudaStream_t stream, int block_n = kRsFp8BlockN,
                                                   bool narrow_tails = false);
cudaError_t launch_sm90_mxfp4_rs_fp8_grouped_gemm2(int block_m, const Gemm2Params& params, int grid,
                                                   cudaStream_t stream, int block_n = kRsFp8BlockN,
                                                   bool narrow_tails = false);

// Decode (small-batch) mxfp4 grouped GEMMs (sm90_mxfp4_decode_mainloop.cuh): mma.sync with the
// weights on the m16 side, 16-row m tiles (the routing must list tiles of kDecodeBlockM rows),
// n a multiple of kDecodeBlockN; E8M0 block scales or folded weights; outputs bitwise those of
// the kernels above. Not persistent: m_tile_bound x n / kDecodeBlockN blocks, the ones past the
// routing's tile count return at once. configure_* take the reduction size k (shared memory
// holds the tile's 16 rows of A).
inline constexpr int kDecodeBlockM = 16;
inline constexpr int kDecodeBlockN = 128;
inline constexpr int kDecodeThreads = 256;
// k steps of weights each warp keeps in registers ahead of its MMAs (three blocks per SM).
inline constexpr int kDecodePrefetch = 2;
cudaError_t configure_sm90_mxfp4_decode_gemm1(int k, int* blocks_per_sm);
cudaError_t configure_sm90_mxfp4_decode_gemm2(int k, int* blocks_per_sm);
cudaError_t launch_sm90_mxfp4_decode_gemm1(const Gemm1Params& params, int m_tile_bound, cudaStream_t stream);
cudaError_t launch_sm90_mxfp4_decode_gemm2(const Gemm2Params& params, int m_tile_bound, cudaStream_t stream);
// The same mxfp4 decode GEMMs with kDecodeDeepPrefetch k steps of weights in registers ahead of
// the MMAs instead of kDecodePrefetch (two blocks per SM instead of three): twice the bytes in
// flight per warp, for T of a few tokens, where fewer blocks than SMs x 2 run. Outputs bitwise
// those of the kernels above. The layer runs them by override (KernelOverrides::decode_prefetch);
// nvfp4's below.
inline constexpr int kDecodeDeepPrefetch = 4;
cudaError_t configure_sm90_mxfp4_decode_deep_gemm1(int k, int* blocks_per_sm);
cudaError_t configure_sm90_mxfp4_decode_deep_gemm2(int k, int* blocks_per_sm);
cudaError_t launch_sm90_mxfp4_decode_deep_gemm1(const Gemm1Params& params, int m_tile_bound, cudaStream_t stream);
cudaError_t launch_sm90_mxfp4_decode_deep_gemm2(const Gemm2Params& params, int m_tile_bound, cudaStream_t stream);
// The mxfp4 decode GEMMs with K split in two halves inside each block (blocks of 64 weight rows:
// m_tile_bound x n / 64 of them): two warps walk each row group's K, so a warp's serial walk is
// half as long, for the one or two tokens a tile where that walk bounds the GEMM. The halves'
// sums are added in a fixed order (deterministic; not bitwise the kernels above: within the
// recipe's threshold). k a multiple of 1024 (whole A chunks per half), else cudaErrorInvalidValue.
cudaError_t configure_sm90_mxfp4_decode_split_gemm1(int k, int* blocks_per_sm);
cudaError_t configure_sm90_mxfp4_decode_split_gemm2(int k, int* blocks_per_sm);
cudaError_t launch_sm90_mxfp4_decode_split_gemm1(const Gemm1Params& params, int m_tile_bound, cudaStream_t stream);
cudaError_t launch_sm90_mxfp4_decode_split_gemm2(const Gemm2Params& params, int m_tile_bound, cudaStream_t stream);
// The nvfp4 decode GEMMs (sm90_nvfp4_decode_mainloop.cuh): the same blocks and launch rule, f16
// mma.sync on NVFP4 operands decoded in registers; outputs those of the nvfp4 kernels above.
cudaError_t configure_sm90_nvfp4_decode_gemm1(int k, int* blocks_per_sm);
cudaError_t configure_sm90_nvfp4_decode_gemm2(int k, int* blocks_per_sm);
cudaError_t launch_sm90_nvfp4_decode_gemm1(const Gemm1Params& params, int m_tile_bound, cudaStream_t stream);
cudaError_t launch_sm90_nvfp4_decode_gemm2(const Gemm2Params& params, int m_tile_bound, cudaStream_t stream);
// Their deep form (kDecodeDeepPrefetch k steps of weights in flight, as the mxfp4 one above).
cudaError_t configure_sm90_nvfp4_decode_deep_gemm1(int k, int* blocks_per_sm);
cudaError_t configure_sm90_nvfp4_decode_deep_gemm2(int k, int* blocks_per_sm);
cudaError_t launch_sm90_nvfp4_decode_deep_gemm1(const Gemm1Params& params, int m_tile_bound, cudaStream_t stream);
cudaError_t launch_sm90_nvfp4_decode_deep_gemm2(const Gemm2Params& params, int m_tile_bound, cudaStream_t stream);
// Their form with K split in two halves inside each block, as the mxfp4 one above (64 weight rows
// a block; the halves' sums added in a fixed order, within the recipe's threshold of the kernels
// above). k a multiple of 256 and at least 512 (whole k steps per half; the tile's A region holds
// the hand-over: Nvfp4DecodeMainloop::splits), else cudaErrorInvalidValue.
cudaError_t configure_sm90_nvfp4_decode_split_gemm1(int k, int* blocks_per_sm);
cudaError_t configure_sm90_nvfp4_decode_split_gemm2(int k, int* blocks_per_sm);
cudaError_t launch_sm90_nvfp4_decode_split_gemm1(const Gemm1Params& params, int m_tile_bound, cudaStream_t stream);
cudaError_t launch_sm90_nvfp4_decode_split_gemm2(const Gemm2Params& params, int m_tile_bound, cudaStream_t stream);
// The decode GEMM 2 of either recipe with the combine in its epilogue (StoreEpilogueParams' y,
// slot_row, row_token, counters, num_tokens, top_k): one kernel boundary fewer at small T. Block
// m-tile 0 of each chunk also writes the zeros of tokens without a valid slot. Outputs (o and y)
// bitwise those of GEMM 2 followed by launch_sm90_combine without an addend. `prefetch`:
// kDecodePrefetch or kDecodeDeepPrefetch; configure_* once per k before the first launch (it
// reports the blocks that fit on one SM: 0 when the kernel cannot run).
cudaError_t configure_sm90_mxfp4_decode_gemm2_combine(int prefetch, int k, int* blocks_per_sm);
cudaError_t configure_sm90_nvfp4_decode_gemm2_combine(int prefetch, int k, int* blocks_per_sm);
cudaError_t launch_sm90_mxfp4_decode_gemm2_combine(int prefetch, const Gemm2Params& params, int m_tile_bound,
                                                   cudaStream_t stream);
cudaError_t launch_sm90_nvfp4_decode_gemm2_combine(int prefetch, const Gemm2Params& params, int m_tile_bound,
                                                   cudaStream_t stream);

}  // namespace moe_ep::cuda
