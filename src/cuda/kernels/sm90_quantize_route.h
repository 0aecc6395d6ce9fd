// Q8 of x and the routing in one launch: GEMM 1 needs both and neither needs the other, so
// block 0 routes (sm90_permute.h) while the other blocks quantize (sm90_q8_quantize.h); one
// kernel boundary fewer than the two launches. Outputs bitwise those of the two kernels.
// Launched with programmatic dependent launch (ptx/griddep.cuh), as they are.
#pragma once

#include <cuda_runtime.h>

#include "cuda/kernels/sm90_permute.h"
#include "cuda/kernels/sm90_q8_quantize.h"

namespace moe_ep::cuda {

// Plan time: the routing block's shared memory (sm90_permute_shared_bytes(num_experts)).
cudaError_t configure_sm90_quantize_route(int num_experts);
cudaError_t launch_sm90_quantize_route(const Q8QuantizeParams& q8, const PermuteParams& route, cudaStream_t stream);

}  // namespace moe_ep::cuda
