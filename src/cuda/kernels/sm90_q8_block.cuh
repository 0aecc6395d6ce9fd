// Q8 of one 32-element block of x (sm90_q8_quantize.h): 64 bytes in (4 x 16 B), 32 bytes (or,
// with rs_bf16, the 64 bytes of their bf16 values) + 1 scale byte out; the work of one thread of
// the Q8 kernel and of the quantize-and-route kernel.
#pragma once

#include <cstdint>

#include <cuda_bf16.h>

#include "cuda/kernels/sm90_q8_quantize.h"
#include "cuda/kernels/sm90_rs_convert.cuh"
#include "cuda/ptx/convert.cuh"
#include "cuda/tile/fp4_bf16_codec.h"
#include "cuda/tile/quant_device.cuh"

namespace moe_ep::cuda {

// A k32 block of a Q8 row (its 32 e4m3 bytes as 8 words, its scale as a float) as bf16 values
// (exact) at positions rs_position_of_k(l) of the block's 32.
__device__ __forceinline__ void q8_block_to_rs_bf16(const uint32_t (&words)[8], float scale, uint16_t (&v)[32]) {
#pragma unroll
  for (int l = 0; l < 32; ++l) {
    const float x = e4m3_to_float_device((words[l / 4] >> (8 * (l % 4))) & 0xFF) * scale;
    v[rs_position_of_k(l)] = __bfloat16_as_ushort(__float2bfloat16_rn(x));
  }
}

__device__ __forceinline__ void q8_quantize_block(const Q8QuantizeParams& p, int64_t block) {
  float v[32];
  load_bf16_as_float<4>(reinterpret_cast<const uint4*>(p.x + block * 32), v);
  float amax = 0.0f;
#pragma unroll
  for (int i = 0; i < 32; ++i) amax = fmaxf(amax, fabsf(v[i]));
  const uint32_t byte = q8_scale_byte_device(amax);
  const float s = e8m0_to_float_device(byte);
  uint32_t packed[8];
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const uint32_t lo = ptx::cvt_e4m3x2(__fdiv_rn(q8_saturate_device(v[4 * i]), s),
                                        __fdiv_rn(q8_saturate_device(v[4 * i + 1]), s));
    const uint32_t hi = ptx::cvt_e4m3x2(__fdiv_rn(q8_saturate_device(v[4 * i + 2]), s),
                                        __fdiv_rn(q8_saturate_device(v[4 * i + 3]), s));
    packed[i] = lo | (hi << 16);
  }
  if (p.rs_bf16 != nullptr) {
    uint16_t values[32];
    q8_block_to_rs_bf16(packed, s, values);
    store_rs_values(values, p.rs_bf16 + block * 32);
  } else {
    uint4* dst = reinterpret_cast<uint4*>(p.q + block * 32);
    dst[0] = make_uint4(packed[0], packed[1], packed[2], packed[3]);
    dst[1] = make_uint4(packed[4], packed[5], packed[6], packed[7]);
  }
  p.scales[block] = static_cast<uint8_t>(byte);
}

}  // namespace moe_ep::cuda
