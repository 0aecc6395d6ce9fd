#include "cuda/plan.h"

#include <algorithm>

#include <fmt/format.h>

#include "core/check.h"
#include "cuda/kernels/sm90_grouped_gemm.h"

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
  const int64_t block = s.nvfp4 ? 16 : 32;
  const int64_t max_m_tiles = m_tiles_for_rows(M, s.num_experts, kDecodeBlockM);
  WorkspaceLayout w;
  Cursor c;
  w.a = c.take(s.nvfp4 ? R * H / 2 : R * H);
  w.a_scale = c.take(R * H / block);
  w.a_global = c.take(s.nvfp4 ? R * 4 : 0);
  w.expert_offsets = c.take((s.num_experts + 1) * 4);
  w.num_m_tiles = c.take(4);
  w.tile_expert = c.take(max_m_tiles * 4);
  w.tile_row_begin = c.take(max_m_tiles * 4);
  w.row_token = c.take(M * 4);
  w.row_weight = c.take(M * 4);
  w.slot_row = c.take(M * 4);
  w.h = c.take(s.nvfp4 ? M * I / 2 : M * I);
  w.h_scale = c.take(M * I / block);
  w.h_global = c.take(s.nvfp4 ? M * 4 : 0);
  w.h_f32 = c.take(s.nvfp4 ? M * I * 4 : 0);
  w.o = c.take(M * H * 2);
  w.total_bytes = c.offset;
  return w;
}

Plan make_plan(const LayerShape& shape, const DeviceLimits& limits) {
  MOE_EP_ASSERT(shape.hidden % kGemmBlockK == 0 && shape.intermediate % kGemmBlockK == 0);
  MOE_EP_ASSERT(limits.sm_count > 0 && limits.gemm1_blocks_per_sm > 0 && limits.gemm2_blocks_per_sm > 0);
  Plan p;
  p.shape = shape;
  p.limits = limits;
  p.max_rows = shape.max_tokens * shape.top_k;
  p.max_m_tiles = m_tiles_for_rows(p.max_rows, shape.num_experts, kDecodeBlockM);
  p.workspace = workspace_layout(shape);
  return p;
}

int64_t Plan::m_tile_bound(int64_t num_tokens, int block_m) const {
  return m_tiles_for_rows(num_tokens * shape.top_k, shape.num_experts, block_m);
}

int Plan::gemm1_grid(int64_t num_tokens) const {
  const int64_t tiles = m_tile_bound(num_tokens) * (2 * shape.intermediate / kGemmBlockN);
  return static_cast<int>(std::min<int64_t>(tiles, int64_t{limits.sm_count} * limits.gemm1_blocks_per_sm));
}

int Plan::gemm2_grid(int64_t num_tokens) const {
  const int64_t tiles = m_tile_bound(num_tokens) * (shape.hidden / kGemmBlockN);
  return static_cast<int>(std::min<int64_t>(tiles, int64_t{limits.sm_count} * limits.gemm2_blocks_per_sm));
}

Sm90GemmKernels select_sm90_gemm_kernels(Sm90GemmChoice choice, bool wgmma_available,
                                         bool exact_accumulation, int64_t num_tokens,
                                         int64_t decode_max_tokens) {
  switch (choice) {
    case Sm90GemmChoice::kDecode: return Sm90GemmKernels::kDecode;
    case Sm90GemmChoice::kMma: return Sm90GemmKernels::kMma;
    case Sm90GemmChoice::kWgmma: return wgmma_available ? Sm90GemmKernels::kWgmma : Sm90GemmKernels::kMma;
    case Sm90GemmChoice::kAuto: break;
  }
  if (num_tokens <= decode_max_tokens) return Sm90GemmKernels::kDecode;
  if (wgmma_available && !exact_accumulation && num_tokens >= kWgmmaMinTokens) return Sm90GemmKernels::kWgmma;
  return Sm90GemmKernels::kMma;
}

int wgmma_gemm_grid(const Plan& plan, int64_t num_tokens, int64_t n, int block_n, int blocks_per_sm) {
  const int64_t tiles = plan.m_tile_bound(num_tokens) * (n / block_n);
  return static_cast<int>(std::min<int64_t>(tiles, int64_t{plan.limits.sm_count} * blocks_per_sm));
}

std::string Plan::describe() const {
  return fmt::format(
      "sm90 plan: tile {}x{}x{}, {} threads, persistent grids <= {} (gemm1, {}/SM) / {} (gemm2, "
      "{}/SM) on {} SMs; max rows {}, max m-tiles {}; workspace {} bytes ({:.1f} MiB)",
      kGemmBlockM, kGemmBlockN, kGemmBlockK, kGemmThreads, limits.sm_count * limits.gemm1_blocks_per_sm,
      limits.gemm1_blocks_per_sm, limits.sm_count * limits.gemm2_blocks_per_sm,
      limits.gemm2_blocks_per_sm, limits.sm_count, max_rows, max_m_tiles, workspace.total_bytes,
      workspace.total_bytes / 1048576.0);
}

}  // namespace moe_ep::cuda
