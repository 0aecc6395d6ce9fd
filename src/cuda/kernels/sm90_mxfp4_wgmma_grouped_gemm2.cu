// mxfp4 grouped GEMM 2 on wgmma (W2, bf16 output): warp-specialized persistent grid over
// (m tile, n tile), folded weights (sm90_mxfp4_wgmma_mainloop.cuh).
#include "cuda/kernels/sm90_kernel_config.cuh"
#include "cuda/kernels/sm90_wgmma_epilogues.cuh"

namespace moe_ep::cuda {
namespace {

template <class Cfg>
__global__ void __launch_bounds__(Cfg::kThreads, 1)
    sm90_mxfp4_wgmma_grouped_gemm2_kernel(const __grid_constant__ Gemm2Params p) {
  extern __shared__ __align__(1024) uint8_t smem[];
  run_wgmma_grouped_gemm<Cfg, WgmmaStoreBf16Epilogue>(p, smem);
}

template <class Cfg>
cudaError_t configure(int* blocks_per_sm) {
  return configure_persistent_kernel(sm90_mxfp4_wgmma_grouped_gemm2_kernel<Cfg>, Cfg::kThreads, Cfg::kSharedBytes,
                                     blocks_per_sm);
}

template <class Cfg>
cudaError_t launch(const Gemm2Params& p, int grid, cudaStream_t stream) {
  sm90_mxfp4_wgmma_grouped_gemm2_kernel<Cfg><<<grid, Cfg::kThreads, Cfg::kSharedBytes, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace

cudaError_t configure_sm90_mxfp4_wgmma_grouped_gemm2(WgmmaTile tile, int* blocks_per_sm, WgmmaDecode decode) {
  const bool quad = decode == WgmmaDecode::kQuad;
  switch (tile) {
    case WgmmaTile::k64x256:
      return quad ? configure<WgmmaTile64x256<true>>(blocks_per_sm) : configure<WgmmaTile64x256<false>>(blocks_per_sm);
    case WgmmaTile::k128x128:
      return quad ? configure<WgmmaTile128x128<true>>(blocks_per_sm) : configure<WgmmaTile128x128<false>>(blocks_per_sm);
  }
  return cudaErrorInvalidValue;
}

cudaError_t launch_sm90_mxfp4_wgmma_grouped_gemm2(WgmmaTile tile, const Gemm2Params& p, int grid, cudaStream_t stream,
                                                  WgmmaDecode decode) {
  if (grid <= 0) return cudaSuccess;
  if (!p.op.w_col_scale) return cudaErrorInvalidValue;  // folded weights only (w_scale = shifts)
  const bool quad = decode == WgmmaDecode::kQuad;
  switch (tile) {
    case WgmmaTile::k64x256:
      return quad ? launch<WgmmaTile64x256<true>>(p, grid, stream) : launch<WgmmaTile64x256<false>>(p, grid, stream);
    case WgmmaTile::k128x128:
      return quad ? launch<WgmmaTile128x128<true>>(p, grid, stream) : launch<WgmmaTile128x128<false>>(p, grid, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace moe_ep::cuda
