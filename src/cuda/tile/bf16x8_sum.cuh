// Eight consecutive bf16 columns of one row, summed in fp32: the combine of the world-size-1
// layer (kernels/sm90_combine.cu) and the reduce of an expert-parallel rank
// (ep/ep_dispatch_combine.cuh) share it, so both round exactly alike (docs/spec.md §3 step 7, and the
// shared expert's add_to of moe_ep/shared_expert.h).
#pragma once

#include <cstdint>

#include <cuda_bf16.h>

namespace moe_ep::cuda {

struct Bf16x8Sum {
  float v[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};

  // v[j] += fp32(row[j]) for the 16 bytes at `row` (8 bf16, 16-byte aligned).
  __device__ __forceinline__ void add(const uint16_t* row) { add_bits(*reinterpret_cast<const uint4*>(row)); }

  // The same for 8 bf16 already loaded (e.g. through L2 only, for rows other blocks wrote).
  __device__ __forceinline__ void add_bits(const uint4& q) {
    const uint32_t w[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      v[2 * j] += __uint_as_float(w[j] << 16);
      v[2 * j + 1] += __uint_as_float(w[j] & 0xFFFF0000u);
    }
  }

  // v[j] = fp32(bf16(v[j])) + fp32(row[j]): the routed sum rounded to bf16, then the addend (the
  // shared expert's o) added as add_to does; the store rounds once more.
  __device__ __forceinline__ void round_then_add(const uint16_t* row) {
    const uint4 q = *reinterpret_cast<const uint4*>(row);
    const uint32_t w[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      v[2 * j] = __fadd_rn(__bfloat162float(__float2bfloat16_rn(v[2 * j])), __uint_as_float(w[j] << 16));
      v[2 * j + 1] =
          __fadd_rn(__bfloat162float(__float2bfloat16_rn(v[2 * j + 1])), __uint_as_float(w[j] & 0xFFFF0000u));
    }
  }

  // bf16(v[j]) (round to nearest even) into the 16 bytes at `out`.
  __device__ __forceinline__ void store(uint16_t* out) const {
    uint32_t p[4];
#pragma unroll
    for (int j = 0; j < 4; ++j)
      p[j] = static_cast<uint32_t>(__bfloat16_as_ushort(__float2bfloat16_rn(v[2 * j]))) |
             (static_cast<uint32_t>(__bfloat16_as_ushort(__float2bfloat16_rn(v[2 * j + 1]))) << 16);
    *reinterpret_cast<uint4*>(out) = make_uint4(p[0], p[1], p[2], p[3]);
  }
};

}  // namespace moe_ep::cuda
