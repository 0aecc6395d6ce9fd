// The nvfp4 f16 register-operand forms: f16 wgmma with the weights as the register operand
// (sm90_rs16_mainloop.cuh, Nvfp4F16RsWeights; four consumers: sm90_rs16_wide_mainloop.cuh), and the NVFP4 -> f16 conversion of their
// activations into the order of tile/nvfp4_f16_codec.h.
#include <cuda_fp16.h>

#include "cuda/kernels/sm90_rs_convert.cuh"
#include "cuda/kernels/sm90_rs_kernel.cuh"
#include "cuda/tile/quant_device.cuh"

namespace moe_ep::cuda {
namespace {

using Nvfp4RsConfig = RsTileConfig<Nvfp4F16RsWeights>;
// Four consumers on the stage ring, 64 tokens x 256 weight rows (sm90_rs16_wide_mainloop.cuh).
using Nvfp4RsWideConfig = Rs16WideTileConfig<Nvfp4F16RsWeights>;
static_assert(Nvfp4RsWideConfig::kBlockM == kRsWideBlockM && Nvfp4RsWideConfig::kBlockN == kRsWideBlockN);

// A k16 block of an NVFP4 row: 16 e2m1 codes (8 bytes, standard nibble order) times the block's
// e4m3 scale, as f16 (exact), at positions nvfp4_f16_position_of_k(l) of the block's 16.
struct Nvfp4F16Block {
  static constexpr int kValues = 16;
  static __device__ __forceinline__ void convert(const uint8_t* packed, const uint8_t* scales, int64_t b,
                                                 uint16_t (&v)[kValues]) {
    const uint2 codes = *reinterpret_cast<const uint2*>(packed + b * 8);
    const float scale = e4m3_to_float_device(scales[b]);
    constexpr float kE2m1[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
#pragma unroll
    for (int l = 0; l < 16; ++l) {
      const uint32_t code = ((l < 8 ? codes.x : codes.y) >> (4 * (l % 8))) & 0xF;
      const float x = (code & 8 ? -kE2m1[code & 7] : kE2m1[code & 7]) * scale;
      v[nvfp4_f16_position_of_k(l)] = __half_as_ushort(__float2half_rn(x));
    }
  }
};

}  // namespace

const Sm90FormKernels kNvfp4RsF16Kernels =
    rs_form_kernels<Nvfp4RsConfig, RsSwigluF32Epilogue, RsNvfp4StoreBf16Epilogue>();
const Sm90FormKernels kNvfp4RsF16WideKernels =
    rs_form_kernels<Nvfp4RsWideConfig, RsSwigluF32Epilogue, RsNvfp4StoreBf16Epilogue>();

cudaError_t launch_sm90_nvfp4_to_rs_f16(const uint8_t* packed, const uint8_t* scales, int64_t rows,
                                        const int32_t* row_count, int k, uint16_t* out, cudaStream_t stream) {
  return launch_rs_convert<Nvfp4F16Block>(packed, scales, rows, row_count, k, out, stream);
}

}  // namespace moe_ep::cuda
