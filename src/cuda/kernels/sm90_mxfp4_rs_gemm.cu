// mxfp4 grouped GEMMs 1 and 2 on bf16 wgmma with the weights as the register operand
// (sm90_rs16_mainloop.cuh, Mxfp4Bf16RsWeights; four consumers: sm90_rs16_wide_mainloop.cuh), and the Q8 -> bf16 conversion of their
// activations into the rs order along k (tile/fp4_bf16_codec.h).
#include <cuda_bf16.h>

#include "cuda/kernels/sm90_q8_block.cuh"
#include "cuda/kernels/sm90_rs_convert.cuh"
#include "cuda/kernels/sm90_rs_kernel.cuh"

namespace moe_ep::cuda {
namespace {

using Mxfp4RsConfig = RsTileConfig<Mxfp4Bf16RsWeights>;
using Mxfp4RsWideConfig = Rs16WideTileConfig<Mxfp4Bf16RsWeights>;
static_assert(Mxfp4RsWideConfig::kBlockM == kRsWideBlockM && Mxfp4RsWideConfig::kBlockN == kRsWideBlockN);
// GEMM 1 over 128-token tiles: an expert's full pairs of 64-row list tiles, then its odd last one.
using Mxfp4RsWidePairsConfig = Rs16WideTileConfig<Mxfp4Bf16RsWeights, 7, 1, 128, kRsWideBlockM, TileWalk::kFullPairs>;
using Mxfp4RsWideOddLastConfig = Rs16WideTileConfig<Mxfp4Bf16RsWeights, 7, 1, kRsWideBlockM, kRsWideBlockM,
                                                    TileWalk::kOddLast>;
static_assert(Mxfp4RsWidePairsConfig::kBlockN == kRsWideBlockN && Mxfp4RsWideOddLastConfig::kBlockN == kRsWideBlockN);

// A k32 block of a Q8 row: 32 e4m3 bytes times the block's E8M0 scale, as bf16 (exact), at
// positions rs_position_of_k(l) of the block's 32.
struct Q8Bf16Block {
  static constexpr int kValues = 32;
  static __device__ __forceinline__ void convert(const uint8_t* a, const uint8_t* a_scale, int64_t b,
                                                 uint16_t (&v)[kValues]) {
    const uint4* src = reinterpret_cast<const uint4*>(a + b * 32);
    const uint4 lo = src[0], hi = src[1];
    const uint32_t words[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
    q8_block_to_rs_bf16(words, e8m0_to_float_device(a_scale[b]), v);
  }
};

}  // namespace

cudaError_t configure_sm90_mxfp4_rs_grouped_gemm1(int* blocks_per_sm) {
  return configure_rs_kernel<Mxfp4RsConfig, RsSwigluQ8Epilogue, Gemm1Params>(blocks_per_sm);
}

cudaError_t configure_sm90_mxfp4_rs_grouped_gemm2(int* blocks_per_sm) {
  return configure_rs_kernel<Mxfp4RsConfig, RsStoreBf16Epilogue, Gemm2Params>(blocks_per_sm);
}

cudaError_t launch_sm90_mxfp4_rs_grouped_gemm1(const Gemm1Params& p, int grid, cudaStream_t stream) {
  return launch_rs_kernel<Mxfp4RsConfig, RsSwigluQ8Epilogue>(p, grid, stream);
}

cudaError_t launch_sm90_mxfp4_rs_grouped_gemm2(const Gemm2Params& p, int grid, cudaStream_t stream) {
  return launch_rs_kernel<Mxfp4RsConfig, RsStoreBf16Epilogue>(p, grid, stream);
}

cudaError_t configure_sm90_mxfp4_rs_wide_grouped_gemm1(int* blocks_per_sm) {
  return configure_rs_kernel<Mxfp4RsWideConfig, RsSwigluQ8Epilogue, Gemm1Params>(blocks_per_sm);
}

cudaError_t configure_sm90_mxfp4_rs_wide_grouped_gemm2(int* blocks_per_sm) {
  return configure_rs_kernel<Mxfp4RsWideConfig, RsStoreBf16Epilogue, Gemm2Params>(blocks_per_sm);
}

cudaError_t launch_sm90_mxfp4_rs_wide_grouped_gemm1(const Gemm1Params& p, int grid, cudaStream_t stream) {
  return launch_rs_kernel<Mxfp4RsWideConfig, RsSwigluQ8Epilogue>(p, grid, stream);
}

cudaError_t launch_sm90_mxfp4_rs_wide_grouped_gemm2(const Gemm2Params& p, int grid, cudaStream_t stream) {
  return launch_rs_kernel<Mxfp4RsWideConfig, RsStoreBf16Epilogue>(p, grid, stream);
}

// Both launches share the grid.
cudaError_t configure_sm90_mxfp4_rs_wide128_grouped_gemm1(int* blocks_per_sm) {
  static_assert(Mxfp4RsWidePairsConfig::kThreads == Mxfp4RsWideOddLastConfig::kThreads);
  return configure_persistent_kernels(sm90_rs_kernel<Mxfp4RsWidePairsConfig, RsSwigluQ8Epilogue, Gemm1Params>,
                                      Mxfp4RsWidePairsConfig::kSharedBytes,
                                      sm90_rs_kernel<Mxfp4RsWideOddLastConfig, RsSwigluQ8Epilogue, Gemm1Params>,
                                      Mxfp4RsWideOddLastConfig::kSharedBytes, Mxfp4RsWidePairsConfig::kThreads,
                                      blocks_per_sm);
}

cudaError_t launch_sm90_mxfp4_rs_wide128_grouped_gemm1(const Gemm1Params& p, int grid, cudaStream_t stream) {
  if (p.schedule.num_experts <= 0) return cudaErrorInvalidValue;
  const cudaError_t e = launch_rs_kernel<Mxfp4RsWidePairsConfig, RsSwigluQ8Epilogue>(p, grid, stream);
  return e != cudaSuccess ? e : launch_rs_kernel<Mxfp4RsWideOddLastConfig, RsSwigluQ8Epilogue>(p, grid, stream);
}

cudaError_t launch_sm90_q8_to_rs_bf16(const uint8_t* a, const uint8_t* a_scale, int64_t rows,
                                      const int32_t* row_count, int k, uint16_t* out, cudaStream_t stream) {
  return launch_rs_convert<Q8Bf16Block>(a, a_scale, rows, row_count, k, out, stream);
}

}  // namespace moe_ep::cuda
