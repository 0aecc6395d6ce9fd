// Epilogues of the wgmma grouped GEMMs: one consumer thread's m64n128 fragment (ptx/wgmma.cuh)
// straight from registers to global memory, with the same arithmetic as sm90_gemm_epilogues.cuh
// (outputs bit for bit the same format and values).
#pragma once

#include <cstdint>

#include <cuda_bf16.h>

#include "cuda/kernels/sm90_gemm_epilogues.cuh"
#include "cuda/kernels/sm90_mxfp4_wgmma_mainloop.cuh"

namespace moe_ep::cuda {

__device__ __forceinline__ float wgmma_col_scale(const GroupedGemmOperands& op, const TileCoord& t, int col) {
  return op.w_col_scale ? op.w_col_scale[static_cast<int64_t>(t.expert) * op.n + col] : 1.0f;
}

// GEMM 1: kernel columns interleaved by 8 (sm90_grouped_gemm.h), so n8 chunk 2q of the
// fragment is gate and 2q + 1 the up half of h columns col / 2 + 8q + {0, 1} (q = 0..7): 64 h
// columns, two Q8 blocks (q 0..3, q 4..7). The 4 lanes of a quad hold one row's 32 values of a
// block; amax over the quad, then e4m3 bytes and the E8M0 byte as SwigluQ8Epilogue writes them.
struct WgmmaSwigluQ8Epilogue {
  static __device__ __forceinline__ void apply(const SwigluEpilogueParams& ep, const GroupedGemmOperands& op,
                                               const TileCoord& t, const WgmmaFragment& f,
                                               float (&acc)[64]) {
    float gate_scale[8][2], up_scale[8][2];
#pragma unroll
    for (int q = 0; q < 8; ++q)
#pragma unroll
      for (int c = 0; c < 2; ++c) {
        gate_scale[q][c] = wgmma_col_scale(op, t, f.col + 16 * q + c);
        up_scale[q][c] = wgmma_col_scale(op, t, f.col + 16 * q + 8 + c);
      }
    const int h_col = (f.col - 2 * f.t) / 2 + 2 * f.t;  // h column of q = 0, c = 0
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      const int r = f.row + 8 * hr;
      const bool valid = r < t.num_rows;  // quad-uniform
      const int64_t row = t.row_begin + r;
      const float weight = valid ? ep.row_weight[row] : 0.0f;
      float h[8][2];
#pragma unroll
      for (int q = 0; q < 8; ++q)
#pragma unroll
        for (int c = 0; c < 2; ++c) {
          const float gate = round_to_bf16_device(acc[8 * q + 2 * hr + c] * gate_scale[q][c]);
          const float up = round_to_bf16_device(acc[8 * q + 4 + 2 * hr + c] * up_scale[q][c]);
          h[q][c] = clamped_swiglu_device(gate, up, ep.clamp, weight, ep.fast_math);
        }
#pragma unroll
      for (int blk = 0; blk < 2; ++blk) {
        float amax = 0.0f;
#pragma unroll
        for (int q = 4 * blk; q < 4 * blk + 4; ++q) amax = fmaxf(amax, fmaxf(fabsf(h[q][0]), fabsf(h[q][1])));
        amax = fmaxf(amax, __shfl_xor_sync(0xFFFFFFFFu, amax, 1));
        amax = fmaxf(amax, __shfl_xor_sync(0xFFFFFFFFu, amax, 2));
        const uint32_t byte = q8_scale_byte_device(amax);
        const float scale = e8m0_to_float_device(byte);
        if (!valid) continue;
        uint8_t* out = ep.h_q + row * ep.intermediate + h_col;
#pragma unroll
        for (int q = 4 * blk; q < 4 * blk + 4; ++q) {
          const uint32_t q0 = float_to_e4m3_device(__fdiv_rn(q8_saturate_device(h[q][0]), scale));
          const uint32_t q1 = float_to_e4m3_device(__fdiv_rn(q8_saturate_device(h[q][1]), scale));
          *reinterpret_cast<uint16_t*>(out + 8 * q) = static_cast<uint16_t>(q0 | (q1 << 8));
        }
        if (f.t == 0) ep.h_scale[row * (ep.intermediate / 32) + (h_col - 2 * f.t) / 32 + blk] = static_cast<uint8_t>(byte);
      }
    }
  }
};

// GEMM 2: o = bf16(acc * w_col_scale) [rows, n].
struct WgmmaStoreBf16Epilogue {
  static __device__ __forceinline__ void apply(const StoreEpilogueParams& ep, const GroupedGemmOperands& op,
                                               const TileCoord& t, const WgmmaFragment& f,
                                               float (&acc)[64]) {
    float2 cs[16];
#pragma unroll
    for (int i = 0; i < 16; ++i)
      cs[i] = op.w_col_scale ? *reinterpret_cast<const float2*>(op.w_col_scale + static_cast<int64_t>(t.expert) * op.n + f.col + 8 * i)
                             : make_float2(1.0f, 1.0f);
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      const int r = f.row + 8 * hr;
      if (r >= t.num_rows) continue;
      uint16_t* out = ep.out + static_cast<int64_t>(t.row_begin + r) * op.n + f.col;
#pragma unroll
      for (int i = 0; i < 16; ++i) {
        const float v0 = acc[4 * i + 2 * hr] * cs[i].x, v1 = acc[4 * i + 2 * hr + 1] * cs[i].y;
        const uint32_t bits = static_cast<uint32_t>(__bfloat16_as_ushort(__float2bfloat16_rn(v0))) |
                              (static_cast<uint32_t>(__bfloat16_as_ushort(__float2bfloat16_rn(v1))) << 16);
        *reinterpret_cast<uint32_t*>(out + 8 * i) = bits;
      }
    }
  }
};

}  // namespace moe_ep::cuda
