// The shape side of an SM90 layer's plan, made once at creation: the workspace layout and the
// m-tile bounds the launch grids derive from (sm90_pipeline.h holds the launches).
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
//   route_chunk_rows  sm90_route_chunks_bound(M) x E x 4 B             the chunked routing's rows per
//                                                                 expert of each chunk of slots
//   h            M x I (mxfp4) | M x I/2 (nvfp4)                  quantized SwiGLU output
//   h_scale      M x I/B
//   h_global     M x 4 B (nvfp4);  h_f32  M x I x 4 B (nvfp4, before its NVFP4 pass), or
//                K x I x 4 B (mxfp4 with the one-token layer: its h, one row per slot)
//   h_16bit      M x I x 2 B (activations_16bit only)             h as 16 bits for GEMM 2 forms
//                                                                 that read it (h_16bit: nvfp4's
//                                                                 rs-f16; their order along k);
//                                                                 nvfp4: inside h_f32, which is
//                                                                 read before it is written
//   o            M x H x 2 B                                      expert outputs, bf16; before
//                GEMM 2 writes it, those buckets keep x as 16-bit there (R x H x 2 B <= it)
//   shared_h     R x Is x 2 B (shared expert only)                its bf16 SwiGLU output
//   shared_o     R x H x 2 B (shared expert only)                 its bf16 output, which the
//                                                                 combine adds to y
// Every forward rewrites what it reads; nothing needs clearing between forwards. The shared
// expert's regions are written on a second stream while the routed steps run: no routed step
// touches them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "moe_ep/recipe.h"

namespace moe_ep::cuda {

struct LayerShape {
  int64_t num_experts = 0, hidden = 0, intermediate = 0, top_k = 0, max_tokens = 0;
  Recipe recipe = Recipe::kMxfp4;
  bool activations_16bit = false;  // a bucket reads 16-bit h (Sm90Config::uses_16bit_activations; 16-bit x
                                   // needs no region of its own: it is kept in o)
  int64_t shared_intermediate = 0;  // Is of the layer's shared expert (0: none)
  bool one_token = false;           // a bucket runs the one-token layer (Sm90Config::uses_one_token_layer)
};

struct WorkspaceLayout {
  size_t a = 0, a_scale = 0, a_global = 0;
  size_t expert_offsets = 0, num_m_tiles = 0, tile_expert = 0, tile_row_begin = 0;
  size_t row_token = 0, row_weight = 0, slot_row = 0, route_chunk_rows = 0;
  size_t h = 0, h_scale = 0, h_global = 0, h_f32 = 0, h_16bit = 0;
  size_t o = 0;
  size_t shared_h = 0, shared_o = 0;
  size_t total_bytes = 0;
};

struct Plan {
  LayerShape shape;
  int64_t max_rows = 0;     // M
  int64_t max_m_tiles = 0;
  WorkspaceLayout workspace;

  // Upper bound of the m-tiles of block_m rows of a forward with T tokens (the routing writes
  // the exact count).
  int64_t m_tile_bound(int64_t num_tokens, int block_m = 64) const;
};

// A GEMM launch's grid for T tokens: min(m_tile_bound(T, block_m) * n_tiles, cap) (cap 0: no
// cap; a persistent kernel's cap is blocks per SM x SMs). The decode launchers take the bound
// itself (n_tiles 1, no cap).
struct GridRule {
  int block_m = 64;
  int64_t n_tiles = 1;
  int64_t cap = 0;
};
int launch_grid(const Plan& plan, const GridRule& rule, int64_t num_tokens);

// The workspace formula above (host arithmetic only; tests check it).
WorkspaceLayout workspace_layout(const LayerShape& shape);
Plan make_plan(const LayerShape& shape);

}  // namespace moe_ep::cuda
