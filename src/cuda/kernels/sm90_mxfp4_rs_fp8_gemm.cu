// The mxfp4 FP8 register-operand forms (sm90_mxfp4_rs_fp8_mainloop.cuh): FP8 wgmma with the weights
// decoded into the A fragment by four consumer warpgroups, 64 tokens x 256 weight rows, folded
// weights only; the tails form runs an expert's last tile of at most 48 tokens on n48 wgmmas, in a
// second pass after the block's other tiles (the same outputs, bit for bit).
#include "cuda/kernels/sm90_rs_kernel.cuh"

namespace moe_ep::cuda {

static_assert(RsFp8TileConfig<>::kBlockM == kRsWideBlockM && RsFp8TileConfig<>::kBlockN == kRsFp8WideBlockN);

const Sm90FormKernels kMxfp4RsFp8Kernels =
    rs_form_kernels<RsFp8TileConfig<RsFp8Tails::kFull>, RsSwigluQ8Epilogue, RsStoreBf16Epilogue>();
const Sm90FormKernels kMxfp4RsFp8TailsKernels =
    rs_form_kernels<RsFp8TileConfig<RsFp8Tails::kNarrowLast>, RsSwigluQ8Epilogue, RsStoreBf16Epilogue>();

}  // namespace moe_ep::cuda
