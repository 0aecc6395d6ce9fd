// Combine for world size 1: y[t] = bf16(sum over valid k, in slot order, of fp32(o[slot_row]))
// (docs/spec.md §3 step 7); a token without a valid slot gets zeros. Deterministic: fixed order.
// With `add` (the shared expert's output): y[t] = bf16(fp32(that bf16 sum) + fp32(add[t])), the
// two roundings of a separate add_to (moe_ep/shared_expert.h), in the same pass over y.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

namespace moe_ep::cuda {

struct CombineParams {
  const uint16_t* o = nullptr;       // [rows, H] bf16, expert-grouped rows
  const int32_t* slot_row = nullptr;  // [T, K]
  const uint16_t* add = nullptr;      // [T, H] bf16 or null
  uint16_t* y = nullptr;              // [T, H] bf16
  int32_t num_tokens = 0, top_k = 0;
  int32_t hidden = 0;                 // H % 8 == 0
};

cudaError_t launch_sm90_combine(const CombineParams& params, cudaStream_t stream);

}  // namespace moe_ep::cuda
