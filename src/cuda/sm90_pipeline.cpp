#include "cuda/sm90_pipeline.h"

#include <fmt/format.h>

#include "core/check.h"
#include "cuda/errors.h"
#include "cuda/kernels/sm90_quantize_route.h"

namespace moe_ep::cuda {
namespace {

using Launch = Sm90Pipeline::Launch;

// ---- the steps: each copies its prebuilt params, patches T and the binding's pointers ----

Q8QuantizeParams q8_of(const Launch& l, const Sm90Binding& b) {
  Q8QuantizeParams q = l.q8;
  q.x = b.x;
  q.rows = b.num_tokens;
  return q;
}

PermuteParams routing_of(const Launch& l, const Sm90Binding& b) {
  PermuteParams r = l.permute;
  r.topk_ids = b.topk_ids;
  r.ids_are_int64 = b.ids_int64 ? 1 : 0;
  r.topk_weights = b.topk_weights;
  r.num_tokens = static_cast<int32_t>(b.num_tokens);
  return r;
}

cudaError_t quantize_q8_step(const Launch& l, const Sm90Binding& b, cudaStream_t s) {
  return launch_sm90_q8_quantize(q8_of(l, b), s);
}

Nvfp4QuantizeParams x_nvfp4_of(const Launch& l, const Sm90Binding& b) {
  Nvfp4QuantizeParams q = l.x_nvfp4;
  q.in = b.x;
  q.max_rows = static_cast<int32_t>(b.num_tokens);
  return q;
}

cudaError_t quantize_nvfp4_step(const Launch& l, const Sm90Binding& b, cudaStream_t s) {
  return launch_sm90_nvfp4_quantize(x_nvfp4_of(l, b), s);
}

// Quantization of x and the routing in one launch (Sm90Config::fuses_quantize_route).
cudaError_t quantize_route_step(const Launch& l, const Sm90Binding& b, cudaStream_t s) {
  return launch_sm90_quantize_route(q8_of(l, b), routing_of(l, b), s);
}

cudaError_t quantize_nvfp4_route_step(const Launch& l, const Sm90Binding& b, cudaStream_t s) {
  return launch_sm90_nvfp4_quantize_route(x_nvfp4_of(l, b), routing_of(l, b), s);
}

// kCallerA: x comes quantized from the caller (desc.quantize_input = false).
template <bool kCallerA>
cudaError_t x_to_16bit_step(const Launch& l, const Sm90Binding& b, cudaStream_t s) {
  const Sm90Pipeline::To16Bit& c = l.x_16bit;
  return c.convert(kCallerA ? b.a : c.q, kCallerA ? b.a_scale : c.scales, b.num_tokens, nullptr, c.k, c.out, s);
}

cudaError_t h_to_16bit_step(const Launch& l, const Sm90Binding& b, cudaStream_t s) {
  const Sm90Pipeline::To16Bit& c = l.h_16bit;
  return c.convert(c.q, c.scales, b.num_tokens * l.plan.shape.top_k, c.row_count, c.k, c.out, s);
}

cudaError_t permute_step(const Launch& l, const Sm90Binding& b, cudaStream_t s) {
  return launch_sm90_permute(routing_of(l, b), s);
}

// Where GEMM 1 reads x: the workspace (quantized by the layer, or converted to 16 bits), the
// caller's quantized rows (desc.quantize_input = false), or the workspace's 16-bit rows of the
// caller's rows, which keep the caller's global factors.
enum class GemmA { kWorkspace, kCaller, kCallerGlobal };

template <GemmA kA>
cudaError_t gemm1_step(const Launch& l, const Sm90Binding& b, cudaStream_t s) {
  Gemm1Params p = l.gemm1;
  if constexpr (kA == GemmA::kCaller) {
    p.op.a = b.a;
    p.op.a_scale = b.a_scale;
  }
  if constexpr (kA != GemmA::kWorkspace) p.op.a_global = b.a_global;
  return l.gemm1_fn(p, launch_grid(l.plan, l.grid1, b.num_tokens), s);
}

cudaError_t h_nvfp4_step(const Launch& l, const Sm90Binding& b, cudaStream_t s) {
  Nvfp4QuantizeParams q = l.h_nvfp4;
  q.max_rows = static_cast<int32_t>(b.num_tokens * l.plan.shape.top_k);
  return launch_sm90_nvfp4_quantize(q, s);
}

cudaError_t gemm2_step(const Launch& l, const Sm90Binding& b, cudaStream_t s) {
  return l.gemm2_fn(l.gemm2, launch_grid(l.plan, l.grid2, b.num_tokens), s);
}

cudaError_t combine_step(const Launch& l, const Sm90Binding& b, cudaStream_t s) {
  if (b.y_add_ready != nullptr)
    if (const cudaError_t e = cudaStreamWaitEvent(s, b.y_add_ready, 0); e != cudaSuccess) return e;
  CombineParams c = l.combine;
  c.y = b.y;
  c.add = b.y_add;
  c.num_tokens = static_cast<int32_t>(b.num_tokens);
  return launch_sm90_combine(c, s);
}

// The one-token layer (a whole-layer bucket): its two launches; the shared expert's y_add is
// waited for between them.
OneTokenParams one_token_of(const Launch& l, const Sm90Binding& b) {
  OneTokenParams p = l.one_token;
  p.x = b.x;
  p.topk_ids = b.topk_ids;
  p.ids_int64 = b.ids_int64 ? 1 : 0;
  p.topk_weights = b.topk_weights;
  p.y = b.y;
  p.y_add = b.y_add;
  return p;
}

cudaError_t one_token_gate_up_step(const Launch& l, const Sm90Binding& b, cudaStream_t s) {
  return launch_sm90_one_token_gate_up(one_token_of(l, b), l.one_token_grid, s);
}

cudaError_t one_token_down_step(const Launch& l, const Sm90Binding& b, cudaStream_t s) {
  if (b.y_add_ready != nullptr)
    if (const cudaError_t e = cudaStreamWaitEvent(s, b.y_add_ready, 0); e != cudaSuccess) return e;
  return launch_sm90_one_token_down(one_token_of(l, b), s);
}

// One GEMM's operands: A rows of the recipe's activation format (k wide), n output columns.
GroupedGemmOperands operands(const RecipeTraits& recipe, int64_t n, int64_t k, const uint8_t* a,
                             const uint8_t* a_scale, const float* a_global, const Sm90GemmWeights& w) {
  GroupedGemmOperands op;
  op.n = static_cast<int32_t>(n);
  op.k = static_cast<int32_t>(k);
  op.a = a;
  op.a_row_bytes = recipe.code_bytes(k);
  op.a_scale = a_scale;
  op.a_scale_row_bytes = recipe.scale_count(k);
  op.a_global = recipe.global_scales ? a_global : nullptr;
  op.w = w.tiles;
  op.w_scale = w.scales;
  op.w_global = w.global;
  op.w_col_scale = w.col_scale;
  return op;
}

std::string grid_str(const GridRule& g) {
  return g.cap > 0 ? fmt::format("min(m_tiles{}(T) x {}, {})", g.block_m, g.n_tiles, g.cap)
                   : fmt::format("m_tiles{}(T) x {}", g.block_m, g.n_tiles);
}

}  // namespace

Sm90Pipeline::Sm90Pipeline(const Sm90Config& config, const Plan& plan, bool quantize_input,
                           float clamp, const Sm90GemmWeights& w13, const Sm90GemmWeights& w2,
                           std::byte* workspace, uint32_t* error_flags) {
  const LayerShape& s = plan.shape;
  const WorkspaceLayout& w = plan.workspace;
  const RecipeTraits& recipe = recipe_traits(s.recipe);
  const int64_t H = s.hidden, I = s.intermediate;
  auto ws = [workspace](size_t offset) { return reinterpret_cast<uint8_t*>(workspace + offset); };
  auto ws_f32 = [workspace](size_t offset) { return reinterpret_cast<float*>(workspace + offset); };
  auto ws_i32 = [workspace](size_t offset) { return reinterpret_cast<int32_t*>(workspace + offset); };
  MOE_EP_ASSERT(!config.buckets.empty());

  for (const Sm90Bucket& bucket : config.buckets) {
    Launch l;
    l.bucket = bucket;
    l.plan = plan;

    l.q8.cols = H;
    l.q8.q = ws(w.a);
    l.q8.scales = ws(w.a_scale);
    l.x_nvfp4.in_is_bf16 = 1;
    l.x_nvfp4.cols = H;
    l.x_nvfp4.packed = ws(w.a);
    l.x_nvfp4.scales = ws(w.a_scale);
    l.x_nvfp4.global = ws_f32(w.a_global);

    PermuteParams& r = l.permute;
    r.top_k = static_cast<int32_t>(s.top_k);
    r.num_experts = static_cast<int32_t>(s.num_experts);
    r.block_m = bucket.block_m();
    r.expert_offsets = ws_i32(w.expert_offsets);
    r.num_m_tiles = ws_i32(w.num_m_tiles);
    r.tile_expert = ws_i32(w.tile_expert);
    r.tile_row_begin = ws_i32(w.tile_row_begin);
    r.row_token = ws_i32(w.row_token);
    r.row_weight = ws_f32(w.row_weight);
    r.slot_row = ws_i32(w.slot_row);
    r.chunk_rows = sm90_route_chunks_bound(plan.max_rows) > 0 ? ws_i32(w.route_chunk_rows) : nullptr;
    r.error_flags = error_flags;
    const GroupedGemmSchedule schedule{r.num_m_tiles, r.tile_expert, r.tile_row_begin, r.expert_offsets,
                                       r.num_experts};

    Gemm1Params& g1 = l.gemm1;
    g1.schedule = schedule;
    g1.op = operands(recipe, 2 * I, H, ws(w.a), ws(w.a_scale), ws_f32(w.a_global), w13);
    g1.op.a_row_index = r.row_token;
    g1.epilogue.row_weight = r.row_weight;
    g1.epilogue.clamp = clamp;
    g1.epilogue.fast_math = config.fast_math ? 1 : 0;
    g1.epilogue.intermediate = static_cast<int32_t>(I);
    g1.epilogue.h_q = ws(w.h);
    g1.epilogue.h_scale = ws(w.h_scale);
    g1.epilogue.h_f32 = recipe.global_scales ? ws_f32(w.h_f32) : nullptr;

    l.h_nvfp4.in = ws(w.h_f32);
    l.h_nvfp4.in_is_bf16 = 0;
    l.h_nvfp4.cols = I;
    l.h_nvfp4.num_rows = r.expert_offsets + s.num_experts;
    l.h_nvfp4.packed = ws(w.h);
    l.h_nvfp4.scales = ws(w.h_scale);
    l.h_nvfp4.global = ws_f32(w.h_global);

    Gemm2Params& g2 = l.gemm2;
    g2.schedule = schedule;
    g2.op = operands(recipe, H, I, ws(w.h), ws(w.h_scale), ws_f32(w.h_global), w2);
    g2.epilogue.out = reinterpret_cast<uint16_t*>(workspace + w.o);

    const Sm90FormInfo& f1 = sm90_form(bucket.gemm1);
    const Sm90FormInfo& f2 = sm90_form(bucket.gemm2);
    if (f1.whole_layer) {
      MOE_EP_ASSERT(quantize_input && bucket.max_tokens <= 1 && config.facts.one_token_groups > 0);
      OneTokenParams& t = l.one_token;
      t.w13 = g1.op;
      t.w2 = g2.op;
      t.clamp = clamp;
      t.fast_math = config.fast_math ? 1 : 0;
      t.top_k = static_cast<int32_t>(s.top_k);
      t.num_experts = static_cast<int32_t>(s.num_experts);
      t.groups_per_block = config.facts.one_token_groups;
      t.h = ws_f32(w.h_f32);
      t.error_flags = error_flags;
      l.one_token_grid = config.facts.sm_count;
      l.steps = {&one_token_gate_up_step, &one_token_down_step};
      launches_.push_back(std::move(l));
      continue;
    }
    MOE_EP_ASSERT(f1.recipe == s.recipe && f2.recipe == s.recipe && f2.has_gemm2 && f1.list_block_m == f2.list_block_m);
    l.gemm1_fn = sm90_form_kernels(bucket.gemm1).launch1;
    l.gemm2_fn = sm90_form_kernels(bucket.gemm2).launch2;
    // A persistent form's grid is capped at its resident blocks; its m-tile bound uses 64 rows,
    // which also bounds larger tiles. A decode form's launcher takes the 16-row m-tile bound.
    const int64_t sms = config.facts.sm_count;
    auto grid = [&](const Sm90FormInfo& f, int gemm, int64_t n) {
      return f.persistent ? GridRule{kGemmBlockM, n / f.block_n, sms * config.facts.per_sm(f.form, gemm)}
                          : GridRule{kDecodeBlockM, 1, 0};
    };
    l.grid1 = grid(f1, 0, 2 * I);
    l.grid2 = grid(f2, 1, H);

    // 16-bit activations, in the kernels' order along k, converted from their quantized rows or
    // (x, mxfp4, the layer quantizing it) written so by the Q8 launch: x kept in o until GEMM 2
    // writes o, h in its own region.
    const bool x16 = f1.x_16bit, h16 = f2.h_16bit;
    const Sm90Pipeline::ConvertFn convert =
        recipe.fp4_activations ? &launch_sm90_nvfp4_to_rs_f16 : &launch_sm90_q8_to_rs_bf16;
    if (x16) {
      l.x_16bit = {convert, ws(w.a), ws(w.a_scale), static_cast<int>(H), reinterpret_cast<uint16_t*>(workspace + w.o)};
      set_16bit_activations(g1.op, l.x_16bit.out);
      // Q8 of x (the layer quantizing it) writes the bf16 rows itself: no Q8 rows, no conversion.
      if (quantize_input && !recipe.fp4_activations) l.q8.rs_bf16 = l.x_16bit.out;
    }
    if (h16) {
      MOE_EP_ASSERT(s.activations_16bit);
      l.h_16bit = {convert, ws(w.h), ws(w.h_scale), static_cast<int>(I),
                   reinterpret_cast<uint16_t*>(workspace + w.h_16bit), r.expert_offsets + s.num_experts};
      set_16bit_activations(g2.op, l.h_16bit.out);
    }

    l.combine.o = g2.epilogue.out;
    l.combine.slot_row = r.slot_row;
    l.combine.top_k = static_cast<int32_t>(s.top_k);
    l.combine.hidden = static_cast<int32_t>(H);

    // The fused launch (config: the layer quantizing x) replaces the quantization and the routing.
    const bool fused = quantize_input && config.fuses_quantize_route(bucket);
    if (quantize_input)
      l.steps.push_back(recipe.fp4_activations ? fused ? &quantize_nvfp4_route_step : &quantize_nvfp4_step
                        : fused                ? &quantize_route_step
                                               : &quantize_q8_step);
    if (x16 && l.q8.rs_bf16 == nullptr)
      l.steps.push_back(quantize_input ? &x_to_16bit_step<false> : &x_to_16bit_step<true>);
    if (!fused) l.steps.push_back(&permute_step);
    l.steps.push_back(quantize_input ? &gemm1_step<GemmA::kWorkspace>
                      : x16          ? &gemm1_step<GemmA::kCallerGlobal>
                                     : &gemm1_step<GemmA::kCaller>);
    if (recipe.global_scales) l.steps.push_back(&h_nvfp4_step);
    if (h16) l.steps.push_back(&h_to_16bit_step);
    l.steps.push_back(&gemm2_step);
    l.steps.push_back(&combine_step);
    launches_.push_back(std::move(l));
  }
}

void Sm90Pipeline::run(const Sm90Binding& b, cudaStream_t stream) const {
  if (b.num_tokens == 0) return;
  const Launch* l = &launches_.back();
  for (const Launch& c : launches_)
    if (b.num_tokens <= c.bucket.max_tokens) {
      l = &c;
      break;
    }
  for (Step step : l->steps) MOE_EP_CUDA_CHECK(step(*l, b, stream));
}

void Sm90Pipeline::describe(SelectedConfig& out) const {
  for (const Launch& l : launches_) {
    const char* wide = l.x_16bit.convert == &launch_sm90_nvfp4_to_rs_f16 ? "f16" : "bf16";
    const char* x_as = l.q8.rs_bf16 != nullptr ? " to bf16" : "";  // Q8 of x written as bf16
    std::string steps;
    for (Step step : l.steps) {
      const std::string name =
          step == &quantize_q8_step || step == &quantize_nvfp4_step ? fmt::format("quantize x{}", x_as)
          : step == &quantize_route_step || step == &quantize_nvfp4_route_step
              ? fmt::format("quantize x{} + routing (one launch)", x_as)
          : step == &x_to_16bit_step<false> || step == &x_to_16bit_step<true> ? fmt::format("x to {}", wide)
          : step == &permute_step                                             ? "routing"
          : step == &h_nvfp4_step                                             ? "nvfp4 of h"
          : step == &h_to_16bit_step                                          ? fmt::format("h to {}", wide)
          : step == &gemm2_step                                               ? "gemm2"
          : step == &combine_step                                             ? "combine"
          : step == &one_token_gate_up_step ? "quantize x + gate_up + SwiGLU (one token)"
          : step == &one_token_down_step    ? "W2 to shared memory + Q8 of h + down + combine (one token)"
                                                                              : "gemm1";
      steps += (steps.empty() ? "" : ", ") + name;
    }
    const std::string forms = l.bucket.gemm1 == l.bucket.gemm2
                                  ? std::string(sm90_form_name(l.bucket.gemm1))
                                  : fmt::format("{} + {}", sm90_form_name(l.bucket.gemm1), sm90_form_name(l.bucket.gemm2));
    const std::string tokens =
        fmt::format("T={}..{}", std::max<int64_t>(1, l.bucket.min_tokens), l.bucket.max_tokens);
    if (sm90_form(l.bucket.gemm1).whole_layer) {
      const int groups = l.one_token.w2.n / 16, per_block = l.one_token.groups_per_block;
      out.plan.push_back({tokens, fmt::format("{}; gate_up grid {} (SMs), down grid {} ({} column groups of 16 "
                                              "per block); {} steps ({})", forms, l.one_token_grid,
                                              (groups + per_block - 1) / per_block, per_block, l.steps.size(), steps)});
      continue;
    }
    out.plan.push_back({tokens, fmt::format("{}, routing m tiles of {} rows; gemm1 grid {}, gemm2 grid {}; {} steps ({})",
                                            forms, l.bucket.block_m(), grid_str(l.grid1), grid_str(l.grid2),
                                            l.steps.size(), steps)});
  }
}

}  // namespace moe_ep::cuda
