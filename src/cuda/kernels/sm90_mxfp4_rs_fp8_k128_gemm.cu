// The mxfp4 FP8 register-operand form that promotes once per k step (sm90_mxfp4_rs_fp8_mainloop.cuh,
// RsFp8Promotion::kK128): the rs-fp8-tails tiles and walk, each k step's four k32 wgmmas chained
// on one partial set, the activations re-encoded by the producer to each token's largest scale of
// the step. Not the recipe's codes where a token's four scales differ (docs/kernels.md).
#include "cuda/kernels/sm90_rs_kernel.cuh"

namespace moe_ep::cuda {

using RsFp8K128Config = RsFp8TileConfig<RsFp8Tails::kNarrowLast, RsFp8Promotion::kK128>;
static_assert(RsFp8K128Config::kBlockM == kRsWideBlockM && RsFp8K128Config::kBlockN == kRsFp8WideBlockN);

const Sm90FormKernels kMxfp4RsFp8K128Kernels =
    rs_form_kernels<RsFp8K128Config, RsSwigluQ8Epilogue, RsStoreBf16Epilogue>();

}  // namespace moe_ep::cuda
