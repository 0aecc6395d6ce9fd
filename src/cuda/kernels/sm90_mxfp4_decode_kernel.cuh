// The mxfp4 decode kernel and its launcher (form_kernels) over a mainloop: mma.sync
// (sm90_mxfp4_decode_mainloop.cuh, instantiated by sm90_mxfp4_decode_gemm.cu) or FP8 wgmma
// (sm90_mxfp4_decode_fp8_mainloop.cuh, by sm90_mxfp4_decode_fp8_gemm.cu).
#pragma once

#include "cuda/kernels/sm90_decode_epilogues.cuh"
#include "cuda/kernels/sm90_kernel_config.cuh"
#include "cuda/kernels/sm90_mxfp4_decode_mainloop.cuh"
#include "cuda/ptx/griddep.cuh"

namespace moe_ep::cuda {

// Three blocks of 8 warps per SM (<= 80 registers; shared memory is a 24 KB A ring per K part
// plus 2 * K bytes of fp32 scales, and for the FP8 mainloop up to 1 KB aligning its base) with 2 k
// steps of weights in flight per warp.
// The epilogue gets the shared memory after the activation scales. Mainloop: Mxfp4DecodeMainloop
// (mma.sync) or Mxfp4DecodeFp8Mainloop (FP8 wgmma); kParts = 2: K in two halves, blocks of 64
// weight rows, an A ring per half.
template <class Mainloop, class Epilogue, class Params>
__global__ void __launch_bounds__(kDecodeThreads, Mainloop::kMinBlocks)
    sm90_mxfp4_decode_kernel(const __grid_constant__ Params p) {
  extern __shared__ __align__(128) uint8_t smem_raw[];
  uint8_t* smem = Mainloop::smem_base(smem_raw);
  __shared__ DecodeTables tables;
  // The schedule, A and (GEMM 2) the rows written by GEMM 1. No early launch of the next grid:
  // GEMM 2's blocks would take the slots GEMM 1 leaves free at its start and end up unevenly
  // spread over the SMs.
  ptx::grid_dependency_wait();
  DecodeTile t;
  if (!decode_tile<Mainloop::kBlockRows>(p.schedule, p.op.n, t)) return;
  DecodeAccumulators acc;
  Mainloop::run(p.op, t, smem, tables, acc);
  uint8_t* epilogue_smem = smem + decode_epilogue_offset(p.op.k, Mainloop::kParts);
  if constexpr (Mainloop::kParts == 1) {
    Epilogue::apply(p.epilogue, p.op, t, acc, epilogue_smem);
  } else {
    if (Mainloop::part() != 0) return;  // its sums are in the first half's accumulators
    Epilogue::template apply<Mainloop::kBlockRows>(p.epilogue, p.op, t, acc, epilogue_smem);
  }
}

// A decode form's launcher; the launch grid is the m-tile bound times the n chunks, and a form
// with folded weights (op.w_col_scale set) picks the folded kernel. Mainloop<kFolded, kSplit>.
template <template <bool, int> class Mainloop, int kSplit>
struct Mxfp4DecodeForm {
  template <bool kFolded>
  using M = Mainloop<kFolded, kSplit>;

  template <class Epilogue, class Params>
  static cudaError_t configure(int k, int* blocks_per_sm) {
    const int smem = M<true>::shared_bytes(k);
    return configure_persistent_kernels(sm90_mxfp4_decode_kernel<M<true>, Epilogue, Params>, smem,
                                        sm90_mxfp4_decode_kernel<M<false>, Epilogue, Params>, smem, kDecodeThreads,
                                        blocks_per_sm);
  }

  template <class Epilogue, class Params>
  static cudaError_t launch(const Params& p, int m_tile_bound, cudaStream_t stream) {
    constexpr int kBlockRows = M<true>::kBlockRows;
    if (kSplit > 1 && (p.op.k / kGemmBlockK) % (kSplit * kAChunkSteps) != 0) return cudaErrorInvalidValue;
    const int blocks = m_tile_bound * (p.op.n / kBlockRows);
    if (blocks <= 0) return cudaSuccess;
    const int smem = M<true>::shared_bytes(p.op.k);
    if (p.op.w_col_scale)
      return launch_dependent(sm90_mxfp4_decode_kernel<M<true>, Epilogue, Params>, blocks, kDecodeThreads, smem,
                              stream, p);
    return launch_dependent(sm90_mxfp4_decode_kernel<M<false>, Epilogue, Params>, blocks, kDecodeThreads, smem,
                            stream, p);
  }
};

}  // namespace moe_ep::cuda
