// The register-operand grouped GEMM kernels of one tile configuration and epilogue, their
// plan-time configuration and launch, and a form's kernels built from them: the 16-bit family
// (RsTileConfig, sm90_rs16_mainloop.cuh, and Rs16WideTileConfig, sm90_rs16_wide_mainloop.cuh:
// sm90_mxfp4_rs_bf16_gemm.cu, sm90_nvfp4_rs_gemm.cu) and the FP8 one (RsFp8TileConfig,
// sm90_mxfp4_rs_fp8_mainloop.cuh: sm90_mxfp4_rs_fp8_gemm.cu). A configuration provides
// run<Epilogue>(params, smem), operands_ok(op) and its block shape.
#pragma once

#include "cuda/kernels/sm90_kernel_config.cuh"
#include "cuda/kernels/sm90_mxfp4_rs_fp8_mainloop.cuh"
#include "cuda/kernels/sm90_rs16_mainloop.cuh"
#include "cuda/kernels/sm90_rs16_wide_mainloop.cuh"
#include "cuda/kernels/sm90_rs_epilogues.cuh"

namespace moe_ep::cuda {

template <class Cfg, class Epilogue, class Params>
__global__ void __launch_bounds__(Cfg::kThreads, 1) sm90_rs_kernel(const __grid_constant__ Params p) {
  extern __shared__ __align__(1024) uint8_t smem[];
  Cfg::template run<Epilogue>(p, smem);
}

template <class Cfg, class Epilogue, class Params>
cudaError_t configure_rs_kernel(int /*k*/, int* blocks_per_sm) {
  return configure_persistent_kernel(sm90_rs_kernel<Cfg, Epilogue, Params>, Cfg::kThreads, Cfg::kSharedBytes,
                                     blocks_per_sm);
}

template <class Cfg, class Epilogue, class Params>
cudaError_t launch_rs_kernel(const Params& p, int grid, cudaStream_t stream) {
  if (grid <= 0) return cudaSuccess;
  if (!Cfg::operands_ok(p.op) || p.op.n <= 0 || p.op.k <= 0 || p.op.n % Cfg::kBlockN != 0 ||
      p.op.k % Cfg::kBlockK != 0)
    return cudaErrorInvalidValue;  // the format's scale operands, whole tiles only
  sm90_rs_kernel<Cfg, Epilogue, Params><<<grid, Cfg::kThreads, Cfg::kSharedBytes, stream>>>(p);
  return cudaGetLastError();
}

// The kernels of a form whose GEMMs share one configuration.
template <class Cfg, class Epilogue1, class Epilogue2>
constexpr Sm90FormKernels rs_form_kernels() {
  return {&configure_rs_kernel<Cfg, Epilogue1, Gemm1Params>, &configure_rs_kernel<Cfg, Epilogue2, Gemm2Params>,
          &launch_rs_kernel<Cfg, Epilogue1, Gemm1Params>, &launch_rs_kernel<Cfg, Epilogue2, Gemm2Params>};
}

}  // namespace moe_ep::cuda
