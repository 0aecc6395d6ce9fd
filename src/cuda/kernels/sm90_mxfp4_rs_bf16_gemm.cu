// The mxfp4 bf16 pairs form: GEMM 1 on bf16 wgmma with the weights decoded into the register A
// operand by four consumer warpgroups (sm90_rs16_wide_mainloop.cuh, Mxfp4Bf16RsWeights), over the
// routing's 64-row list tiles: an expert's full pairs of them as 128-token tiles, then (a second
// launch on the same grid, 64-token tiles) its odd last one, so no tile carries more than 63 empty
// rows; GEMM 2 stays on the rs-fp8 form over the same list. Also the Q8 -> bf16 conversion of x
// into the rs order along k (tile/fp4_bf16_codec.h).
#include <cuda_bf16.h>

#include "cuda/kernels/sm90_q8_block.cuh"
#include "cuda/kernels/sm90_rs_convert.cuh"
#include "cuda/kernels/sm90_rs_kernel.cuh"

namespace moe_ep::cuda {
namespace {

// GEMM 1 over 128-token tiles: an expert's full pairs of 64-row list tiles, then its odd last one.
using Mxfp4RsWidePairsConfig = Rs16WideTileConfig<Mxfp4Bf16RsWeights, kRsWide128BlockM, kRsWideBlockM,
                                                  TileWalk::kFullPairs>;
using Mxfp4RsWideOddLastConfig =
    Rs16WideTileConfig<Mxfp4Bf16RsWeights, kRsWideBlockM, kRsWideBlockM, TileWalk::kOddLast>;
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

// Both launches share the grid.
cudaError_t configure_pairs(int /*k*/, int* blocks_per_sm) {
  static_assert(Mxfp4RsWidePairsConfig::kThreads == Mxfp4RsWideOddLastConfig::kThreads);
  return configure_persistent_kernels(sm90_rs_kernel<Mxfp4RsWidePairsConfig, RsSwigluQ8Epilogue, Gemm1Params>,
                                      Mxfp4RsWidePairsConfig::kSharedBytes,
                                      sm90_rs_kernel<Mxfp4RsWideOddLastConfig, RsSwigluQ8Epilogue, Gemm1Params>,
                                      Mxfp4RsWideOddLastConfig::kSharedBytes, Mxfp4RsWidePairsConfig::kThreads,
                                      blocks_per_sm);
}

// Needs schedule.num_experts (the odd-last walk goes over the experts).
cudaError_t launch_pairs(const Gemm1Params& p, int grid, cudaStream_t stream) {
  if (p.schedule.num_experts <= 0) return cudaErrorInvalidValue;
  const cudaError_t e = launch_rs_kernel<Mxfp4RsWidePairsConfig, RsSwigluQ8Epilogue>(p, grid, stream);
  return e != cudaSuccess ? e : launch_rs_kernel<Mxfp4RsWideOddLastConfig, RsSwigluQ8Epilogue>(p, grid, stream);
}

}  // namespace

const Sm90FormKernels kMxfp4RsBf16PairsKernels = {&configure_pairs, nullptr, &launch_pairs, nullptr};

cudaError_t launch_sm90_q8_to_rs_bf16(const uint8_t* a, const uint8_t* a_scale, int64_t rows,
                                      const int32_t* row_count, int k, uint16_t* out, cudaStream_t stream) {
  return launch_rs_convert<Q8Bf16Block>(a, a_scale, rows, row_count, k, out, stream);
}

}  // namespace moe_ep::cuda
