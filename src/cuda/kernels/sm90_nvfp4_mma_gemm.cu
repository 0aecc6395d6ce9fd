// The nvfp4 mma.sync form: the operands decoded to f16 from shared memory; fits 128 registers
// without spills, two blocks per SM.
#include "cuda/kernels/sm90_mma_kernel.cuh"
#include "cuda/kernels/sm90_nvfp4_mainloop.cuh"

namespace moe_ep::cuda {

const Sm90FormKernels kNvfp4MmaKernels =
    MmaForm<Nvfp4Mainloop, Nvfp4Mainloop, 2>::kernels<SwigluF32Epilogue, StoreBf16Epilogue<true>>();

}  // namespace moe_ep::cuda
