#include "cuda/kernels/sm90_q8_quantize.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "cuda/ptx/griddep.cuh"
#include "cuda/tile/quant_device.cuh"

namespace moe_ep::cuda {
namespace {

constexpr int kThreads = 256;

// One thread per 32-element block: 64 bytes in (4 x 16 B), 32 bytes + 1 scale byte out.
__global__ void __launch_bounds__(kThreads) sm90_q8_quantize_kernel(const __grid_constant__ Q8QuantizeParams p) {
  ptx::grid_dependency_wait();
  ptx::launch_dependents();
  const int64_t block = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (block >= p.rows * (p.cols / 32)) return;
  const uint4* src = reinterpret_cast<const uint4*>(p.x + block * 32);
  float v[32];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const uint4 w = src[i];
    const uint32_t words[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      v[8 * i + 2 * j] = __uint_as_float(words[j] << 16);
      v[8 * i + 2 * j + 1] = __uint_as_float(words[j] & 0xFFFF0000u);
    }
  }
  float amax = 0.0f;
#pragma unroll
  for (int i = 0; i < 32; ++i) amax = fmaxf(amax, fabsf(v[i]));
  const uint32_t byte = q8_scale_byte_device(amax);
  const float s = e8m0_to_float_device(byte);
  uint32_t packed[8];
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const uint32_t lo = ptx::cvt_e4m3x2(__fdiv_rn(v[4 * i], s), __fdiv_rn(v[4 * i + 1], s));
    const uint32_t hi = ptx::cvt_e4m3x2(__fdiv_rn(v[4 * i + 2], s), __fdiv_rn(v[4 * i + 3], s));
    packed[i] = lo | (hi << 16);
  }
  uint4* dst = reinterpret_cast<uint4*>(p.q + block * 32);
  dst[0] = make_uint4(packed[0], packed[1], packed[2], packed[3]);
  dst[1] = make_uint4(packed[4], packed[5], packed[6], packed[7]);
  p.scales[block] = static_cast<uint8_t>(byte);
}

}  // namespace

cudaError_t launch_sm90_q8_quantize(const Q8QuantizeParams& p, cudaStream_t stream) {
  const int64_t blocks = p.rows * (p.cols / 32);
  if (blocks == 0) return cudaSuccess;
  const unsigned grid = static_cast<unsigned>((blocks + kThreads - 1) / kThreads);
  return launch_dependent(sm90_q8_quantize_kernel, grid, kThreads, 0, stream, p);
}

}  // namespace moe_ep::cuda
