#include "cpu/expert_compute.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "core/check.h"
#include "cpu/reference_math.h"
#include "moe_ep/formats.h"
#include "moe_ep/quant.h"

namespace moe_ep::cpu {
namespace {

// Weight rows decoded per task: 64 Ki floats (256 KiB) stay in a core's L2 cache while every
// entry of the expert is multiplied with them. Never more than one chunk per thread is decoded.
constexpr int64_t kChunkFloats = 64 * 1024;

struct ExpertGroups {
  std::vector<int64_t> begin;  // [E + 1]: entries of expert e are order[begin[e]..begin[e+1])
  std::vector<int64_t> order;  // entry indices grouped by expert, ascending within an expert
};

ExpertGroups group_by_expert(std::span<const ExpertEntry> entries, int64_t num_experts) {
  ExpertGroups g;
  g.begin.assign(num_experts + 1, 0);
  for (const ExpertEntry& en : entries) {
    MOE_EP_ASSERT(en.local_expert >= 0 && en.local_expert < num_experts);
    ++g.begin[en.local_expert + 1];
  }
  for (int64_t e = 0; e < num_experts; ++e) g.begin[e + 1] += g.begin[e];
  g.order.resize(entries.size());
  std::vector<int64_t> fill(g.begin.begin(), g.begin.end() - 1);
  for (size_t n = 0; n < entries.size(); ++n) g.order[fill[entries[n].local_expert]++] = n;
  return g;
}

// (expert, first row) of every weight chunk of every expert that has entries.
std::vector<std::pair<int64_t, int64_t>> chunk_tasks(const ExpertGroups& g, int64_t rows,
                                                     int64_t rows_per_chunk) {
  std::vector<std::pair<int64_t, int64_t>> tasks;
  for (int64_t e = 0; e + 1 < static_cast<int64_t>(g.begin.size()); ++e) {
    if (g.begin[e] == g.begin[e + 1]) continue;
    for (int64_t r = 0; r < rows; r += rows_per_chunk) tasks.emplace_back(e, r);
  }
  return tasks;
}

// out[j] = dot_fp32(a, b + j * k, k) for j < rows (<= 4): four rows at a time where there are four.
void rows_dot(const float* a, const float* b, int64_t k, int64_t rows, float* out) {
  if (rows == 4) return dot_fp32_x4(a, b, k, k, out);
  for (int64_t j = 0; j < rows; ++j) out[j] = dot_fp32(a, b + j * k, k);
}

std::vector<float>& scratch(int64_t n) {
  thread_local std::vector<float> buffer;
  buffer.resize(static_cast<size_t>(n));
  return buffer;
}

}  // namespace

void compute_expert_outputs(const ExpertProblem& problem, const QuantizedRows& rows,
                            std::span<const ExpertEntry> entries, uint16_t* out, ThreadPool& pool) {
  const HostExpertWeights& w = *problem.weights;
  const bool nvfp4 = w.format == WeightFormat::kNVFP4;
  const int64_t H = w.shape.hidden, I = w.shape.intermediate;
  const int64_t num_entries = static_cast<int64_t>(entries.size());
  if (num_entries == 0) return;

  // Decode each activation row that some entry uses, once: a [num_used, H] (exact fp32).
  std::vector<int64_t> used_idx(rows.num_rows, -1), used_rows;
  for (const ExpertEntry& en : entries) {
    MOE_EP_ASSERT(en.row >= 0 && en.row < rows.num_rows);
    if (used_idx[en.row] < 0) {
      used_idx[en.row] = static_cast<int64_t>(used_rows.size());
      used_rows.push_back(en.row);
    }
  }
  std::vector<float> a(used_rows.size() * H);
  pool.parallel_for(static_cast<int64_t>(used_rows.size()), [&](int64_t u) {
    const int64_t r = used_rows[u];
    if (nvfp4)
      decode_nvfp4_rows(rows.codes, rows.scales, r, 1, H, a.data() + u * H);
    else
      decode_q8_row(rows.codes + r * H, rows.scales + r * H / kMxBlock, H, a.data() + u * H);
  });

  const ExpertGroups groups = group_by_expert(entries, w.shape.num_experts);
  const auto decode = nvfp4 ? &decode_nvfp4_rows : &decode_mxfp4_rows;
  const auto dot_rows_x4 = nvfp4 ? &dot_nvfp4_rows_x4 : &dot_mxfp4_rows_x4;

  // GEMM 1 + clamped SwiGLU: h [num_entries, I] fp32. A task decodes gate rows [r0, r0 + n)
  // and the matching up rows [I + r0, I + r0 + n), then serves every entry of its expert.
  // NVFP4: gu = bf16(acc * (weight_scale_2 / g_row)).
  std::vector<float> h(num_entries * I);
  const int64_t gate_rows_per_chunk = std::clamp<int64_t>(kChunkFloats / (2 * H), 1, I);
  const auto gemm1_tasks = chunk_tasks(groups, I, gate_rows_per_chunk);
  pool.parallel_for(static_cast<int64_t>(gemm1_tasks.size()), [&](int64_t t) {
    const auto [e, r0] = gemm1_tasks[t];
    const int64_t n = std::min(gate_rows_per_chunk, I - r0);
    // An expert with one entry decodes its rows inside the dot products (the same bits).
    const bool decode_in_dot = groups.begin[e + 1] - groups.begin[e] == 1 && n % 4 == 0;
    float* gate = nullptr;
    float* up = nullptr;
    if (!decode_in_dot) {
      std::vector<float>& buf = scratch(2 * n * H);
      gate = buf.data();
      up = buf.data() + n * H;
      decode(w.w13_packed(e), w.w13_scales(e), r0, n, H, gate);
      decode(w.w13_packed(e), w.w13_scales(e), I + r0, n, H, up);
    }
    for (int64_t g = groups.begin[e]; g < groups.begin[e + 1]; ++g) {
      const int64_t idx = groups.order[g];
      const ExpertEntry& en = entries[idx];
      const float* a_row = a.data() + used_idx[en.row] * H;
      const float alpha = nvfp4 ? w.w13_weight_scale_2(e) / rows.global[en.row] : 1.0f;
      float* h_row = h.data() + idx * I + r0;
      float gate_dots[4], up_dots[4];
      for (int64_t r = 0; r < n; r += 4) {
        const int64_t rows = std::min<int64_t>(4, n - r);
        if (decode_in_dot) {
          dot_rows_x4(a_row, w.w13_packed(e), w.w13_scales(e), r0 + r, H, gate_dots);
          dot_rows_x4(a_row, w.w13_packed(e), w.w13_scales(e), I + r0 + r, H, up_dots);
        } else {
          rows_dot(a_row, gate + r * H, H, rows, gate_dots);
          rows_dot(a_row, up + r * H, H, rows, up_dots);
        }
        for (int64_t j = 0; j < rows; ++j) {
          const float gu_gate = round_to_bf16(gate_dots[j] * alpha);
          const float gu_up = round_to_bf16(up_dots[j] * alpha);
          h_row[r + j] = clamped_swiglu(gu_gate, gu_up, problem.activation_clamp, en.weight);
        }
      }
    }
  });

  // b = Q8(h) (mxfp4) or NVFP4(h) with a global scale per entry over I (nvfp4), decoded in place.
  std::vector<float> h_global(nvfp4 ? num_entries : 0);
  pool.parallel_for(num_entries, [&](int64_t idx) {
    float* h_row = h.data() + idx * I;
    if (nvfp4)
      h_global[idx] = nvfp4_roundtrip_row(h_row, I, h_row);
    else
      q8_roundtrip_row(h_row, I, h_row);
  });

  // GEMM 2: o = bf16(b . W2^T) (NVFP4: bf16(acc * (weight_scale_2 / g_h))).
  const int64_t out_rows_per_chunk = std::clamp<int64_t>(kChunkFloats / I, 1, H);
  const auto gemm2_tasks = chunk_tasks(groups, H, out_rows_per_chunk);
  pool.parallel_for(static_cast<int64_t>(gemm2_tasks.size()), [&](int64_t t) {
    const auto [e, r0] = gemm2_tasks[t];
    const int64_t n = std::min(out_rows_per_chunk, H - r0);
    const bool decode_in_dot = groups.begin[e + 1] - groups.begin[e] == 1 && n % 4 == 0;
    float* w2_rows = nullptr;
    if (!decode_in_dot) {
      w2_rows = scratch(n * I).data();
      decode(w.w2_packed(e), w.w2_scales(e), r0, n, I, w2_rows);
    }
    for (int64_t g = groups.begin[e]; g < groups.begin[e + 1]; ++g) {
      const int64_t idx = groups.order[g];
      const float* b_row = h.data() + idx * I;
      const float alpha = nvfp4 ? w.w2_weight_scale_2(e) / h_global[idx] : 1.0f;
      uint16_t* o_row = out + idx * H + r0;
      float dots[4];
      for (int64_t r = 0; r < n; r += 4) {
        const int64_t rows = std::min<int64_t>(4, n - r);
        if (decode_in_dot)
          dot_rows_x4(b_row, w.w2_packed(e), w.w2_scales(e), r0 + r, I, dots);
        else
          rows_dot(b_row, w2_rows + r * I, I, rows, dots);
        for (int64_t j = 0; j < rows; ++j) o_row[r + j] = float_to_bf16(dots[j] * alpha);
      }
    }
  });
}

}  // namespace moe_ep::cpu
