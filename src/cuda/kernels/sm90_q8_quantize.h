// Q8 activation quantization (docs/spec.md §3 step 1): bf16 x [rows, cols] -> e4m3 q [rows, cols]
// and one E8M0 scale per 32 elements [rows, cols/32], bit-identical with quantize_q8. With
// rs_bf16 set it writes, instead of q, the Q8 values themselves as bf16 (e4m3 x 2^(E8M0 - 127),
// exact) in the bf16 register-operand GEMMs' order along k (launch_sm90_q8_to_rs_bf16's output).
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

namespace moe_ep::cuda {

struct Q8QuantizeParams {
  const uint16_t* x = nullptr;  // bf16 bits, row-major
  int64_t rows = 0, cols = 0;   // cols % 32 == 0
  uint8_t* q = nullptr;
  uint8_t* scales = nullptr;
  uint16_t* rs_bf16 = nullptr;  // [rows, cols] when set (then q is not written)
};

cudaError_t launch_sm90_q8_quantize(const Q8QuantizeParams& params, cudaStream_t stream);

}  // namespace moe_ep::cuda
