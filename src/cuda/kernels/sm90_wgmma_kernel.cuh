// The wgmma grouped GEMM kernel (sm90_mxfp4_wgmma_mainloop.cuh) for one epilogue, and its
// plan-time configuration and launch over the runtime tile / decode choice. Included once by
// each GEMM's .cu file.
#pragma once

#include "cuda/kernels/sm90_kernel_config.cuh"
#include "cuda/kernels/sm90_wgmma_epilogues.cuh"

namespace moe_ep::cuda {

template <class Cfg, class Epilogue, class Params>
__global__ void __launch_bounds__(Cfg::kThreads, 1) sm90_mxfp4_wgmma_kernel(const __grid_constant__ Params p) {
  extern __shared__ __align__(1024) uint8_t smem[];
  run_wgmma_grouped_gemm<Cfg, Epilogue>(p, smem);
}

// Calls f(Cfg{}) with the configuration of (tile, decode); cudaErrorInvalidValue for none.
template <class F>
cudaError_t with_wgmma_config(WgmmaTile tile, WgmmaDecode decode, F&& f) {
  const bool quad = decode == WgmmaDecode::kQuad;
  switch (tile) {
    case WgmmaTile::k64x256: return quad ? f(WgmmaTile64x256<true>{}) : f(WgmmaTile64x256<false>{});
    case WgmmaTile::k128x128: return quad ? f(WgmmaTile128x128<true>{}) : f(WgmmaTile128x128<false>{});
  }
  return cudaErrorInvalidValue;
}

template <class Epilogue, class Params>
cudaError_t configure_wgmma_kernel(WgmmaTile tile, WgmmaDecode decode, int* blocks_per_sm) {
  return with_wgmma_config(tile, decode, [&](auto cfg) {
    using Cfg = decltype(cfg);
    return configure_persistent_kernel(sm90_mxfp4_wgmma_kernel<Cfg, Epilogue, Params>, Cfg::kThreads,
                                       Cfg::kSharedBytes, blocks_per_sm);
  });
}

template <class Epilogue, class Params>
cudaError_t launch_wgmma_kernel(WgmmaTile tile, WgmmaDecode decode, const Params& p, int grid, cudaStream_t stream) {
  if (grid <= 0) return cudaSuccess;
  if (!p.op.w_col_scale) return cudaErrorInvalidValue;  // folded weights only (w_scale = shifts)
  return with_wgmma_config(tile, decode, [&](auto cfg) {
    using Cfg = decltype(cfg);
    sm90_mxfp4_wgmma_kernel<Cfg, Epilogue, Params><<<grid, Cfg::kThreads, Cfg::kSharedBytes, stream>>>(p);
    return cudaGetLastError();
  });
}

}  // namespace moe_ep::cuda
