// mxfp4 decode forms (sm90_mxfp4_decode_mainloop.cuh): GEMM 1 with the clamped SwiGLU + Q8
// epilogue, GEMM 2 with the bf16 store. One block per (16-row m tile, 128 weight rows; 64 with K
// split in two); blocks past the routing's m-tile count return at once.
#include "cuda/kernels/sm90_mxfp4_decode_kernel.cuh"

namespace moe_ep::cuda {
namespace {

template <class Epilogue, class Params, int kSplit>
cudaError_t configure(int k, int* blocks_per_sm) {
  return configure_decode<Epilogue, Params, kDecodePrefetch, kSplit>(k, blocks_per_sm);
}

template <class Epilogue, int kSplit, class Params>
cudaError_t launch(const Params& p, int m_tile_bound, cudaStream_t stream) {
  return launch_decode<Epilogue, kDecodePrefetch, kSplit>(p, m_tile_bound, stream);
}

template <int kSplit>
constexpr Sm90FormKernels decode_form() {
  return {&configure<DecodeSwigluQ8, Gemm1Params, kSplit>, &configure<DecodeStoreBf16<false>, Gemm2Params, kSplit>,
          &launch<DecodeSwigluQ8, kSplit, Gemm1Params>, &launch<DecodeStoreBf16<false>, kSplit, Gemm2Params>};
}

}  // namespace

const Sm90FormKernels kMxfp4DecodeKernels = decode_form<1>();
const Sm90FormKernels kMxfp4DecodeSplitKernels = decode_form<2>();

}  // namespace moe_ep::cuda
