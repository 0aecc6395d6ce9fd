// mxfp4 decode forms on FP8 wgmma (sm90_mxfp4_decode_fp8_mainloop.cuh): the decode forms' blocks,
// tiles and epilogues (GEMM 1 with the clamped SwiGLU + Q8 epilogue, GEMM 2 with the bf16 store),
// each k32 block on one m64 n8 / n16 k32 wgmma per warpgroup.
#include "cuda/kernels/sm90_mxfp4_decode_fp8_mainloop.cuh"
#include "cuda/kernels/sm90_mxfp4_decode_kernel.cuh"

namespace moe_ep::cuda {

const Sm90FormKernels kMxfp4DecodeWgmmaKernels =
    form_kernels<Mxfp4DecodeForm<Mxfp4DecodeFp8Mainloop, 1>, DecodeSwigluQ8, DecodeStoreBf16<false>>();
const Sm90FormKernels kMxfp4DecodeWgmmaSplitKernels =
    form_kernels<Mxfp4DecodeForm<Mxfp4DecodeFp8Mainloop, 2>, DecodeSwigluQ8, DecodeStoreBf16<false>>();

}  // namespace moe_ep::cuda
