// The per-expert part of the layer on the CPU: GEMM 1 -> clamped SwiGLU -> GEMM 2 for a list
// of (activation row, local expert, topk weight) entries. Dispatch and combine live around it:
// the single-rank layer (cpu_layer.cpp) builds the entries from topk_ids; a multi-rank layer
// builds them from the rows it received.
#pragma once

#include <cstdint>
#include <span>

#include "core/weight_prep.h"
#include "core/thread_pool.h"

namespace moe_ep::cpu {

// Quantized activation rows entering the experts (what a dispatch moves), row-major:
//   mxfp4 recipe: codes [num_rows, H] e4m3, scales [num_rows, H/32] E8M0, global unused
//   nvfp4 recipe: codes [num_rows, H/2] packed e2m1, scales [num_rows, H/16] e4m3,
//                 global [num_rows] f32 encode factor g (dequantized value = q * s / g)
struct QuantizedRows {
  int64_t num_rows = 0;
  const uint8_t* codes = nullptr;
  const uint8_t* scales = nullptr;
  const float* global = nullptr;
};

struct ExpertEntry {
  int64_t row;           // index into QuantizedRows
  int64_t local_expert;  // 0..E_loc-1
  float weight;          // topk weight, applied to h before Q8 (docs/spec.md §3 step 4)
};

struct ExpertProblem {
  const HostExpertWeights* weights = nullptr;  // its format is the recipe
  float activation_clamp = 0.0f;               // +inf when the config has none
};

// out [entries.size(), H] bf16 bits: out[n] = o_k of entry n (docs/spec.md §3 steps 2–6, §4).
// NVFP4 applies the global scales to the fp32 dot products of the decoded operands:
//   gu = bf16(acc * (w13 weight_scale_2 / g_row)),  o = bf16(acc * (w2 weight_scale_2 / g_h)),
// g_row the row's activation encode factor, g_h the entry's (over its I values of h).
// Deterministic: every value is computed by the same code in the same order for any thread
// count and any entry order.
void compute_expert_outputs(const ExpertProblem& problem, const QuantizedRows& rows,
                            std::span<const ExpertEntry> entries, uint16_t* out, ThreadPool& pool);

}  // namespace moe_ep::cpu
