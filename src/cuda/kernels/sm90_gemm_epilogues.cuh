// Epilogues of the grouped GEMMs. They read the accumulators in the m16n8 C layout
// (sm90_grouped_gemm_tile.cuh) and write only the tile's valid rows.
#pragma once

#include <cstdint>

#include <cuda_bf16.h>

#include "cuda/kernels/sm90_grouped_gemm_tile.cuh"
#include "cuda/tile/quant_device.cuh"

namespace moe_ep::cuda {

__device__ __forceinline__ float round_to_bf16_device(float v) {
  return __bfloat162float(__float2bfloat16_rn(v));
}

// docs/spec.md §3 steps 3-4 (cpu/reference_math.cpp: clamped_swiglu), min/clamp with the same NaN
// behaviour as std::min / std::clamp.
__device__ __forceinline__ float clamped_swiglu_device(float gate, float up, float c, float weight,
                                                       bool fast_math) {
  gate = c < gate ? c : gate;
  up = up < -c ? -c : (c < up ? c : up);
  // silu(-inf) = -0, its limit (the formulas give NaN), as on the CPU.
  const float silu = gate == -INFINITY ? -0.0f
                     : fast_math       ? gate * __frcp_rn(1.0f + __expf(-gate))
                                       : __fdiv_rn(gate, 1.0f + expf(-gate));
  return silu * up * weight;
}

// Row r of the tile is valid when r < num_rows; acc row index (mi, h) -> tile row.
__device__ __forceinline__ int acc_row(const WarpPosition& wp, int mi, int h) {
  return wp.row0 + mi * 16 + wp.group + 8 * h;
}

// Folded mxfp4 weights: the factor of kernel column `col` (1 when not folded).
__device__ __forceinline__ float col_scale(const GroupedGemmOperands& op, int expert, int col) {
  return op.w_col_scale ? op.w_col_scale[static_cast<int64_t>(expert) * op.n + col] : 1.0f;
}
__device__ __forceinline__ float col_scale(const GroupedGemmOperands& op, const TileCoord& t, int col) {
  return col_scale(op, t.expert, col);
}

// GEMM 1 of the mxfp4 recipe: SwiGLU of each (gate, up) column pair, then Q8 of h over I
// (e4m3 + E8M0 per 32) into the layout GEMM 2 reads as its A. The 128-wide n tile holds 64 h
// columns = two Q8 blocks; h goes through shared memory so one warp owns a block.
struct SwigluQ8Epilogue {
  static constexpr int kHCols = kGemmBlockN / 2;
  static constexpr int kRowStride = kHCols + 4;  // floats; padding spreads banks
  static constexpr int kSharedBytes = kGemmBlockM * kRowStride * 4;

  static __device__ __forceinline__ void apply(const SwigluEpilogueParams& ep,
                                               const GroupedGemmOperands& op, const TileCoord& t,
                                               Accumulators& acc, uint8_t* smem) {
    float* hs = reinterpret_cast<float*>(smem);
    const WarpPosition wp = warp_position();
    float gate_scale[2][2], up_scale[2][2];  // [p][c]
#pragma unroll
    for (int p = 0; p < 2; ++p)
#pragma unroll
      for (int c = 0; c < 2; ++c) {
        const int col = t.n_tile * kGemmBlockN + wp.col0 + 2 * p * 8 + wp.thread_in_group * 2 + c;
        gate_scale[p][c] = col_scale(op, t, col);
        up_scale[p][c] = col_scale(op, t, col + 8);
      }
#pragma unroll
    for (int mi = 0; mi < 2; ++mi)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int r = acc_row(wp, mi, h);
        const float weight = r < t.num_rows ? ep.row_weight[t.row_begin + r] : 0.0f;
#pragma unroll
        for (int p = 0; p < 2; ++p)
#pragma unroll
          for (int c = 0; c < 2; ++c) {
            const float gate = round_to_bf16_device(acc[mi][2 * p][2 * h + c] * gate_scale[p][c]);
            const float up = round_to_bf16_device(acc[mi][2 * p + 1][2 * h + c] * up_scale[p][c]);
            const int col = wp.col0 / 2 + p * 8 + wp.thread_in_group * 2 + c;
            hs[r * kRowStride + col] = clamped_swiglu_device(gate, up, ep.clamp, weight, ep.fast_math);
          }
      }
    __syncthreads();
    const int num_warps = kGemmThreads / 32;
    for (int item = wp.warp; item < kGemmBlockM * 2; item += num_warps) {
      const int r = item / 2, blk = item % 2;
      if (r >= t.num_rows) break;  // items are row-ordered; warp-uniform
      const float v = hs[r * kRowStride + blk * 32 + wp.lane];
      float amax = fabsf(v);
#pragma unroll
      for (int off = 16; off > 0; off /= 2) amax = fmaxf(amax, __shfl_xor_sync(0xFFFFFFFFu, amax, off));
      const uint32_t byte = q8_scale_byte_device(amax);
      const uint32_t q = float_to_e4m3_device(__fdiv_rn(q8_saturate_device(v), e8m0_to_float_device(byte)));
      const int64_t row = t.row_begin + r;
      ep.h_q[row * ep.intermediate + t.n_tile * kHCols + blk * 32 + wp.lane] = static_cast<uint8_t>(q);
      if (wp.lane == 0)
        ep.h_scale[row * (ep.intermediate / 32) + t.n_tile * 2 + blk] = static_cast<uint8_t>(byte);
    }
  }
};

// GEMM 1 of the nvfp4 recipe: gu = bf16(acc * (weight_scale_2 / g_row)), SwiGLU, fp32 h out
// (its NVFP4 quantization needs the amax of the whole row, so it is a separate pass).
struct SwigluF32Epilogue {
  static constexpr int kSharedBytes = 0;

  static __device__ __forceinline__ void apply(const SwigluEpilogueParams& ep,
                                               const GroupedGemmOperands& op, const TileCoord& t,
                                               Accumulators& acc, uint8_t*) {
    const WarpPosition wp = warp_position();
    const float ws2 = op.w_global[t.expert];
#pragma unroll
    for (int mi = 0; mi < 2; ++mi)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int r = acc_row(wp, mi, h);
        if (r >= t.num_rows) continue;
        const int row = t.row_begin + r;
        const float weight = ep.row_weight[row];
        const float alpha = __fdiv_rn(ws2, op.a_global[a_source_row(op, row)]);
#pragma unroll
        for (int p = 0; p < 2; ++p) {
          float out[2];
#pragma unroll
          for (int c = 0; c < 2; ++c) {
            const float gate = round_to_bf16_device(acc[mi][2 * p][2 * h + c] * alpha);
            const float up = round_to_bf16_device(acc[mi][2 * p + 1][2 * h + c] * alpha);
            out[c] = clamped_swiglu_device(gate, up, ep.clamp, weight, ep.fast_math);
          }
          const int col = t.n_tile * (kGemmBlockN / 2) + wp.col0 / 2 + p * 8 + wp.thread_in_group * 2;
          *reinterpret_cast<float2*>(ep.h_f32 + static_cast<int64_t>(row) * ep.intermediate + col) =
              make_float2(out[0], out[1]);
        }
      }
  }
};

// GEMM 2: o = bf16(acc) (mxfp4), o = bf16(acc * (weight_scale_2 / g_h)) (nvfp4).
template <bool kNvfp4>
struct StoreBf16Epilogue {
  static constexpr int kSharedBytes = 0;

  static __device__ __forceinline__ void apply(const StoreEpilogueParams& ep,
                                               const GroupedGemmOperands& op, const TileCoord& t,
                                               Accumulators& acc, uint8_t*) {
    const WarpPosition wp = warp_position();
#pragma unroll
    for (int mi = 0; mi < 2; ++mi)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int r = acc_row(wp, mi, h);
        if (r >= t.num_rows) continue;
        const int row = t.row_begin + r;
        float alpha = 1.0f;
        if constexpr (kNvfp4) alpha = __fdiv_rn(op.w_global[t.expert], op.a_global[a_source_row(op, row)]);
#pragma unroll
        for (int ni = 0; ni < 4; ++ni) {
          float v0 = acc[mi][ni][2 * h], v1 = acc[mi][ni][2 * h + 1];
          if constexpr (kNvfp4) {
            v0 *= alpha;
            v1 *= alpha;
          } else {
            const int col = t.n_tile * kGemmBlockN + wp.col0 + ni * 8 + wp.thread_in_group * 2;
            v0 *= col_scale(op, t, col);
            v1 *= col_scale(op, t, col + 1);
          }
          const uint32_t bits = static_cast<uint32_t>(__bfloat16_as_ushort(__float2bfloat16_rn(v0))) |
                                (static_cast<uint32_t>(__bfloat16_as_ushort(__float2bfloat16_rn(v1))) << 16);
          const int col = t.n_tile * kGemmBlockN + wp.col0 + ni * 8 + wp.thread_in_group * 2;
          *reinterpret_cast<uint32_t*>(ep.out + static_cast<int64_t>(row) * op.n + col) = bits;
        }
      }
  }
};

}  // namespace moe_ep::cuda
