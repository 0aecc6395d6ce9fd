// The mma.sync grouped GEMM kernel (run_grouped_gemm of sm90_grouped_gemm_tile.cuh over a recipe's
// mainloop) and the kernels of an mma form: persistent grids over (m tile, n tile), GEMM 1 with
// its SwiGLU epilogue, GEMM 2 with its bf16 store. A form with folded mxfp4 weights picks the
// folded mainloop at launch (op.w_col_scale set); both share one grid.
#pragma once

#include "cuda/kernels/sm90_gemm_epilogues.cuh"
#include "cuda/kernels/sm90_grouped_gemm.h"
#include "cuda/kernels/sm90_kernel_config.cuh"

namespace moe_ep::cuda {

template <class Mainloop, class Epilogue, class Params, int kMinBlocks>
__global__ void __launch_bounds__(kGemmThreads, kMinBlocks) sm90_mma_kernel(const __grid_constant__ Params p) {
  extern __shared__ __align__(128) uint8_t smem[];
  run_grouped_gemm<Mainloop, Epilogue>(p, smem);
}

// kMinBlocks: blocks of 8 warps per SM the kernels are built for (their register budget).
template <class Mainloop, class FoldedMainloop, int kMinBlocks>
struct MmaForm {
  template <class Epilogue>
  static constexpr int kShared = Mainloop::kSharedBytes + Epilogue::kSharedBytes;
  template <class Epilogue>
  static constexpr int kFoldedShared = FoldedMainloop::kSharedBytes + Epilogue::kSharedBytes;

  template <class Epilogue, class Params>
  static cudaError_t configure(int /*k*/, int* blocks_per_sm) {
    return configure_persistent_kernels(sm90_mma_kernel<Mainloop, Epilogue, Params, kMinBlocks>, kShared<Epilogue>,
                                        sm90_mma_kernel<FoldedMainloop, Epilogue, Params, kMinBlocks>,
                                        kFoldedShared<Epilogue>, kGemmThreads, blocks_per_sm);
  }

  template <class Epilogue, class Params>
  static cudaError_t launch(const Params& p, int grid, cudaStream_t stream) {
    if (grid <= 0) return cudaSuccess;
    if (p.op.w_col_scale)
      sm90_mma_kernel<FoldedMainloop, Epilogue, Params, kMinBlocks>
          <<<grid, kGemmThreads, kFoldedShared<Epilogue>, stream>>>(p);
    else
      sm90_mma_kernel<Mainloop, Epilogue, Params, kMinBlocks><<<grid, kGemmThreads, kShared<Epilogue>, stream>>>(p);
    return cudaGetLastError();
  }

  template <class Epilogue1, class Epilogue2>
  static constexpr Sm90FormKernels kernels() {
    return {&configure<Epilogue1, Gemm1Params>, &configure<Epilogue2, Gemm2Params>, &launch<Epilogue1, Gemm1Params>,
            &launch<Epilogue2, Gemm2Params>};
  }
};

}  // namespace moe_ep::cuda
