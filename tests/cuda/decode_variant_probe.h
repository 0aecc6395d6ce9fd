// mxfp4 decode GEMMs (kernels/sm90_mxfp4_decode_mainloop.cuh) in a form the library does not
// launch (tests/cuda/decode_variant_probe.cu): each warp's weights by bulk copies into a ring of
// `slots` (2 or 3) chunks of 4 k steps in shared memory instead of 16-byte loads into registers,
// the rest as the regular kernels (2 k steps of shift words ahead, K in one part).
#pragma once

#include <cuda_runtime.h>

#include "cuda/kernels/sm90_grouped_gemm.h"

namespace moe_ep::cuda::test {

// Plan-time configuration of both GEMMs' kernels for K = k1 (GEMM 1) and k2 (GEMM 2).
cudaError_t configure_decode_bulk(int slots, int k1, int k2, int* blocks_per_sm1, int* blocks_per_sm2);
cudaError_t launch_decode_bulk_gemm1(int slots, const Gemm1Params& p, int m_tile_bound, cudaStream_t stream);
cudaError_t launch_decode_bulk_gemm2(int slots, const Gemm2Params& p, int m_tile_bound, cudaStream_t stream);

}  // namespace moe_ep::cuda::test
