// NVFP4 of one row (sm90_nvfp4_quantize.h) by kThreads threads of a block: the work of one block
// of the NVFP4 quantize kernel and of a thread group of the quantize-and-route kernel. Pass 1
// finds the row amax (shuffles, then the group's kThreads / 32 floats of shared memory), pass 2
// quantizes each 16-element block.
#pragma once

#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "cuda/kernels/sm90_nvfp4_quantize.h"
#include "cuda/tile/quant_device.cuh"

namespace moe_ep::cuda {

__device__ __forceinline__ void nvfp4_load16(const Nvfp4QuantizeParams& p, int64_t row, int64_t blk, float (&v)[16]) {
  if (p.in_is_bf16) {
    load_bf16_as_float<2>(reinterpret_cast<const uint4*>(static_cast<const uint16_t*>(p.in) + row * p.cols + blk * 16), v);
  } else {
    const float4* src = reinterpret_cast<const float4*>(static_cast<const float*>(p.in) + row * p.cols + blk * 16);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float4 f = src[i];
      v[4 * i] = f.x;
      v[4 * i + 1] = f.y;
      v[4 * i + 2] = f.z;
      v[4 * i + 3] = f.w;
    }
  }
}

__device__ __forceinline__ float nvfp4_block_amax(const float (&v)[16]) {
  float m = 0.0f;
#pragma unroll
  for (int i = 0; i < 16; ++i) m = fmaxf(m, fabsf(v[i]));
  return m;
}

// Thread t (0 .. kThreads - 1) of the row's group; `warp_amax` is the group's kThreads / 32 floats.
// It holds one __syncthreads: every thread of the block calls it, a group without a row with
// valid = false (no loads or stores).
template <int kThreads>
__device__ __forceinline__ void nvfp4_quantize_row(const Nvfp4QuantizeParams& p, int64_t row, unsigned t, bool valid,
                                                   float* warp_amax) {
  const int64_t num_blocks = p.cols / 16;
  float amax = 0.0f;
  for (int64_t b = t; valid && b < num_blocks; b += kThreads) {
    float v[16];
    nvfp4_load16(p, row, b, v);
    amax = fmaxf(amax, nvfp4_block_amax(v));
  }
#pragma unroll
  for (int off = 16; off > 0; off /= 2) amax = fmaxf(amax, __shfl_xor_sync(0xFFFFFFFFu, amax, off));
  if (t % 32 == 0) warp_amax[t / 32] = amax;
  __syncthreads();
  if (!valid) return;
  amax = warp_amax[0];
#pragma unroll
  for (int w = 1; w < kThreads / 32; ++w) amax = fmaxf(amax, warp_amax[w]);
  const float g = nvfp4_global_encode_device(amax);
  if (t == 0) p.global[row] = g;

  for (int64_t b = t; b < num_blocks; b += kThreads) {
    float v[16];
    nvfp4_load16(p, row, b, v);
    const uint32_t sbits = float_to_e4m3_device(__fdiv_rn(g * nvfp4_block_amax(v), kE2M1MaxDevice));
    const float s = e4m3_to_float_device(sbits);
    uint32_t words[2] = {0, 0};
#pragma unroll
    for (int i = 0; i < 16; ++i) {
      uint32_t code = 0;
      if (s != 0.0f) {
        float q = __fdiv_rn(v[i] * g, s);
        q = q < -kE2M1MaxDevice ? -kE2M1MaxDevice : (kE2M1MaxDevice < q ? kE2M1MaxDevice : q);
        code = float_to_e2m1_device(q);
      }
      words[i / 8] |= code << (4 * (i % 8));
    }
    *reinterpret_cast<uint2*>(p.packed + row * (p.cols / 2) + b * 8) = make_uint2(words[0], words[1]);
    p.scales[row * num_blocks + b] = static_cast<uint8_t>(sbits);
  }
}

}  // namespace moe_ep::cuda
