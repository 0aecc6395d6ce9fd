// Q8 rows moved to one scale per 128 elements, the activations of the rs-fp8-k128 forms
// (sm90_mxfp4_rs_fp8_mainloop.cuh, RsFp8Promotion::kK128): in each group of four k32 blocks of a
// row, every block takes the largest of the group's four E8M0 scales, and a block whose scale was
// 2^d below it keeps its codes times 2^-d, each rounded to nearest even in e4m3
// (tile/e4m3_rescale.cuh). The output is Q8 rows whose four scale bytes agree within each 128, so
// any Q8 reader dequantizes them; a group whose scales already agree is copied unchanged.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

namespace moe_ep::cuda {

struct Q8RegroupParams {
  const uint8_t* q = nullptr;       // e4m3 [rows, cols], 16-byte aligned rows
  const uint8_t* scales = nullptr;  // E8M0 [rows, cols / 32]
  uint8_t* q_out = nullptr;         // may be q (in place)
  uint8_t* scales_out = nullptr;    // may be scales (in place)
  int64_t rows = 0, cols = 0;       // cols % 128 == 0
  const int32_t* row_count = nullptr;  // device, may be null: rows from *row_count on are neither read nor written
};

cudaError_t launch_sm90_q8_regroup_128(const Q8RegroupParams& params, cudaStream_t stream);

}  // namespace moe_ep::cuda
