// mxfp4 grouped GEMM 2 (W2, bf16 output): persistent grid over (m tile, n tile), with
// E8M0 block scales or weights folded into the FP8 window (op.w_col_scale set).
#include "cuda/kernels/sm90_gemm_epilogues.cuh"
#include "cuda/kernels/sm90_kernel_config.cuh"
#include "cuda/kernels/sm90_mxfp4_mainloop.cuh"

namespace moe_ep::cuda {
namespace {

using Epilogue = StoreBf16Epilogue<false>;
template <class Mainloop>
constexpr int kSharedBytes = Mainloop::kSharedBytes + Epilogue::kSharedBytes;

// One block of 8 warps per SM (the accumulators and B fragments take ~250 registers).
template <class Mainloop>
__global__ void __launch_bounds__(kGemmThreads, 1) sm90_mxfp4_grouped_gemm2_kernel(const __grid_constant__ Gemm2Params p) {
  extern __shared__ __align__(128) uint8_t smem[];
  run_grouped_gemm<Mainloop, Epilogue>(p, smem);
}

}  // namespace

cudaError_t configure_sm90_mxfp4_grouped_gemm2(int* blocks_per_sm) {
  return configure_persistent_kernels(sm90_mxfp4_grouped_gemm2_kernel<Mxfp4Mainloop>, kSharedBytes<Mxfp4Mainloop>,
                                      sm90_mxfp4_grouped_gemm2_kernel<Mxfp4FoldedMainloop>,
                                      kSharedBytes<Mxfp4FoldedMainloop>, kGemmThreads, blocks_per_sm);
}

cudaError_t launch_sm90_mxfp4_grouped_gemm2(const Gemm2Params& p, int grid, cudaStream_t stream) {
  if (grid <= 0) return cudaSuccess;
  if (p.op.w_col_scale)
    sm90_mxfp4_grouped_gemm2_kernel<Mxfp4FoldedMainloop>
        <<<grid, kGemmThreads, kSharedBytes<Mxfp4FoldedMainloop>, stream>>>(p);
  else
    sm90_mxfp4_grouped_gemm2_kernel<Mxfp4Mainloop><<<grid, kGemmThreads, kSharedBytes<Mxfp4Mainloop>, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace moe_ep::cuda
