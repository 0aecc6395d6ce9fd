// The 16-bit register-operand grouped GEMM kernel (sm90_rs16_mainloop.cuh) of one weight format
// and epilogue, and its plan-time configuration and launch (sm90_mxfp4_rs_gemm.cu,
// sm90_nvfp4_rs_gemm.cu).
#pragma once

#include "cuda/kernels/sm90_kernel_config.cuh"
#include "cuda/kernels/sm90_rs16_mainloop.cuh"
#include "cuda/kernels/sm90_rs_epilogues.cuh"

namespace moe_ep::cuda {

template <class Cfg, class Epilogue, class Params>
__global__ void __launch_bounds__(Cfg::kThreads, 1) sm90_rs16_kernel(const __grid_constant__ Params p) {
  extern __shared__ __align__(1024) uint8_t smem[];
  run_rs_grouped_gemm<Cfg, Epilogue>(p, smem);
}

template <class Cfg, class Epilogue, class Params>
cudaError_t configure_rs16_kernel(int* blocks_per_sm) {
  return configure_persistent_kernel(sm90_rs16_kernel<Cfg, Epilogue, Params>, Cfg::kThreads, Cfg::kSharedBytes,
                                     blocks_per_sm);
}

template <class Cfg, class Epilogue, class Params>
cudaError_t launch_rs16_kernel(const Params& p, int grid, cudaStream_t stream) {
  if (grid <= 0) return cudaSuccess;
  if (!Cfg::Weights::operands_ok(p.op) || p.op.n <= 0 || p.op.k <= 0 || p.op.n % Cfg::kBlockN != 0 ||
      p.op.k % Cfg::kBlockK != 0)
    return cudaErrorInvalidValue;  // the format's scale operands, whole tiles only
  sm90_rs16_kernel<Cfg, Epilogue, Params><<<grid, Cfg::kThreads, Cfg::kSharedBytes, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace moe_ep::cuda
