// The whole mxfp4 layer of one token (world size 1, the layer quantizing x) in two launches, for
// T = 1 where only the hit experts' weight bytes cost anything (docs/spec.md §3, the same
// arithmetic as the decode chain: quantize x, GEMM 1 + SwiGLU, Q8 of h, GEMM 2, combine):
//
//   gate_up  grid = SMs, persistent: every block quantizes x into its shared memory; warp units
//            (slot k, 16-row group of W13) stream their weights from global memory into
//            registers and write h = SwiGLU(...) * w in fp32 to h[k][I]. It lets the next grid
//            start at once.
//   down     one block per `groups_per_block` 16-column groups of y, launched beside gate_up
//            (programmatic dependent launch): before it waits for gate_up it copies the W2 rows
//            of its columns for every valid slot into shared memory (bulk copies), so W2 crosses
//            HBM while W13 streams; then Q8 of h, GEMM 2 from shared memory, and y[n] = bf16(sum
//            in slot order of the slots' bf16 outputs) (+ y_add, rounded as the combine does).
//
// The weights' layouts are those of the grouped GEMMs (sm90_grouped_gemm.h). Each block of down
// holds groups_per_block * K units of 16 W2 rows x I (one_token_down_shared_bytes); a layer whose
// units do not fit cannot use this form. The two kernels' blocks fit on one SM together (<= 80
// registers each, gate_up's shared memory small) so down's copies start while gate_up runs.
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda_runtime.h>

#include "cuda/kernels/sm90_grouped_gemm.h"

namespace moe_ep::cuda {

struct OneTokenParams {
  const uint16_t* x = nullptr;  // bf16 [1, H]
  const void* topk_ids = nullptr;  // [1, K] int32 or int64
  int32_t ids_int64 = 0;
  const float* topk_weights = nullptr;  // [1, K]
  uint16_t* y = nullptr;                // bf16 [1, H]
  const uint16_t* y_add = nullptr;      // bf16 [1, H] added as the combine adds it, or null
  GroupedGemmOperands w13;              // n = 2I, k = H (the A fields are unused)
  GroupedGemmOperands w2;               // n = H, k = I
  float clamp = 0.0f;                   // +inf when the layer has no clamp
  int32_t fast_math = 0;
  int32_t top_k = 0, num_experts = 0;
  int32_t groups_per_block = 0;         // down: 16-column groups of y per block
  float* h = nullptr;                   // [K, I] fp32 workspace, written by gate_up
  uint32_t* error_flags = nullptr;      // kErrorExpertIdOutOfRange (moe_ep/layer.h)
};

// Shared memory of a down block holding `groups_per_block` 16-column groups for K slots.
size_t one_token_down_shared_bytes(int64_t intermediate, int64_t top_k, int groups_per_block);

// The 16-column groups of y per down block on a device of `sm_count` SMs (H / 16 spread over at
// most sm_count blocks).
int one_token_groups_per_block(int64_t hidden, int sm_count);

// Raises both kernels' shared-memory limits (gate_up also asks for the largest shared-memory
// carve-out, so a down block fits beside it) and reports whether one block of each fits on an SM
// together (*fits = 1) for this shape; configured once per layer.
cudaError_t configure_sm90_one_token(int64_t hidden, int64_t intermediate, int64_t top_k, int groups_per_block,
                                     int* fits);

// gate_up on `grid` blocks (the SM count), then down on hidden / 16 / groups_per_block blocks; both
// launched as programmatic dependents. A stream event between them (the shared expert's y_add)
// goes in between by the caller.
cudaError_t launch_sm90_one_token_gate_up(const OneTokenParams& params, int grid, cudaStream_t stream);
cudaError_t launch_sm90_one_token_down(const OneTokenParams& params, cudaStream_t stream);

}  // namespace moe_ep::cuda
