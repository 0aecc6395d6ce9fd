// nvfp4 grouped GEMMs 1 and 2 on f16 wgmma with the weights as the register operand
// (sm90_rs16_mainloop.cuh, Nvfp4F16RsWeights), and the NVFP4 -> f16 conversion of their
// activations into the order of tile/nvfp4_f16_codec.h.
#include <cuda_fp16.h>

#include "cuda/kernels/sm90_rs_kernel.cuh"
#include "cuda/tile/quant_device.cuh"

namespace moe_ep::cuda {
namespace {

using Nvfp4RsConfig = RsTileConfig<Nvfp4F16RsWeights>;

// One thread per (row, k16 block): 16 e2m1 codes (8 bytes, standard nibble order) times the
// block's e4m3 scale, as f16 (exact), stored at positions nvfp4_f16_position_of_k(l) of the
// block's 32 output bytes (a k16 block's 16 positions are its own, permuted). Rows from
// *row_count on are skipped.
__global__ void __launch_bounds__(256) sm90_nvfp4_to_rs_f16_kernel(const uint8_t* __restrict__ packed,
                                                                    const uint8_t* __restrict__ scales,
                                                                    int64_t blocks, const int32_t* row_count,
                                                                    int blocks_per_row, uint16_t* __restrict__ out) {
  const int64_t b = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (b >= blocks || (row_count && b / blocks_per_row >= *row_count)) return;
  const uint2 codes = *reinterpret_cast<const uint2*>(packed + b * 8);
  const float scale = e4m3_to_float_device(scales[b]);
  constexpr float kE2m1[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  uint16_t v[16];
#pragma unroll
  for (int l = 0; l < 16; ++l) {
    const uint32_t code = ((l < 8 ? codes.x : codes.y) >> (4 * (l % 8))) & 0xF;
    const float x = (code & 8 ? -kE2m1[code & 7] : kE2m1[code & 7]) * scale;
    v[nvfp4_f16_position_of_k(l)] = __half_as_ushort(__float2half_rn(x));
  }
  uint4* dst = reinterpret_cast<uint4*>(out + b * 16);
#pragma unroll
  for (int q = 0; q < 2; ++q) {
    uint32_t w[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) w[i] = static_cast<uint32_t>(v[8 * q + 2 * i]) | (static_cast<uint32_t>(v[8 * q + 2 * i + 1]) << 16);
    dst[q] = make_uint4(w[0], w[1], w[2], w[3]);
  }
}

}  // namespace

cudaError_t configure_sm90_nvfp4_rs_grouped_gemm1(int* blocks_per_sm) {
  return configure_rs_kernel<Nvfp4RsConfig, RsSwigluF32Epilogue, Gemm1Params>(blocks_per_sm);
}

cudaError_t configure_sm90_nvfp4_rs_grouped_gemm2(int* blocks_per_sm) {
  return configure_rs_kernel<Nvfp4RsConfig, RsNvfp4StoreBf16Epilogue, Gemm2Params>(blocks_per_sm);
}

cudaError_t launch_sm90_nvfp4_rs_grouped_gemm1(const Gemm1Params& p, int grid, cudaStream_t stream) {
  return launch_rs_kernel<Nvfp4RsConfig, RsSwigluF32Epilogue>(p, grid, stream);
}

cudaError_t launch_sm90_nvfp4_rs_grouped_gemm2(const Gemm2Params& p, int grid, cudaStream_t stream) {
  return launch_rs_kernel<Nvfp4RsConfig, RsNvfp4StoreBf16Epilogue>(p, grid, stream);
}

cudaError_t launch_sm90_nvfp4_to_rs_f16(const uint8_t* packed, const uint8_t* scales, int64_t rows,
                                        const int32_t* row_count, int k, uint16_t* out, cudaStream_t stream) {
  if (k % 128 != 0) return cudaErrorInvalidValue;
  const int64_t blocks = rows * (k / 16);
  if (blocks == 0) return cudaSuccess;
  sm90_nvfp4_to_rs_f16_kernel<<<static_cast<unsigned>((blocks + 255) / 256), 256, 0, stream>>>(
      packed, scales, blocks, row_count, k / 16, out);
  return cudaGetLastError();
}

}  // namespace moe_ep::cuda
