// mxfp4 grouped GEMMs 1 and 2 on FP8 wgmma with the weights as the register operand
// (sm90_mxfp4_rs_fp8_mainloop.cuh), m tiles of 64 or 96 tokens (128 would need
// 3 x 64 accumulator registers per consumer thread: it spills) on n tiles of 128 weight rows, or
// 64 tokens on 256 rows (four consumer warpgroups; with narrow_tails, an expert's last tile of at
// most 48 tokens on n48 wgmmas, in a second pass after the block's other tiles).
#include "cuda/kernels/sm90_rs_kernel.cuh"

namespace moe_ep::cuda {
namespace {

template <RsFp8Tails kTails>
using RsFp8Wide = RsFp8TileConfig<64, RsFp8Weights::kCpAsync, kRsFp8AllWork, 4, kTails>;
static_assert(RsFp8TileConfig<64>::kBlockN == kRsFp8BlockN && RsFp8TileConfig<96>::kBlockN == kRsFp8BlockN &&
              RsFp8Wide<RsFp8Tails::kFull>::kBlockN == kRsFp8WideBlockN);

// Calls f(Cfg{}) with the configuration of (block_m, block_n, narrow_tails); cudaErrorInvalidValue
// for none.
template <class F>
cudaError_t with_rs_fp8_config(int block_m, int block_n, bool narrow_tails, F&& f) {
  if (block_n == kRsFp8WideBlockN) {
    if (block_m != 64) return cudaErrorInvalidValue;
    return narrow_tails ? f(RsFp8Wide<RsFp8Tails::kNarrowLast>{}) : f(RsFp8Wide<RsFp8Tails::kFull>{});
  }
  if (block_n != kRsFp8BlockN || narrow_tails) return cudaErrorInvalidValue;
  switch (block_m) {
    case 64: return f(RsFp8TileConfig<64>{});
    case 96: return f(RsFp8TileConfig<96>{});
  }
  return cudaErrorInvalidValue;
}

}  // namespace

cudaError_t configure_sm90_mxfp4_rs_fp8_grouped_gemm1(int block_m, int* blocks_per_sm, int block_n, bool narrow_tails) {
  return with_rs_fp8_config(block_m, block_n, narrow_tails, [&](auto cfg) {
    return configure_rs_kernel<decltype(cfg), RsSwigluQ8Epilogue, Gemm1Params>(blocks_per_sm);
  });
}

cudaError_t configure_sm90_mxfp4_rs_fp8_grouped_gemm2(int block_m, int* blocks_per_sm, int block_n, bool narrow_tails) {
  return with_rs_fp8_config(block_m, block_n, narrow_tails, [&](auto cfg) {
    return configure_rs_kernel<decltype(cfg), RsStoreBf16Epilogue, Gemm2Params>(blocks_per_sm);
  });
}

cudaError_t launch_sm90_mxfp4_rs_fp8_grouped_gemm1(int block_m, const Gemm1Params& p, int grid, cudaStream_t stream,
                                                   int block_n, bool narrow_tails) {
  return with_rs_fp8_config(block_m, block_n, narrow_tails, [&](auto cfg) {
    return launch_rs_kernel<decltype(cfg), RsSwigluQ8Epilogue>(p, grid, stream);
  });
}

cudaError_t launch_sm90_mxfp4_rs_fp8_grouped_gemm2(int block_m, const Gemm2Params& p, int grid, cudaStream_t stream,
                                                   int block_n, bool narrow_tails) {
  return with_rs_fp8_config(block_m, block_n, narrow_tails, [&](auto cfg) {
    return launch_rs_kernel<decltype(cfg), RsStoreBf16Epilogue>(p, grid, stream);
  });
}

}  // namespace moe_ep::cuda
