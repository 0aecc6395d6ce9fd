// Quantization of x and the routing in one launch: GEMM 1 needs both and neither needs the other,
// so block 0 routes (sm90_permute.h) while the other blocks quantize (sm90_q8_quantize.h, or
// sm90_nvfp4_quantize.h); one kernel boundary fewer than the two launches. Outputs bitwise those
// of the two kernels.
// Launched with programmatic dependent launch (ptx/griddep.cuh), as they are.
#pragma once

#include <cuda_runtime.h>

#include "cuda/kernels/sm90_nvfp4_quantize.h"
#include "cuda/kernels/sm90_permute.h"
#include "cuda/kernels/sm90_q8_quantize.h"

namespace moe_ep::cuda {

// Plan time: the routing block's shared memory (sm90_permute_shared_bytes(num_experts)).
cudaError_t configure_sm90_quantize_route(int num_experts);
cudaError_t launch_sm90_quantize_route(const Q8QuantizeParams& q8, const PermuteParams& route, cudaStream_t stream);

// The same for the nvfp4 recipe: NVFP4 of x's rows (sm90_nvfp4_quantize.h; x.max_rows rows, no
// device row count) beside the routing, each row by a group of 128 threads as the NVFP4 kernel's
// block does it. Outputs bitwise those of the two kernels.
cudaError_t configure_sm90_nvfp4_quantize_route(int num_experts);
cudaError_t launch_sm90_nvfp4_quantize_route(const Nvfp4QuantizeParams& x, const PermuteParams& route,
                                             cudaStream_t stream);

}  // namespace moe_ep::cuda
