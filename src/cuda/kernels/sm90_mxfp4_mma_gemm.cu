// The mxfp4 mma.sync form: E8M0 block scales or weights folded into the FP8 window, one block of
// 8 warps per SM (the accumulators and B fragments take ~250 registers).
#include "cuda/kernels/sm90_mma_kernel.cuh"
#include "cuda/kernels/sm90_mxfp4_mainloop.cuh"

namespace moe_ep::cuda {

const Sm90FormKernels kMxfp4MmaKernels =
    MmaForm<Mxfp4Mainloop, Mxfp4FoldedMainloop, 1>::kernels<SwigluQ8Epilogue, StoreBf16Epilogue<false>>();

}  // namespace moe_ep::cuda
