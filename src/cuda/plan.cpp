#include "cuda/plan.h"

#include <algorithm>

#include <fmt/format.h>

#include "core/check.h"
#include "cuda/kernels/sm90_grouped_gemm.h"
#include "cuda/kernels/sm90_permute.h"

namespace moe_ep::cuda {
namespace {

constexpr size_t kAlign = 256;

struct Cursor {
  size_t offset = 0;
  size_t take(int64_t bytes) {
    const size_t at = offset;
    offset += (static_cast<size_t>(bytes) + kAlign - 1) / kAlign * kAlign;
    return at;
  }
};

int64_t m_tiles_for_rows(int64_t rows, int64_t num_experts, int block_m) {
  return (rows + block_m - 1) / block_m + std::min(num_experts, rows);
}

}  // namespace

WorkspaceLayout workspace_layout(const LayerShape& s) {
  const int64_t R = s.max_tokens, M = s.max_tokens * s.top_k, H = s.hidden, I = s.intermediate;
  const RecipeTraits& recipe = recipe_traits(s.recipe);
  const bool nvfp4 = recipe.global_scales;
  const int64_t max_m_tiles = m_tiles_for_rows(M, s.num_experts, kDecodeBlockM);
  WorkspaceLayout w;
  Cursor c;
  w.a = c.take(R * recipe.code_bytes(H));
  w.a_scale = c.take(R * recipe.scale_count(H));
  w.a_global = c.take(nvfp4 ? R * 4 : 0);
  w.expert_offsets = c.take((s.num_experts + 1) * 4);
  w.num_m_tiles = c.take(4);
  w.tile_expert = c.take(max_m_tiles * 4);
  w.tile_row_begin = c.take(max_m_tiles * 4);
  w.row_token = c.take(M * 4);
  w.row_weight = c.take(M * 4);
  w.slot_row = c.take(M * 4);
  w.route_chunk_rows = c.take(int64_t{sm90_route_chunks_bound(M)} * s.num_experts * 4);
  w.h = c.take(M * recipe.code_bytes(I));
  w.h_scale = c.take(M * recipe.scale_count(I));
  w.h_global = c.take(nvfp4 ? M * 4 : 0);
  // GEMM 1's fp32 h: nvfp4's before its NVFP4 pass; the one-token layer's, one row per slot.
  w.h_f32 = c.take(nvfp4 ? M * I * 4 : s.one_token ? s.top_k * I * 4 : 0);
  // 16-bit h: nvfp4 converts it from the NVFP4 h, after the pass that read h_f32, into h_f32's
  // region; mxfp4 takes its own.
  w.h_16bit = nvfp4 && s.activations_16bit ? w.h_f32 : c.take(s.activations_16bit ? M * I * 2 : 0);
  w.o = c.take(M * H * 2);
  w.shared_h = c.take(R * s.shared_intermediate * 2);
  w.shared_o = c.take(s.shared_intermediate > 0 ? R * H * 2 : 0);
  w.total_bytes = c.offset;
  return w;
}

Plan make_plan(const LayerShape& shape) {
  MOE_EP_ASSERT(shape.hidden % kGemmBlockK == 0 && shape.intermediate % kGemmBlockK == 0);
  Plan p;
  p.shape = shape;
  p.max_rows = shape.max_tokens * shape.top_k;
  p.max_m_tiles = m_tiles_for_rows(p.max_rows, shape.num_experts, kDecodeBlockM);
  p.workspace = workspace_layout(shape);
  return p;
}

int64_t Plan::m_tile_bound(int64_t num_tokens, int block_m) const {
  return m_tiles_for_rows(num_tokens * shape.top_k, shape.num_experts, block_m);
}

int launch_grid(const Plan& plan, const GridRule& rule, int64_t num_tokens) {
  const int64_t blocks = plan.m_tile_bound(num_tokens, rule.block_m) * rule.n_tiles;
  return static_cast<int>(rule.cap > 0 ? std::min(blocks, rule.cap) : blocks);
}

}  // namespace moe_ep::cuda
