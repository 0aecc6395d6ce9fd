// mxfp4 grouped GEMMs 1 and 2 on FP8 wgmma with the weights as the register operand
// (sm90_mxfp4_rs_fp8_mainloop.cuh), m tiles of 64 or 96 tokens (128 would need
// 3 x 64 accumulator registers per consumer thread: it spills).
#include "cuda/kernels/sm90_kernel_config.cuh"
#include "cuda/kernels/sm90_mxfp4_rs_fp8_mainloop.cuh"
#include "cuda/kernels/sm90_rs_epilogues.cuh"

namespace moe_ep::cuda {
namespace {

template <class Cfg, class Epilogue, class Params>
__global__ void __launch_bounds__(Cfg::kThreads, 1) sm90_mxfp4_rs_fp8_kernel(const __grid_constant__ Params p) {
  extern __shared__ __align__(1024) uint8_t smem[];
  run_rs_fp8_grouped_gemm<Cfg, Epilogue>(p, smem);
}

// Calls f(Cfg{}) with the configuration of `block_m`; cudaErrorInvalidValue for none.
template <class F>
cudaError_t with_rs_fp8_config(int block_m, F&& f) {
  switch (block_m) {
    case 64: return f(RsFp8TileConfig<64>{});
    case 96: return f(RsFp8TileConfig<96>{});
  }
  return cudaErrorInvalidValue;
}

template <class Epilogue, class Params>
cudaError_t configure_rs_fp8(int block_m, int* blocks_per_sm) {
  return with_rs_fp8_config(block_m, [&](auto cfg) {
    using Cfg = decltype(cfg);
    return configure_persistent_kernel(sm90_mxfp4_rs_fp8_kernel<Cfg, Epilogue, Params>, Cfg::kThreads,
                                       Cfg::kSharedBytes, blocks_per_sm);
  });
}

template <class Epilogue, class Params>
cudaError_t launch_rs_fp8(int block_m, const Params& p, int grid, cudaStream_t stream) {
  if (grid <= 0) return cudaSuccess;
  if (!p.op.w_col_scale || p.op.n <= 0 || p.op.k <= 0 || p.op.n % kRsFp8BlockN != 0 || p.op.k % 128 != 0)
    return cudaErrorInvalidValue;  // folded weights, whole tiles only
  return with_rs_fp8_config(block_m, [&](auto cfg) {
    using Cfg = decltype(cfg);
    sm90_mxfp4_rs_fp8_kernel<Cfg, Epilogue, Params><<<grid, Cfg::kThreads, Cfg::kSharedBytes, stream>>>(p);
    return cudaGetLastError();
  });
}

}  // namespace

cudaError_t configure_sm90_mxfp4_rs_fp8_grouped_gemm1(int block_m, int* blocks_per_sm) {
  return configure_rs_fp8<RsSwigluQ8Epilogue, Gemm1Params>(block_m, blocks_per_sm);
}

cudaError_t configure_sm90_mxfp4_rs_fp8_grouped_gemm2(int block_m, int* blocks_per_sm) {
  return configure_rs_fp8<RsStoreBf16Epilogue, Gemm2Params>(block_m, blocks_per_sm);
}

cudaError_t launch_sm90_mxfp4_rs_fp8_grouped_gemm1(int block_m, const Gemm1Params& p, int grid, cudaStream_t stream) {
  return launch_rs_fp8<RsSwigluQ8Epilogue>(block_m, p, grid, stream);
}

cudaError_t launch_sm90_mxfp4_rs_fp8_grouped_gemm2(int block_m, const Gemm2Params& p, int grid, cudaStream_t stream) {
  return launch_rs_fp8<RsStoreBf16Epilogue>(block_m, p, grid, stream);
}

}  // namespace moe_ep::cuda
