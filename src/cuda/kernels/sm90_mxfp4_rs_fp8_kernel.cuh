// The rs fp8 grouped GEMM kernel of one tile configuration (sm90_mxfp4_rs_fp8_mainloop.cuh) and
// its plan-time configuration and launch, for the library's configurations
// (sm90_mxfp4_rs_fp8_gemm.cu) and the probes that time variants of them (tests/cuda).
#pragma once

#include "cuda/kernels/sm90_kernel_config.cuh"
#include "cuda/kernels/sm90_mxfp4_rs_fp8_mainloop.cuh"
#include "cuda/kernels/sm90_rs_epilogues.cuh"

namespace moe_ep::cuda {

template <class Cfg, class Epilogue, class Params>
__global__ void __launch_bounds__(Cfg::kThreads, 1) sm90_mxfp4_rs_fp8_kernel(const __grid_constant__ Params p) {
  extern __shared__ __align__(1024) uint8_t smem[];
  run_rs_fp8_grouped_gemm<Cfg, Epilogue>(p, smem);
}

template <class Cfg, class Epilogue, class Params>
cudaError_t configure_rs_fp8_kernel(int* blocks_per_sm) {
  return configure_persistent_kernel(sm90_mxfp4_rs_fp8_kernel<Cfg, Epilogue, Params>, Cfg::kThreads,
                                     Cfg::kSharedBytes, blocks_per_sm);
}

template <class Cfg, class Epilogue, class Params>
cudaError_t launch_rs_fp8_kernel(const Params& p, int grid, cudaStream_t stream) {
  if (grid <= 0) return cudaSuccess;
  if (!p.op.w_col_scale || p.op.n <= 0 || p.op.k <= 0 || p.op.n % Cfg::kBlockN != 0 || p.op.k % Cfg::kBlockK != 0)
    return cudaErrorInvalidValue;  // folded weights, whole tiles only
  sm90_mxfp4_rs_fp8_kernel<Cfg, Epilogue, Params><<<grid, Cfg::kThreads, Cfg::kSharedBytes, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace moe_ep::cuda
