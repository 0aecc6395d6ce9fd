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
template <class Epilogue, class Params, int kSplit = 1>
__global__ void __launch_bounds__(kDecodeThreads, kDecodeMinBlocks)
    sm90_nvfp4_decode_kernel(const __grid_constant__ Params p) {
  using Mainloop = Nvfp4DecodeMainloop<kSplit>;
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

// A decode form's launcher; the launch grid is the m-tile bound times the n chunks.
template <int kSplit>
struct Nvfp4DecodeForm {
  using Mainloop = Nvfp4DecodeMainloop<kSplit>;

  template <class Epilogue, class Params>
  static cudaError_t configure(int k, int* blocks_per_sm) {
    if (!Mainloop::splits(k)) return cudaErrorInvalidValue;
    return configure_persistent_kernel(sm90_nvfp4_decode_kernel<Epilogue, Params, kSplit>, kDecodeThreads,
                                       nvfp4_decode_shared_bytes(k), blocks_per_sm);
  }

  template <class Epilogue, class Params>
  static cudaError_t launch(const Params& p, int m_tile_bound, cudaStream_t stream) {
    if (!Mainloop::splits(p.op.k)) return cudaErrorInvalidValue;
    const int blocks = m_tile_bound * (p.op.n / Mainloop::kBlockRows);
    if (blocks <= 0) return cudaSuccess;
    return launch_dependent(sm90_nvfp4_decode_kernel<Epilogue, Params, kSplit>, blocks, kDecodeThreads,
                            nvfp4_decode_shared_bytes(p.op.k), stream, p);
  }
};

}  // namespace

const Sm90FormKernels kNvfp4DecodeKernels = form_kernels<Nvfp4DecodeForm<1>, DecodeSwigluF32, DecodeStoreBf16<true>>();
const Sm90FormKernels kNvfp4DecodeSplitKernels =
    form_kernels<Nvfp4DecodeForm<2>, DecodeSwigluF32, DecodeStoreBf16<true>>();

}  // namespace moe_ep::cuda
