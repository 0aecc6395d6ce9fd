// Epilogues of the register-operand wgmma GEMMs (16-bit: sm90_rs16_mainloop.cuh, FP8:
// sm90_mxfp4_rs_fp8_mainloop.cuh): one consumer thread's transposed m64 n(2 kAcc) fragment (rows =
// weight rows, columns = the tile's first 2 kAcc tokens, kAcc accumulators) to global memory, with the
// arithmetic of sm90_wgmma_epilogues.cuh (the same output formats; values equal up to the order
// of the fp32 sums). Cfg::kAccScale takes the accumulator to the fold's units (exact, a power of
// two), multiplied before the column factor so the product rounds once, as in the FP8 epilogues.
#pragma once

#include <cstdint>

#include <cuda_bf16.h>

#include "cuda/kernels/sm90_gemm_epilogues.cuh"
#include "cuda/kernels/sm90_grouped_gemm_tile.cuh"
#include "cuda/kernels/sm90_persistent_tiles.cuh"
#include "cuda/kernels/sm90_rs_fragment.cuh"
#include "cuda/ptx/named_barrier.cuh"

namespace moe_ep::cuda {

// The column factor of kernel row `row` (the fold's, for e4m3 = e2m1 * 2^(d - 8)).
__device__ __forceinline__ float rs_col_scale(const GroupedGemmOperands& op, const TileCoord& t, int row) {
  return op.w_col_scale[static_cast<int64_t>(t.expert) * op.n + row];
}

// GEMM 1: rows f.row (gate, kernel row block 2b) and f.row + 8 (its up partner, block 2b + 1)
// give h column 8b + g. A warpgroup's 64 kernel rows are the 32 h columns of one Q8 block: amax
// over g by shuffles, over the 4 warps through shared memory, then e4m3 bytes and the E8M0 byte
// as SwigluQ8Epilogue writes them. Each token's scale byte is derived once per warp: lane (g, t)
// derives those of chunks i = g (mod 8) and hands them to the lanes that hold the chunk. h / 2^e
// is taken as h * 2^-e, the same correctly rounded value (2^-e is exact for every scale byte).
struct RsSwigluQ8Epilogue {
  template <class Cfg, class Smem, int kAcc>
  static __device__ __forceinline__ void apply(const SwigluEpilogueParams& ep, const GroupedGemmOperands& op,
                                               const TileCoord& t, const RsFragment& f, const Smem& sm,
                                               float (&acc)[kAcc]) {
    constexpr int kChunks = kAcc / 4;  // n8 token chunks
    constexpr int kOwned = (kChunks + 7) / 8;  // chunks whose scale bytes a lane derives
    const float gate_scale = rs_col_scale(op, t, f.row), up_scale = rs_col_scale(op, t, f.row + 8);
    float h[kChunks][2];  // token column 8i + 2t + c
#pragma unroll
    for (int i = 0; i < kChunks; ++i)
#pragma unroll
      for (int c = 0; c < 2; ++c) {
        const int col = 8 * i + 2 * f.t + c;
        const float weight = col < t.num_rows ? ep.row_weight[t.row_begin + col] : 0.0f;
        const float gate = round_to_bf16_device(acc[4 * i + c] * Cfg::kAccScale * gate_scale);
        const float up = round_to_bf16_device(acc[4 * i + 2 + c] * Cfg::kAccScale * up_scale);
        h[i][c] = clamped_swiglu_device(gate, up, ep.clamp, weight, ep.fast_math);
      }
    float* amax = sm.amax(f.wg);  // [kBlockM][4 warps]
    const int g = f.row % 8;
#pragma unroll
    for (int i = 0; i < kChunks; ++i)
#pragma unroll
      for (int c = 0; c < 2; ++c) {
        float m = fabsf(h[i][c]);
        m = fmaxf(m, __shfl_xor_sync(0xFFFFFFFFu, m, 4));
        m = fmaxf(m, __shfl_xor_sync(0xFFFFFFFFu, m, 8));
        m = fmaxf(m, __shfl_xor_sync(0xFFFFFFFFu, m, 16));
        if (g == 0) amax[4 * (8 * i + 2 * f.t + c) + f.warp] = m;
      }
    ptx::named_barrier_sync(1 + f.wg, 128);
    const int h_col = (f.row / 16) * 8 + g;
    uint32_t owned[kOwned];  // scale bytes of columns 8 (g + 8j) + 2t + {0, 1}, packed
#pragma unroll
    for (int j = 0; j < kOwned; ++j) {
      owned[j] = 0;
      if (g + 8 * j >= kChunks) continue;
#pragma unroll
      for (int c = 0; c < 2; ++c) {
        const int col = 8 * (g + 8 * j) + 2 * f.t + c;
        const float4 w = *reinterpret_cast<const float4*>(amax + 4 * col);
        const uint32_t byte = q8_scale_byte_device(fmaxf(fmaxf(w.x, w.y), fmaxf(w.z, w.w)));
        owned[j] |= byte << (8 * c);
        if (f.warp == 0 && col < t.num_rows)
          ep.h_scale[(t.row_begin + col) * (ep.intermediate / 32) + h_col / 32] = static_cast<uint8_t>(byte);
      }
    }
#pragma unroll
    for (int i = 0; i < kChunks; ++i) {
      const uint32_t bytes = __shfl_sync(0xFFFFFFFFu, owned[i / 8], 4 * (i % 8) + f.t);
#pragma unroll
      for (int c = 0; c < 2; ++c) {
        const int col = 8 * i + 2 * f.t + c;
        if (col >= t.num_rows) continue;
        const float inv_scale = e8m0_to_float_device(254 - ((bytes >> (8 * c)) & 0xFF));  // 2^(127 - byte)
        ep.h_q[static_cast<int64_t>(t.row_begin + col) * ep.intermediate + h_col] =
            static_cast<uint8_t>(float_to_e4m3_device(q8_saturate_device(h[i][c]) * inv_scale));
      }
    }
    ptx::named_barrier_sync(1 + f.wg, 128);  // amax is rewritten by the next tile
  }
};

// GEMM 2: o[token, row] = bf16(acc * column factor).
struct RsStoreBf16Epilogue {
  template <class Cfg, class Smem, int kAcc>
  static __device__ __forceinline__ void apply(const StoreEpilogueParams& ep, const GroupedGemmOperands& op,
                                               const TileCoord& t, const RsFragment& f, const Smem&,
                                               float (&acc)[kAcc]) {
    const float scale[2] = {rs_col_scale(op, t, f.row), rs_col_scale(op, t, f.row + 8)};
#pragma unroll
    for (int i = 0; i < kAcc / 4; ++i)
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const int col = 8 * i + 2 * f.t + (c & 1);
        if (col >= t.num_rows) continue;
        const float v = acc[4 * i + c] * Cfg::kAccScale * scale[c / 2];
        ep.out[static_cast<int64_t>(t.row_begin + col) * op.n + f.row + 8 * (c / 2)] =
            __bfloat16_as_ushort(__float2bfloat16_rn(v));
      }
  }
};

// nvfp4 (the accumulator in the products' units, Cfg::kAccScale = 1): token column c of the tile
// scales by the expert's weight_scale_2 over its A row's encode factor, as in SwigluF32Epilogue and
// StoreBf16Epilogue<true>. Each consumer warpgroup computes the tile's factors once (a thread per
// column) into its amax area, which the nvfp4 epilogues do not otherwise use; the caller syncs
// the warpgroup again (rs_nvfp4_alphas_done) before the next tile rewrites them.
template <class Cfg, class Smem>
__device__ __forceinline__ const float* rs_nvfp4_alphas(const GroupedGemmOperands& op, const TileCoord& t,
                                                        const RsFragment& f, const Smem& sm) {
  static_assert(Cfg::kAccScale == 1.0f, "nvfp4 accumulators need no scale");
  float* alpha = sm.amax(f.wg);
  for (int c = static_cast<int>(threadIdx.x % 128); c < t.num_rows; c += 128)
    alpha[c] = __fdiv_rn(op.w_global[t.expert], op.a_global[a_source_row(op, t.row_begin + c)]);
  ptx::named_barrier_sync(1 + f.wg, 128);
  return alpha;
}

__device__ __forceinline__ void rs_nvfp4_alphas_done(const RsFragment& f) { ptx::named_barrier_sync(1 + f.wg, 128); }

// fn(i, c, col) for the tile's valid token columns col = 8 i + 2 f.t + c of a consumer thread
// (its accumulators acc[4 i + c], row f.row, and acc[4 i + 2 + c], row f.row + 8).
template <int kAcc, class Fn>
__device__ __forceinline__ void for_each_token_column(const TileCoord& t, const RsFragment& f, Fn&& fn) {
#pragma unroll
  for (int i = 0; i < kAcc / 4; ++i)
#pragma unroll
    for (int c = 0; c < 2; ++c) {
      const int col = 8 * i + 2 * f.t + c;
      if (col < t.num_rows) fn(i, c, col);
    }
}

// GEMM 1 of the nvfp4 recipe: rows f.row (gate) and f.row + 8 (up) give h column 8b + g as fp32
// (its NVFP4 quantization is a separate pass over whole rows).
struct RsSwigluF32Epilogue {
  template <class Cfg, class Smem, int kAcc>
  static __device__ __forceinline__ void apply(const SwigluEpilogueParams& ep, const GroupedGemmOperands& op,
                                               const TileCoord& t, const RsFragment& f, const Smem& sm,
                                               float (&acc)[kAcc]) {
    const float* alpha = rs_nvfp4_alphas<Cfg>(op, t, f, sm);
    const int h_col = (f.row / 16) * 8 + f.row % 8;
    for_each_token_column<kAcc>(t, f, [&](int i, int c, int col) {
      const int64_t row = t.row_begin + col;
      const float gate = round_to_bf16_device(acc[4 * i + c] * alpha[col]);
      const float up = round_to_bf16_device(acc[4 * i + 2 + c] * alpha[col]);
      ep.h_f32[row * ep.intermediate + h_col] =
          clamped_swiglu_device(gate, up, ep.clamp, ep.row_weight[row], ep.fast_math);
    });
    rs_nvfp4_alphas_done(f);
  }
};

// GEMM 2 of the nvfp4 recipe: o[token, row] = bf16(acc * alpha of the token).
struct RsNvfp4StoreBf16Epilogue {
  template <class Cfg, class Smem, int kAcc>
  static __device__ __forceinline__ void apply(const StoreEpilogueParams& ep, const GroupedGemmOperands& op,
                                               const TileCoord& t, const RsFragment& f, const Smem& sm,
                                               float (&acc)[kAcc]) {
    const float* alpha = rs_nvfp4_alphas<Cfg>(op, t, f, sm);
    for_each_token_column<kAcc>(t, f, [&](int i, int c, int col) {
      uint16_t* out = ep.out + static_cast<int64_t>(t.row_begin + col) * op.n + f.row;
      out[0] = __bfloat16_as_ushort(__float2bfloat16_rn(acc[4 * i + c] * alpha[col]));
      out[8] = __bfloat16_as_ushort(__float2bfloat16_rn(acc[4 * i + 2 + c] * alpha[col]));
    });
    rs_nvfp4_alphas_done(f);
  }
};

}  // namespace moe_ep::cuda
