// The plan of one CUDA layer, made once at creation: tile configuration, persistent grid sizes
// and the workspace layout. Forward only launches with it.
//
// Workspace (one device allocation, every region 256-byte aligned; R = max_tokens_per_rank,
// M = R * K the most expert rows, B = 32 for mxfp4 / 16 for nvfp4):
//   a            R x H (mxfp4 e4m3) | R x H/2 (nvfp4 packed)     quantized x
//   a_scale      R x H/B                                          block scales of a
//   a_global     R x 4 B (nvfp4)                                  per-token encode factor
//   expert_offsets (E+1) x 4 B, num_m_tiles 4 B,
//   tile_expert, tile_row_begin   max_m_tiles x 4 B each,
//   max_m_tiles = ceil(M / 16) + min(E, M)   (16 rows: the smallest m tile, of the decode GEMMs;
//                                             each non-empty expert adds at most one partial tile)
//   row_token, row_weight, slot_row   M x 4 B each
//   h            M x I (mxfp4) | M x I/2 (nvfp4)                  quantized SwiGLU output
//   h_scale      M x I/B
//   h_global     M x 4 B (nvfp4);  h_f32  M x I x 4 B (nvfp4, before its NVFP4 pass)
//   o            M x H x 2 B                                      expert outputs, bf16
// Every forward rewrites what it reads; nothing needs clearing between forwards.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace moe_ep::cuda {

struct LayerShape {
  int64_t num_experts = 0, hidden = 0, intermediate = 0, top_k = 0, max_tokens = 0;
  bool nvfp4 = false;
};

struct WorkspaceLayout {
  size_t a = 0, a_scale = 0, a_global = 0;
  size_t expert_offsets = 0, num_m_tiles = 0, tile_expert = 0, tile_row_begin = 0;
  size_t row_token = 0, row_weight = 0, slot_row = 0;
  size_t h = 0, h_scale = 0, h_global = 0, h_f32 = 0;
  size_t o = 0;
  size_t total_bytes = 0;
};

struct DeviceLimits {
  int sm_count = 0;
  int gemm1_blocks_per_sm = 0;
  int gemm2_blocks_per_sm = 0;
};

struct Plan {
  LayerShape shape;
  DeviceLimits limits;
  int64_t max_rows = 0;     // M
  int64_t max_m_tiles = 0;
  WorkspaceLayout workspace;

  // Upper bound of the m-tiles of block_m rows of a forward with T tokens (the routing writes
  // the exact count).
  int64_t m_tile_bound(int64_t num_tokens, int block_m = 64) const;
  // Persistent grid of GEMM 1 / GEMM 2 for T tokens.
  int gemm1_grid(int64_t num_tokens) const;
  int gemm2_grid(int64_t num_tokens) const;
  std::string describe() const;  // one line: tiles, grids, workspace bytes
};

// GEMM kernels of an mxfp4 forward on SM90: decode (mma.sync, weights on the m16 side, 16-row
// tiles), mma.sync (any weights, 64 x 128 tiles) or wgmma (folded weights only,
// kernels/sm90_grouped_gemm.h: WgmmaTile). MOE_EP_SM90_GEMM=decode|mma|wgmma|auto forces a
// choice (auto: by T, below).
enum class Sm90GemmKernels { kDecode, kMma, kWgmma };
enum class Sm90GemmChoice { kAuto, kDecode, kMma, kWgmma };
// Auto: the decode kernels up to this many tokens (MOE_EP_SM90_DECODE_MAX_TOKENS overrides), where
// experts hold a few rows each and the weight stream is the cost.
inline constexpr int64_t kDecodeMaxTokens = 512;
// Auto: wgmma from this many tokens on (where most experts fill whole 64-row tiles), unless the
// layer asks for exact accumulation (KernelConfig::exact_accumulation: wgmma's FP8 accumulator
// is not fp32-exact).
inline constexpr int64_t kWgmmaMinTokens = 256;
Sm90GemmKernels select_sm90_gemm_kernels(Sm90GemmChoice choice, bool wgmma_available,
                                         bool exact_accumulation, int64_t num_tokens,
                                         int64_t decode_max_tokens = kDecodeMaxTokens);
// Persistent grid of a wgmma GEMM with n output columns: tiles of block_n columns over the
// m-tile bound of T (the 64-row bound also bounds larger tiles), at most blocks_per_sm per SM.
int wgmma_gemm_grid(const Plan& plan, int64_t num_tokens, int64_t n, int block_n, int blocks_per_sm);

// The workspace formula above (host arithmetic only; tests check it).
WorkspaceLayout workspace_layout(const LayerShape& shape);
Plan make_plan(const LayerShape& shape, const DeviceLimits& limits);

}  // namespace moe_ep::cuda
