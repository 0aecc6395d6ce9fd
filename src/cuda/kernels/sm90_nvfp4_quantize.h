// NVFP4 quantization of rows with a per-row global scale (docs/spec.md §4), bit-identical with
// quantize_nvfp4_rows: g = 448*6/amax(row); s = e4m3(g * amax(block of 16) / 6);
// q = e2m1(clamp(v * g / s, +-6)). Used for x (bf16) and for h (fp32) of the nvfp4 recipe.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

namespace moe_ep::cuda {

struct Nvfp4QuantizeParams {
  const void* in = nullptr;        // [max_rows, cols] row-major
  int32_t in_is_bf16 = 0;          // bf16 bits, else fp32
  int64_t cols = 0;                // cols % 16 == 0
  int32_t max_rows = 0;            // grid size
  const int32_t* num_rows = nullptr;  // device count of valid rows (<= max_rows); null: max_rows
  uint8_t* packed = nullptr;       // [rows, cols/2]
  uint8_t* scales = nullptr;       // [rows, cols/16] e4m3
  float* global = nullptr;         // [rows]
};

cudaError_t launch_sm90_nvfp4_quantize(const Nvfp4QuantizeParams& params, cudaStream_t stream);

}  // namespace moe_ep::cuda
