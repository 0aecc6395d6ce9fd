// nvfp4 decode forms (sm90_nvfp4_decode_mainloop.cuh): GEMM 1 with the clamped SwiGLU
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
// 16 x (K/2 + K/16) bytes plus padding) with 2 k steps of weights in flight per warp.
template <class Epilogue, class Params, int kPrefetch, int kSplit = 1>
__global__ void __launch_bounds__(kDecodeThreads, kDecodeMinBlocks<kPrefetch>)
    sm90_nvfp4_decode_kernel(const __grid_constant__ Params p) {
  using Mainloop = Nvfp4DecodeMainloop<kPrefetch, kSplit>;
  extern __shared__ __align__(128) uint8_t smem[];
  // The schedule, A and (GEMM 2) the rows written by the pass before. No early launch of the
  // next grid (see sm90_mxfp4_decode_gemm.cu).
  ptx::grid_dependency_wait();
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

template <int kSplit>
constexpr Sm90FormKernels decode_form() {
  return {&configure_decode<DecodeSwigluF32, Gemm1Params, kDecodePrefetch, kSplit>,
          &configure_decode<DecodeStoreBf16<true>, Gemm2Params, kDecodePrefetch, kSplit>,
          &launch_decode<DecodeSwigluF32, kDecodePrefetch, kSplit, Gemm1Params>,
          &launch_decode<DecodeStoreBf16<true>, kDecodePrefetch, kSplit, Gemm2Params>};
}

}  // namespace

const Sm90FormKernels kNvfp4DecodeKernels = decode_form<1>();
const Sm90FormKernels kNvfp4DecodeSplitKernels = decode_form<2>();

}  // namespace moe_ep::cuda
