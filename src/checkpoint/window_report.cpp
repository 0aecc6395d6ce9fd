// The FP8-window statistics of a checkpoint layer: the library's analyze_fp8_window on the
// canonical weights, and a histogram of per-row block-exponent spans next to it.
#include <algorithm>

#include "core/check.h"
#include "core/thread_pool.h"
#include "core/weight_prep.h"
#include "moe_ep/checkpoint.h"
#include "moe_ep/quant.h"

namespace moe_ep {
namespace {

// Span of each row of a [rows, k] MXFP4 tensor (0 for rows of zero blocks only).
void add_row_spans(const uint8_t* packed, const uint8_t* scales, int64_t rows, int64_t k,
                   std::vector<int64_t>& histogram, int64_t& rows_inside) {
  for (int64_t r = 0; r < rows; ++r) {
    const Mxfp4RowExponents ex = mxfp4_row_exponents(packed + r * k / 2, scales + r * k / kMxBlock, k);
    const int span = ex.hi >= 0 ? ex.hi - ex.lo : 0;
    if (static_cast<size_t>(span) >= histogram.size()) histogram.resize(span + 1, 0);
    ++histogram[span];
    rows_inside += span <= Fp8WindowReport::kMaxSpan;
  }
}

}  // namespace

Fp8WindowReport analyze_fp8_window(const CheckpointLayer& layer, int num_threads) {
  MOE_EP_CHECK(layer.format == WeightFormat::kMXFP4,
               "layer {}: the FP8 window is about MXFP4 block exponents; the layer is {}",
               layer.layer_idx, weight_format_name(layer.format));
  const int threads = resolve_num_threads(num_threads);
  const ParallelFor parallel = [threads](int64_t n, const std::function<void(int64_t)>& task) {
    shared_thread_pool(threads)->parallel_for(n, task);
  };
  const ExpertShape shape{layer.num_experts, layer.hidden_size, layer.intermediate_size};
  const HostExpertWeights w = prepare_host_weights(Recipe::kMxfp4, layer.pack(), shape, parallel);
  const Fp8WindowStats stats = analyze_fp8_window(w, parallel);

  const int64_t E = shape.num_experts, H = shape.hidden, I = shape.intermediate;
  struct PerExpert {
    std::vector<int64_t> histogram;
    int64_t w13_inside = 0, w2_inside = 0;
  };
  std::vector<PerExpert> per(static_cast<size_t>(E));
  parallel(E, [&](int64_t e) {
    add_row_spans(w.w13_packed(e), w.w13_scales(e), 2 * I, H, per[e].histogram, per[e].w13_inside);
    add_row_spans(w.w2_packed(e), w.w2_scales(e), H, I, per[e].histogram, per[e].w2_inside);
  });

  Fp8WindowReport r;
  r.rows = stats.rows;
  r.rows_inside = stats.rows_inside;
  r.experts = stats.experts;
  r.experts_inside = stats.experts_inside;
  r.max_row_span = stats.max_row_span;
  r.w13_rows = E * 2 * I;
  r.w2_rows = E * H;
  r.span_histogram.assign(static_cast<size_t>(stats.max_row_span) + 1, 0);
  for (const PerExpert& p : per) {
    r.w13_rows_inside += p.w13_inside;
    r.w2_rows_inside += p.w2_inside;
    MOE_EP_ASSERT(p.histogram.size() <= r.span_histogram.size());
    for (size_t s = 0; s < p.histogram.size(); ++s) r.span_histogram[s] += p.histogram[s];
  }
  MOE_EP_ASSERT(r.w13_rows_inside + r.w2_rows_inside == r.rows_inside);
  r.description = describe_fp8_window(stats, "the GPU keeps E8M0 block scales for a GEMM with a row "
                                             "outside (exact, slower); the CPU decodes exactly");
  return r;
}

}  // namespace moe_ep
