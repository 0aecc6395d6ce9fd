// mxfp4 grouped GEMM 2 on wgmma (W2, bf16 output): warp-specialized persistent grid over
// (m tile, n tile), folded weights (sm90_mxfp4_wgmma_mainloop.cuh).
#include "cuda/kernels/sm90_wgmma_kernel.cuh"

namespace moe_ep::cuda {

cudaError_t configure_sm90_mxfp4_wgmma_grouped_gemm2(WgmmaTile tile, int* blocks_per_sm, WgmmaDecode decode) {
  return configure_wgmma_kernel<WgmmaStoreBf16Epilogue, Gemm2Params>(tile, decode, blocks_per_sm);
}

cudaError_t launch_sm90_mxfp4_wgmma_grouped_gemm2(WgmmaTile tile, const Gemm2Params& p, int grid, cudaStream_t stream,
                                                  WgmmaDecode decode) {
  return launch_wgmma_kernel<WgmmaStoreBf16Epilogue>(tile, decode, p, grid, stream);
}

}  // namespace moe_ep::cuda
