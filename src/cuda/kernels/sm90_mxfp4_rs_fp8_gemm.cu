// mxfp4 grouped GEMMs 1 and 2 on FP8 wgmma with the weights as the register operand
// (sm90_mxfp4_rs_fp8_mainloop.cuh), m tiles of 64 or 96 tokens (128 would need
// 3 x 64 accumulator registers per consumer thread: it spills).
#include "cuda/kernels/sm90_rs_kernel.cuh"

namespace moe_ep::cuda {
namespace {

static_assert(RsFp8TileConfig<64>::kBlockN == kRsFp8BlockN && RsFp8TileConfig<96>::kBlockN == kRsFp8BlockN);

// Calls f(Cfg{}) with the configuration of `block_m`; cudaErrorInvalidValue for none.
template <class F>
cudaError_t with_rs_fp8_config(int block_m, F&& f) {
  switch (block_m) {
    case 64: return f(RsFp8TileConfig<64>{});
    case 96: return f(RsFp8TileConfig<96>{});
  }
  return cudaErrorInvalidValue;
}

}  // namespace

cudaError_t configure_sm90_mxfp4_rs_fp8_grouped_gemm1(int block_m, int* blocks_per_sm) {
  return with_rs_fp8_config(block_m, [&](auto cfg) {
    return configure_rs_kernel<decltype(cfg), RsSwigluQ8Epilogue, Gemm1Params>(blocks_per_sm);
  });
}

cudaError_t configure_sm90_mxfp4_rs_fp8_grouped_gemm2(int block_m, int* blocks_per_sm) {
  return with_rs_fp8_config(block_m, [&](auto cfg) {
    return configure_rs_kernel<decltype(cfg), RsStoreBf16Epilogue, Gemm2Params>(blocks_per_sm);
  });
}

cudaError_t launch_sm90_mxfp4_rs_fp8_grouped_gemm1(int block_m, const Gemm1Params& p, int grid, cudaStream_t stream) {
  return with_rs_fp8_config(block_m, [&](auto cfg) {
    return launch_rs_kernel<decltype(cfg), RsSwigluQ8Epilogue>(p, grid, stream);
  });
}

cudaError_t launch_sm90_mxfp4_rs_fp8_grouped_gemm2(int block_m, const Gemm2Params& p, int grid, cudaStream_t stream) {
  return with_rs_fp8_config(block_m, [&](auto cfg) {
    return launch_rs_kernel<decltype(cfg), RsStoreBf16Epilogue>(p, grid, stream);
  });
}

}  // namespace moe_ep::cuda
