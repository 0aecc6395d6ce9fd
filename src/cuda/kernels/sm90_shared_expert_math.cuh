// The shared expert's element math, common to its dot-product and tensor-core kernels: bf16
// bits <-> fp32, and h = bf16(silu(min(bf16(gate), c)) * clamp(bf16(up), -c, c)) from the fp32
// sums of one gate and one up column (moe_ep/shared_expert.h's recipe).
#pragma once

#include <cstdint>

#include <cuda_bf16.h>

namespace moe_ep::cuda::shared_expert {

__device__ __forceinline__ float bf16_value(uint16_t b) { return __uint_as_float(static_cast<uint32_t>(b) << 16); }
// The bf16 in the low / high half of a 32-bit word (the lower-addressed term is the low half).
__device__ __forceinline__ float bf16_lo(uint32_t w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float bf16_hi(uint32_t w) { return __uint_as_float(w & 0xFFFF0000u); }
__device__ __forceinline__ uint16_t bf16_bits(float f) { return __bfloat16_as_ushort(__float2bfloat16_rn(f)); }
__device__ __forceinline__ float round_bf16(float f) { return bf16_value(bf16_bits(f)); }

__device__ __forceinline__ uint16_t swiglu_h(float gate_sum, float up_sum, float c) {
  float gate = round_bf16(gate_sum);
  gate = c < gate ? c : gate;  // std::min(gate, c)
  float up = round_bf16(up_sum);
  up = up < -c ? -c : (c < up ? c : up);  // std::clamp(up, -c, c)
  const float silu = gate == -INFINITY ? -0.0f : __fdiv_rn(gate, __fadd_rn(1.0f, expf(-gate)));
  return bf16_bits(__fmul_rn(silu, up));
}

// The stored output element: o = bf16(sum); y = bf16(y + o) when accumulating.
__device__ __forceinline__ uint16_t down_out(float sum, uint16_t y, int accumulate) {
  const float o = round_bf16(sum);
  return accumulate ? bf16_bits(__fadd_rn(bf16_value(y), o)) : bf16_bits(o);
}

}  // namespace moe_ep::cuda::shared_expert
