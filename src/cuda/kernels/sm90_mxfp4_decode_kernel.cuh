// The mxfp4 decode kernel (sm90_mxfp4_decode_mainloop.cuh) and its launcher (form_kernels),
// instantiated by sm90_mxfp4_decode_gemm.cu.
#pragma once

#include "cuda/kernels/sm90_decode_epilogues.cuh"
#include "cuda/kernels/sm90_kernel_config.cuh"
#include "cuda/kernels/sm90_mxfp4_decode_mainloop.cuh"
#include "cuda/ptx/griddep.cuh"

namespace moe_ep::cuda {

// Three blocks of 8 warps per SM (<= 80 registers; shared memory is the 24 KB A ring plus 2 * K
// bytes of fp32 scales) with 2 k steps of weights in flight per warp.
// The epilogue gets the shared memory after the activation scales. kSplit = 2: K in two halves
// (Mxfp4DecodeMainloop), blocks of 64 weight rows, an A ring per half.
template <bool kFolded, class Epilogue, class Params, int kSplit = 1>
__global__ void __launch_bounds__(kDecodeThreads, kDecodeMinBlocks)
    sm90_mxfp4_decode_kernel(const __grid_constant__ Params p) {
  using Mainloop = Mxfp4DecodeMainloop<kFolded, kSplit>;
  extern __shared__ __align__(128) uint8_t smem[];
  __shared__ DecodeTables tables;
  // The schedule, A and (GEMM 2) the rows written by GEMM 1. No early launch of the next grid:
  // GEMM 2's blocks would take the slots GEMM 1 leaves free at its start and end up unevenly
  // spread over the SMs.
  ptx::grid_dependency_wait();
  DecodeTile t;
  if (!decode_tile<Mainloop::kBlockRows>(p.schedule, p.op.n, t)) return;
  DecodeAccumulators acc;
  Mainloop::run(p.op, t, smem, tables, acc);
  uint8_t* epilogue_smem = smem + decode_epilogue_offset(p.op.k, kSplit);
  if constexpr (kSplit == 1) {
    Epilogue::apply(p.epilogue, p.op, t, acc, epilogue_smem);
  } else {
    if (Mainloop::part() != 0) return;  // its sums are in the first half's accumulators
    Epilogue::template apply<Mainloop::kBlockRows>(p.epilogue, p.op, t, acc, epilogue_smem);
  }
}

// A decode form's launcher; the launch grid is the m-tile bound times the n chunks, and a form
// with folded weights (op.w_col_scale set) picks the folded kernel.
template <int kSplit>
struct Mxfp4DecodeForm {
  template <class Epilogue, class Params>
  static cudaError_t configure(int k, int* blocks_per_sm) {
    const int smem = decode_shared_bytes(k, kSplit);
    return configure_persistent_kernels(sm90_mxfp4_decode_kernel<true, Epilogue, Params, kSplit>, smem,
                                        sm90_mxfp4_decode_kernel<false, Epilogue, Params, kSplit>, smem,
                                        kDecodeThreads, blocks_per_sm);
  }

  template <class Epilogue, class Params>
  static cudaError_t launch(const Params& p, int m_tile_bound, cudaStream_t stream) {
    constexpr int kBlockRows = Mxfp4DecodeMainloop<true, kSplit>::kBlockRows;
    if (kSplit > 1 && (p.op.k / kGemmBlockK) % (kSplit * kAChunkSteps) != 0) return cudaErrorInvalidValue;
    const int blocks = m_tile_bound * (p.op.n / kBlockRows);
    if (blocks <= 0) return cudaSuccess;
    const int smem = decode_shared_bytes(p.op.k, kSplit);
    if (p.op.w_col_scale)
      return launch_dependent(sm90_mxfp4_decode_kernel<true, Epilogue, Params, kSplit>, blocks, kDecodeThreads, smem,
                              stream, p);
    return launch_dependent(sm90_mxfp4_decode_kernel<false, Epilogue, Params, kSplit>, blocks, kDecodeThreads,
                            smem, stream, p);
  }
};

}  // namespace moe_ep::cuda
