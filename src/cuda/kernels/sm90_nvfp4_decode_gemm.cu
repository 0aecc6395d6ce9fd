// nvfp4 decode grouped GEMMs (sm90_nvfp4_decode_mainloop.cuh): GEMM 1 with the clamped SwiGLU
// and fp32 h (quantized to NVFP4 by the pass after it), GEMM 2 with the bf16 store. One block
// per (16-row m tile, 128 weight rows; 64 with K split in two); blocks past the routing's m-tile
// count return at once.
#include "cuda/kernels/sm90_decode_epilogues.cuh"
#include "cuda/kernels/sm90_kernel_config.cuh"
#include "cuda/kernels/sm90_nvfp4_decode_mainloop.cuh"
#include "cuda/ptx/griddep.cuh"

namespace moe_ep::cuda {
namespace {

// Three blocks of 8 warps per SM (<= 80 registers; shared memory is the tile's A and scales,
// 16 x (K/2 + K/16) bytes plus padding) with 2 k steps of weights in flight per warp; two with
// kDecodeDeepPrefetch.
template <class Epilogue, class Params, int kPrefetch, int kSplit = 1>
__global__ void __launch_bounds__(kDecodeThreads, kDecodeMinBlocks<kPrefetch>)
    sm90_nvfp4_decode_kernel(const __grid_constant__ Params p) {
  using Mainloop = Nvfp4DecodeMainloop<kPrefetch, kSplit>;
  extern __shared__ __align__(128) uint8_t smem[];
  // The schedule, A and (GEMM 2) the rows written by the pass before. No early launch of the
  // next grid (see sm90_mxfp4_decode_gemm.cu).
  ptx::grid_dependency_wait();
  if constexpr (FusedCombineEpilogue<Epilogue>) Epilogue::zero_unslotted_tokens(p.epilogue, p.op.n);
  DecodeTile t;
  if (!decode_tile<Mainloop::kBlockRows>(p.schedule, p.op.n, t)) return;
  DecodeAccumulators acc;
  Mainloop::run(p.op, t, smem, acc);
  if constexpr (kSplit == 1) {
    Epilogue::apply(p.epilogue, p.op, t, acc, nullptr);
  } else {
    if (Mainloop::part() != 0) return;  // its sums are in the first half's accumulators
    Epilogue::template apply<Mainloop::kBlockRows>(p.epilogue, p.op, t, acc, nullptr);
  }
}

template <class Epilogue, class Params, int kPrefetch = kDecodePrefetch, int kSplit = 1>
cudaError_t configure_decode(int k, int* blocks_per_sm) {
  if (!Nvfp4DecodeMainloop<kPrefetch, kSplit>::splits(k)) return cudaErrorInvalidValue;
  return configure_persistent_kernel(sm90_nvfp4_decode_kernel<Epilogue, Params, kPrefetch, kSplit>, kDecodeThreads,
                                     nvfp4_decode_shared_bytes(k), blocks_per_sm);
}

template <class Epilogue, int kPrefetch = kDecodePrefetch, int kSplit = 1, class Params>
cudaError_t launch_decode(const Params& p, int m_tile_bound, cudaStream_t stream) {
  using Mainloop = Nvfp4DecodeMainloop<kPrefetch, kSplit>;
  if (!Mainloop::splits(p.op.k)) return cudaErrorInvalidValue;
  const int blocks = m_tile_bound * (p.op.n / Mainloop::kBlockRows);
  if (blocks <= 0) return cudaSuccess;
  return launch_dependent(sm90_nvfp4_decode_kernel<Epilogue, Params, kPrefetch, kSplit>, blocks, kDecodeThreads,
                          nvfp4_decode_shared_bytes(p.op.k), stream, p);
}

}  // namespace

cudaError_t configure_sm90_nvfp4_decode_gemm1(int k, int* blocks_per_sm) {
  return configure_decode<DecodeSwigluF32, Gemm1Params>(k, blocks_per_sm);
}

cudaError_t configure_sm90_nvfp4_decode_gemm2(int k, int* blocks_per_sm) {
  return configure_decode<DecodeStoreBf16<true>, Gemm2Params>(k, blocks_per_sm);
}

cudaError_t launch_sm90_nvfp4_decode_gemm1(const Gemm1Params& p, int m_tile_bound, cudaStream_t stream) {
  return launch_decode<DecodeSwigluF32>(p, m_tile_bound, stream);
}

cudaError_t launch_sm90_nvfp4_decode_gemm2(const Gemm2Params& p, int m_tile_bound, cudaStream_t stream) {
  return launch_decode<DecodeStoreBf16<true>>(p, m_tile_bound, stream);
}

cudaError_t configure_sm90_nvfp4_decode_deep_gemm1(int k, int* blocks_per_sm) {
  return configure_decode<DecodeSwigluF32, Gemm1Params, kDecodeDeepPrefetch>(k, blocks_per_sm);
}

cudaError_t configure_sm90_nvfp4_decode_deep_gemm2(int k, int* blocks_per_sm) {
  return configure_decode<DecodeStoreBf16<true>, Gemm2Params, kDecodeDeepPrefetch>(k, blocks_per_sm);
}

cudaError_t launch_sm90_nvfp4_decode_deep_gemm1(const Gemm1Params& p, int m_tile_bound, cudaStream_t stream) {
  return launch_decode<DecodeSwigluF32, kDecodeDeepPrefetch>(p, m_tile_bound, stream);
}

cudaError_t launch_sm90_nvfp4_decode_deep_gemm2(const Gemm2Params& p, int m_tile_bound, cudaStream_t stream) {
  return launch_decode<DecodeStoreBf16<true>, kDecodeDeepPrefetch>(p, m_tile_bound, stream);
}

cudaError_t configure_sm90_nvfp4_decode_split_gemm1(int k, int* blocks_per_sm) {
  return configure_decode<DecodeSwigluF32, Gemm1Params, kDecodePrefetch, 2>(k, blocks_per_sm);
}

cudaError_t configure_sm90_nvfp4_decode_split_gemm2(int k, int* blocks_per_sm) {
  return configure_decode<DecodeStoreBf16<true>, Gemm2Params, kDecodePrefetch, 2>(k, blocks_per_sm);
}

cudaError_t launch_sm90_nvfp4_decode_split_gemm1(const Gemm1Params& p, int m_tile_bound, cudaStream_t stream) {
  return launch_decode<DecodeSwigluF32, kDecodePrefetch, 2>(p, m_tile_bound, stream);
}

cudaError_t launch_sm90_nvfp4_decode_split_gemm2(const Gemm2Params& p, int m_tile_bound, cudaStream_t stream) {
  return launch_decode<DecodeStoreBf16<true>, kDecodePrefetch, 2>(p, m_tile_bound, stream);
}

cudaError_t configure_sm90_nvfp4_decode_gemm2_combine(int prefetch, int k, int* blocks_per_sm) {
  return with_decode_prefetch(prefetch, [&]<int kP>() {
    return configure_decode<DecodeStoreBf16Combine<true>, Gemm2Params, kP>(k, blocks_per_sm);
  });
}

cudaError_t launch_sm90_nvfp4_decode_gemm2_combine(int prefetch, const Gemm2Params& p, int m_tile_bound,
                                                  cudaStream_t stream) {
  return with_decode_prefetch(
      prefetch, [&]<int kP>() { return launch_decode<DecodeStoreBf16Combine<true>, kP>(p, m_tile_bound, stream); });
}

}  // namespace moe_ep::cuda
