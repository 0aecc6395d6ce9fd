// mxfp4 decode grouped GEMMs (sm90_mxfp4_decode_mainloop.cuh): GEMM 1 with the clamped SwiGLU +
// Q8 epilogue, GEMM 2 with the bf16 store. One block per (16-row m tile, 128 weight rows);
// blocks past the routing's m-tile count return at once.
#include "cuda/kernels/sm90_mxfp4_decode_kernel.cuh"

namespace moe_ep::cuda {

cudaError_t configure_sm90_mxfp4_decode_gemm1(int k, int* blocks_per_sm) {
  return configure_decode<DecodeSwigluQ8, Gemm1Params>(k, blocks_per_sm);
}

cudaError_t configure_sm90_mxfp4_decode_gemm2(int k, int* blocks_per_sm) {
  return configure_decode<DecodeStoreBf16<false>, Gemm2Params>(k, blocks_per_sm);
}

cudaError_t launch_sm90_mxfp4_decode_gemm1(const Gemm1Params& p, int m_tile_bound, cudaStream_t stream) {
  return launch_decode<DecodeSwigluQ8>(p, m_tile_bound, stream);
}

cudaError_t launch_sm90_mxfp4_decode_gemm2(const Gemm2Params& p, int m_tile_bound, cudaStream_t stream) {
  return launch_decode<DecodeStoreBf16<false>>(p, m_tile_bound, stream);
}

cudaError_t configure_sm90_mxfp4_decode_deep_gemm1(int k, int* blocks_per_sm) {
  return configure_decode<DecodeSwigluQ8, Gemm1Params, kDecodeDeepPrefetch>(k, blocks_per_sm);
}

cudaError_t configure_sm90_mxfp4_decode_deep_gemm2(int k, int* blocks_per_sm) {
  return configure_decode<DecodeStoreBf16<false>, Gemm2Params, kDecodeDeepPrefetch>(k, blocks_per_sm);
}

cudaError_t launch_sm90_mxfp4_decode_deep_gemm1(const Gemm1Params& p, int m_tile_bound, cudaStream_t stream) {
  return launch_decode<DecodeSwigluQ8, kDecodeDeepPrefetch>(p, m_tile_bound, stream);
}

cudaError_t launch_sm90_mxfp4_decode_deep_gemm2(const Gemm2Params& p, int m_tile_bound, cudaStream_t stream) {
  return launch_decode<DecodeStoreBf16<false>, kDecodeDeepPrefetch>(p, m_tile_bound, stream);
}

cudaError_t configure_sm90_mxfp4_decode_split_gemm1(int k, int* blocks_per_sm) {
  return configure_decode<DecodeSwigluQ8, Gemm1Params, kDecodePrefetch, 2>(k, blocks_per_sm);
}

cudaError_t configure_sm90_mxfp4_decode_split_gemm2(int k, int* blocks_per_sm) {
  return configure_decode<DecodeStoreBf16<false>, Gemm2Params, kDecodePrefetch, 2>(k, blocks_per_sm);
}

cudaError_t launch_sm90_mxfp4_decode_split_gemm1(const Gemm1Params& p, int m_tile_bound, cudaStream_t stream) {
  return launch_decode<DecodeSwigluQ8, kDecodePrefetch, 2>(p, m_tile_bound, stream);
}

cudaError_t launch_sm90_mxfp4_decode_split_gemm2(const Gemm2Params& p, int m_tile_bound, cudaStream_t stream) {
  return launch_decode<DecodeStoreBf16<false>, kDecodePrefetch, 2>(p, m_tile_bound, stream);
}

cudaError_t configure_sm90_mxfp4_decode_gemm2_combine(int prefetch, int k, int* blocks_per_sm) {
  return with_decode_prefetch(prefetch, [&]<int kP>() {
    return configure_decode<DecodeStoreBf16Combine<false>, Gemm2Params, kP>(k, blocks_per_sm);
  });
}

cudaError_t launch_sm90_mxfp4_decode_gemm2_combine(int prefetch, const Gemm2Params& p, int m_tile_bound,
                                                  cudaStream_t stream) {
  return with_decode_prefetch(
      prefetch, [&]<int kP>() { return launch_decode<DecodeStoreBf16Combine<false>, kP>(p, m_tile_bound, stream); });
}

}  // namespace moe_ep::cuda
