// The mxfp4 FP8 register-operand forms that promote once per k step (sm90_mxfp4_rs_fp8_mainloop.cuh,
// RsFp8Promotion::kK128) on activations of one scale per 128 k (sm90_q8_regroup.h): not the
// recipe's codes where a token's four k32 scales of a step differ (docs/kernels.md).
//   rs-fp8-k128        the rs-fp8-tails tiles and walk: 64 tokens x 256 weight rows, four consumers;
//   rs-fp8-k128-pairs  128 tokens x 128 weight rows on two consumers, over an expert's full pairs
//                      of the routing's 64-row list tiles, then its odd last tile on 64 x 128.
#include "cuda/kernels/sm90_rs_kernel.cuh"

namespace moe_ep::cuda {
namespace {

using RsFp8K128Config = RsFp8TileConfig<RsFp8Tails::kNarrowLast, RsFp8Promotion::kK128>;
static_assert(RsFp8K128Config::kBlockM == kRsWideBlockM && RsFp8K128Config::kBlockN == kRsFp8WideBlockN);

using RsFp8K128PairsConfig = RsFp8TileConfig<RsFp8Tails::kFull, RsFp8Promotion::kK128, kRsWide128BlockM, 2,
                                             kRsWideBlockM, TileWalk::kFullPairs>;
using RsFp8K128OddLastConfig = RsFp8TileConfig<RsFp8Tails::kFull, RsFp8Promotion::kK128, kRsWideBlockM, 2,
                                               kRsWideBlockM, TileWalk::kOddLast>;
static_assert(RsFp8K128PairsConfig::kBlockN == kRsFp8PairsBlockN);

template <class Epilogue, class Params>
constexpr auto configure_pairs = &configure_rs_pairs<RsFp8K128PairsConfig, RsFp8K128OddLastConfig, Epilogue, Params>;
template <class Epilogue, class Params>
constexpr auto launch_pairs = &launch_rs_pairs<RsFp8K128PairsConfig, RsFp8K128OddLastConfig, Epilogue, Params>;

}  // namespace

const Sm90FormKernels kMxfp4RsFp8K128Kernels =
    rs_form_kernels<RsFp8K128Config, RsSwigluQ8Epilogue, RsStoreBf16Epilogue>();

const Sm90FormKernels kMxfp4RsFp8K128PairsKernels = {
    configure_pairs<RsSwigluQ8Epilogue, Gemm1Params>, configure_pairs<RsStoreBf16Epilogue, Gemm2Params>,
    launch_pairs<RsSwigluQ8Epilogue, Gemm1Params>, launch_pairs<RsStoreBf16Epilogue, Gemm2Params>};

}  // namespace moe_ep::cuda
