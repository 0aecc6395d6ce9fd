// The mxfp4 FP8 wgmma form (sm90_mxfp4_wgmma_mainloop.cuh): warp-specialized persistent grids over
// (m tile, n tile) of 64 tokens x 256 weight rows, folded weights only; GEMM 1 with the clamped
// SwiGLU + Q8 epilogue, GEMM 2 with the bf16 store.
#include "cuda/kernels/sm90_kernel_config.cuh"
#include "cuda/kernels/sm90_wgmma_epilogues.cuh"

namespace moe_ep::cuda {
namespace {

using Cfg = WgmmaTile64x256;
static_assert(Cfg::kBlockM == kWgmmaBlockM && Cfg::kBlockN == kWgmmaBlockN && Cfg::kThreads == kWgmmaThreads);

template <class Epilogue, class Params>
__global__ void __launch_bounds__(Cfg::kThreads, 1) sm90_mxfp4_wgmma_kernel(const __grid_constant__ Params p) {
  extern __shared__ __align__(1024) uint8_t smem[];
  run_wgmma_grouped_gemm<Cfg, Epilogue>(p, smem);
}

template <class Epilogue, class Params>
cudaError_t configure(int /*k*/, int* blocks_per_sm) {
  return configure_persistent_kernel(sm90_mxfp4_wgmma_kernel<Epilogue, Params>, Cfg::kThreads, Cfg::kSharedBytes,
                                     blocks_per_sm);
}

template <class Epilogue, class Params>
cudaError_t launch(const Params& p, int grid, cudaStream_t stream) {
  if (grid <= 0) return cudaSuccess;
  if (!p.op.w_col_scale) return cudaErrorInvalidValue;  // folded weights only (w_scale = shifts)
  sm90_mxfp4_wgmma_kernel<Epilogue, Params><<<grid, Cfg::kThreads, Cfg::kSharedBytes, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace

const Sm90FormKernels kMxfp4WgmmaFp8Kernels = {
    &configure<WgmmaSwigluQ8Epilogue, Gemm1Params>, &configure<WgmmaStoreBf16Epilogue, Gemm2Params>,
    &launch<WgmmaSwigluQ8Epilogue, Gemm1Params>, &launch<WgmmaStoreBf16Epilogue, Gemm2Params>};

}  // namespace moe_ep::cuda
