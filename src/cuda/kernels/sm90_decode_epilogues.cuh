// Epilogues of the decode GEMMs (sm90_decode_tile.cuh). They read the accumulators in the
// swapped C layout (weight rows the m side: feature 16w + g in c = 0, 1, feature 16w + 8 + g in
// c = 2, 3; tokens 8h + 2t + {0, 1}) and do the arithmetic of the 64 x 128 kernels' epilogues
// (sm90_gemm_epilogues.cuh) in the same order, so the bytes are the same.
//
// GEMM 1 rows are interleaved by 8 (sm90_grouped_gemm.h): warp w's features g and 8 + g are the
// gate and the up row of h column (kBlockRows / 2) * chunk + 8w + g (kBlockRows = 128, or 64 with
// K split in two).
#pragma once

#include <cstdint>

#include "cuda/kernels/sm90_decode_tile.cuh"
#include "cuda/kernels/sm90_gemm_epilogues.cuh"
#include "cuda/ptx/named_barrier.cuh"

namespace moe_ep::cuda {

// The decode tile's row r (token) of C fragment (h, c): 8h + 2t + (c & 1).
__device__ __forceinline__ int decode_acc_row(int h, int c) { return 8 * h + 2 * (threadIdx.x % 4) + (c & 1); }

// f(hh, c, r) for the thread's fragments (hh, c < 2) whose row r is one of the tile's tokens.
template <class F>
__device__ __forceinline__ void for_each_tile_row(const DecodeTile& t, F&& f) {
#pragma unroll
  for (int hh = 0; hh < 2; ++hh)
#pragma unroll
    for (int c = 0; c < 2; ++c) {
      const int r = decode_acc_row(hh, c);
      if (r < t.num_rows) f(hh, c, r);
    }
}

// The barrier among the warps that run a decode epilogue: the block's, or (a block of kBlockRows
// < kDecodeBlockN weight rows, whose other warps have left) theirs alone.
template <int kBlockRows>
__device__ __forceinline__ void decode_epilogue_sync() {
  if constexpr (kBlockRows == kDecodeBlockN)
    __syncthreads();
  else
    ptx::named_barrier_sync(1, 2 * kBlockRows);  // 32 threads per 16 rows
}

// mxfp4 GEMM 1: SwiGLU, then Q8 of h. A Q8 block of 32 h columns is warps 4q .. 4q + 3: amax
// over g by shuffles, over the 4 warps in shared memory (SwigluQ8Epilogue's arithmetic).
// kBlockRows: the block's weight rows (kDecodeBlockN, or 64 with K split: one Q8 block).
struct DecodeSwigluQ8 {
  template <int kBlockRows = kDecodeBlockN>
  static __device__ __forceinline__ void apply(const SwigluEpilogueParams& ep, const GroupedGemmOperands& op,
                                               const DecodeTile& t, const DecodeAccumulators& acc, uint8_t* smem) {
    static_assert(kBlockRows % 64 == 0, "whole Q8 blocks of 32 h columns");
    float* amax_smem = reinterpret_cast<float*>(smem);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4;
    const int gate_col = t.n_chunk * kBlockRows + 16 * warp + g;
    const float gate_scale = col_scale(op, t.expert, gate_col), up_scale = col_scale(op, t.expert, gate_col + 8);
    float h[2][2];
#pragma unroll
    for (int hh = 0; hh < 2; ++hh)
#pragma unroll
      for (int c = 0; c < 2; ++c) {
        const int r = decode_acc_row(hh, c);
        const float weight = r < t.num_rows ? ep.row_weight[t.row_begin + r] : 0.0f;
        const float gate = round_to_bf16_device(acc[hh][c] * gate_scale);
        const float up = round_to_bf16_device(acc[hh][2 + c] * up_scale);
        h[hh][c] = clamped_swiglu_device(gate, up, ep.clamp, weight, ep.fast_math);
        float amax = fabsf(h[hh][c]);
#pragma unroll
        for (int off = 4; off < 32; off *= 2) amax = fmaxf(amax, __shfl_xor_sync(0xFFFFFFFFu, amax, off));
        if (g == 0) amax_smem[warp * 16 + r] = amax;
      }
    decode_epilogue_sync<kBlockRows>();
    const int q = warp / 4, h_col = t.n_chunk * (kBlockRows / 2) + 8 * warp + g;
    for_each_tile_row(t, [&](int hh, int c, int r) {
      float amax = amax_smem[(4 * q) * 16 + r];
#pragma unroll
      for (int w = 1; w < 4; ++w) amax = fmaxf(amax, amax_smem[(4 * q + w) * 16 + r]);
      const uint32_t byte = q8_scale_byte_device(amax);
      const uint32_t code = float_to_e4m3_device(__fdiv_rn(q8_saturate_device(h[hh][c]), e8m0_to_float_device(byte)));
      const int64_t row = t.row_begin + r;
      ep.h_q[row * ep.intermediate + h_col] = static_cast<uint8_t>(code);
      if (warp % 4 == 0 && g == 0) ep.h_scale[row * (ep.intermediate / 32) + h_col / 32] = static_cast<uint8_t>(byte);
    });
  }
};

// nvfp4 GEMM 1: gu = bf16(acc * (weight_scale_2 / g_row)), SwiGLU, fp32 h (SwigluF32Epilogue;
// its NVFP4 quantization needs the amax of the whole row, a separate pass).
// kBlockRows: the block's weight rows (kDecodeBlockN, or 64 with K split: the first half's warps).
struct DecodeSwigluF32 {
  template <int kBlockRows = kDecodeBlockN>
  static __device__ __forceinline__ void apply(const SwigluEpilogueParams& ep, const GroupedGemmOperands& op,
                                               const DecodeTile& t, const DecodeAccumulators& acc, uint8_t*) {
    const int warp = threadIdx.x / 32, g = (threadIdx.x % 32) / 4;
    const int h_col = t.n_chunk * (kBlockRows / 2) + 8 * warp + g;
    const float ws2 = op.w_global[t.expert];
    for_each_tile_row(t, [&](int hh, int c, int r) {
      const int row = t.row_begin + r;
      const float alpha = __fdiv_rn(ws2, op.a_global[a_source_row(op, row)]);
      const float gate = round_to_bf16_device(acc[hh][c] * alpha);
      const float up = round_to_bf16_device(acc[hh][2 + c] * alpha);
      ep.h_f32[static_cast<int64_t>(row) * ep.intermediate + h_col] =
          clamped_swiglu_device(gate, up, ep.clamp, ep.row_weight[row], ep.fast_math);
    });
  }
};

// GEMM 2: o = bf16(acc * column factor) (mxfp4; the factor is 1 unless folded) or
// bf16(acc * (weight_scale_2 / g_row)) (nvfp4), features 16w + g and 16w + 8 + g of the chunk.
template <bool kNvfp4>
struct DecodeStoreBf16 {
  template <int kBlockRows = kDecodeBlockN>
  static __device__ __forceinline__ void apply(const StoreEpilogueParams& ep, const GroupedGemmOperands& op,
                                               const DecodeTile& t, const DecodeAccumulators& acc, uint8_t*) {
    const int warp = threadIdx.x / 32, g = (threadIdx.x % 32) / 4;
    const int col0 = t.n_chunk * kBlockRows + 16 * warp + g;
    float s0 = 1.0f, s1 = 1.0f;
    if constexpr (!kNvfp4) {
      s0 = col_scale(op, t.expert, col0);
      s1 = col_scale(op, t.expert, col0 + 8);
    }
    for_each_tile_row(t, [&](int hh, int c, int r) {
      if constexpr (kNvfp4) s0 = s1 = __fdiv_rn(op.w_global[t.expert], op.a_global[a_source_row(op, t.row_begin + r)]);
      uint16_t* out = ep.out + static_cast<int64_t>(t.row_begin + r) * op.n;
      out[col0] = __bfloat16_as_ushort(__float2bfloat16_rn(acc[hh][c] * s0));
      out[col0 + 8] = __bfloat16_as_ushort(__float2bfloat16_rn(acc[hh][2 + c] * s1));
    });
  }
};

}  // namespace moe_ep::cuda
