// nvfp4 grouped GEMM 2 (W2, bf16 output): persistent grid over (m tile, n tile).
#include "cuda/kernels/sm90_gemm_epilogues.cuh"
#include "cuda/kernels/sm90_nvfp4_mainloop.cuh"

namespace moe_ep::cuda {
namespace {

using Mainloop = Nvfp4Mainloop;
using Epilogue = StoreBf16Epilogue<true>;
constexpr int kSharedBytes = Mainloop::kSharedBytes + Epilogue::kSharedBytes;

// Fits 128 registers without spills: two blocks per SM.
__global__ void __launch_bounds__(kGemmThreads, 2) sm90_nvfp4_grouped_gemm2_kernel(const __grid_constant__ Gemm2Params p) {
  extern __shared__ __align__(128) uint8_t smem[];
  run_grouped_gemm<Mainloop, Epilogue>(p, smem);
}

}  // namespace

cudaError_t configure_sm90_nvfp4_grouped_gemm2(int* blocks_per_sm) {
  cudaError_t err = cudaFuncSetAttribute(sm90_nvfp4_grouped_gemm2_kernel,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize, kSharedBytes);
  if (err != cudaSuccess) return err;
  return cudaOccupancyMaxActiveBlocksPerMultiprocessor(blocks_per_sm, sm90_nvfp4_grouped_gemm2_kernel,
                                                       kGemmThreads, kSharedBytes);
}

cudaError_t launch_sm90_nvfp4_grouped_gemm2(const Gemm2Params& p, int grid, cudaStream_t stream) {
  if (grid <= 0) return cudaSuccess;
  sm90_nvfp4_grouped_gemm2_kernel<<<grid, kGemmThreads, kSharedBytes, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace moe_ep::cuda
