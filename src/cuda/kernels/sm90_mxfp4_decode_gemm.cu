// mxfp4 decode forms on mma.sync (sm90_mxfp4_decode_mainloop.cuh): GEMM 1 with the clamped SwiGLU + Q8
// epilogue, GEMM 2 with the bf16 store. One block per (16-row m tile, 128 weight rows; 64 with K
// split in two); blocks past the routing's m-tile count return at once.
#include "cuda/kernels/sm90_mxfp4_decode_kernel.cuh"

namespace moe_ep::cuda {
namespace {
template <bool kFolded, int kSplit>
using MmaDecode = Mxfp4DecodeMainloop<kFolded, kSplit>;
}  // namespace

const Sm90FormKernels kMxfp4DecodeKernels = form_kernels<Mxfp4DecodeForm<MmaDecode, 1>, DecodeSwigluQ8, DecodeStoreBf16<false>>();
const Sm90FormKernels kMxfp4DecodeSplitKernels =
    form_kernels<Mxfp4DecodeForm<MmaDecode, 2>, DecodeSwigluQ8, DecodeStoreBf16<false>>();

}  // namespace moe_ep::cuda
