// mxfp4 decode grouped GEMMs (sm90_mxfp4_decode_mainloop.cuh): GEMM 1 with the clamped SwiGLU +
// Q8 epilogue, GEMM 2 with the bf16 store. One block per (16-row m tile, 128 weight rows);
// blocks past the routing's m-tile count return at once.
#include "cuda/kernels/sm90_gemm_epilogues.cuh"
#include "cuda/kernels/sm90_kernel_config.cuh"
#include "cuda/kernels/sm90_mxfp4_decode_mainloop.cuh"
#include "cuda/ptx/griddep.cuh"

namespace moe_ep::cuda {
namespace {

// GEMM 1: warp w holds gate (c = 0, 1) and up (c = 2, 3) of h column 64 * chunk + 8w + g for
// tokens 8h + 2t + {0, 1} (the 8-row interleave of sm90_grouped_gemm.h). A Q8 block of 32 h
// columns is warps 4q .. 4q + 3: amax over g by shuffles, over the 4 warps in shared memory.
// The arithmetic is SwigluQ8Epilogue's, so the bytes are the same.
struct DecodeSwigluQ8 {
  static __device__ __forceinline__ void apply(const SwigluEpilogueParams& ep, const GroupedGemmOperands& op,
                                               const DecodeTile& t, const DecodeAccumulators& acc, uint8_t* smem) {
    float* amax_smem = reinterpret_cast<float*>(smem);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, tq = lane % 4;
    const int gate_col = t.n_chunk * kDecodeBlockN + 16 * warp + g;
    const float gate_scale = col_scale(op, t.expert, gate_col), up_scale = col_scale(op, t.expert, gate_col + 8);
    float h[2][2];
  #pragma unroll
    for (int hh = 0; hh < 2; ++hh)
  #pragma unroll
      for (int c = 0; c < 2; ++c) {
        const int r = 8 * hh + 2 * tq + c;
        const float weight = r < t.num_rows ? ep.row_weight[t.row_begin + r] : 0.0f;
        const float gate = round_to_bf16_device(acc[hh][c] * gate_scale);
        const float up = round_to_bf16_device(acc[hh][2 + c] * up_scale);
        h[hh][c] = clamped_swiglu_device(gate, up, ep.clamp, weight, ep.fast_math);
        float amax = fabsf(h[hh][c]);
  #pragma unroll
        for (int off = 4; off < 32; off *= 2) amax = fmaxf(amax, __shfl_xor_sync(0xFFFFFFFFu, amax, off));
        if (g == 0) amax_smem[warp * 16 + r] = amax;
      }
    __syncthreads();
    const int q = warp / 4, h_col = t.n_chunk * (kDecodeBlockN / 2) + 8 * warp + g;
  #pragma unroll
    for (int hh = 0; hh < 2; ++hh)
  #pragma unroll
      for (int c = 0; c < 2; ++c) {
        const int r = 8 * hh + 2 * tq + c;
        if (r >= t.num_rows) continue;
        float amax = amax_smem[(4 * q) * 16 + r];
  #pragma unroll
        for (int w = 1; w < 4; ++w) amax = fmaxf(amax, amax_smem[(4 * q + w) * 16 + r]);
        const uint32_t byte = q8_scale_byte_device(amax);
        const uint32_t code = float_to_e4m3_device(__fdiv_rn(h[hh][c], e8m0_to_float_device(byte)));
        const int64_t row = t.row_begin + r;
        ep.h_q[row * ep.intermediate + h_col] = static_cast<uint8_t>(code);
        if (warp % 4 == 0 && g == 0) ep.h_scale[row * (ep.intermediate / 32) + h_col / 32] = static_cast<uint8_t>(byte);
      }
  }
};

// GEMM 2: o[row, n] = bf16(acc * column factor), features 16w + g and 16w + 8 + g of the chunk.
struct DecodeStoreBf16 {
  static __device__ __forceinline__ void apply(const StoreEpilogueParams& ep, const GroupedGemmOperands& op,
                                               const DecodeTile& t, const DecodeAccumulators& acc, uint8_t*) {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, tq = lane % 4;
    const int col0 = t.n_chunk * kDecodeBlockN + 16 * warp + g;
    const float s0 = col_scale(op, t.expert, col0), s1 = col_scale(op, t.expert, col0 + 8);
  #pragma unroll
    for (int hh = 0; hh < 2; ++hh)
  #pragma unroll
      for (int c = 0; c < 2; ++c) {
        const int r = 8 * hh + 2 * tq + c;
        if (r >= t.num_rows) continue;
        uint16_t* out = ep.out + static_cast<int64_t>(t.row_begin + r) * op.n;
        out[col0] = __bfloat16_as_ushort(__float2bfloat16_rn(acc[hh][c] * s0));
        out[col0 + 8] = __bfloat16_as_ushort(__float2bfloat16_rn(acc[hh][2 + c] * s1));
      }
  }
};

// Three blocks of 8 warps per SM (<= 80 registers; shared memory is the 24 KB A ring plus 2 * K
// bytes of fp32 scales). The epilogue gets the shared memory after the activation scales.
template <bool kFolded, class Epilogue, class Params>
__global__ void __launch_bounds__(kDecodeThreads, 3) sm90_mxfp4_decode_kernel(const __grid_constant__ Params p) {
  extern __shared__ __align__(128) uint8_t smem[];
  __shared__ DecodeTables tables;
  // The schedule, A and (GEMM 2) the rows written by GEMM 1. No early launch of the next grid:
  // GEMM 2's blocks would take the slots GEMM 1 leaves free at its start and end up unevenly
  // spread over the SMs (measured: T = 1 +2.5 us).
  ptx::grid_dependency_wait();
  DecodeTile t;
  if (!decode_tile(p.schedule, p.op.n, t)) return;
  DecodeAccumulators acc;
  Mxfp4DecodeMainloop<kFolded>::run(p.op, t, smem, tables, acc);
  Epilogue::apply(p.epilogue, p.op, t, acc, smem + decode_epilogue_offset(p.op.k));
}

template <class Epilogue, class Params>
cudaError_t configure_decode(int k, int* blocks_per_sm) {
  return configure_persistent_kernels(sm90_mxfp4_decode_kernel<true, Epilogue, Params>, decode_shared_bytes(k),
                                      sm90_mxfp4_decode_kernel<false, Epilogue, Params>, decode_shared_bytes(k),
                                      kDecodeThreads, blocks_per_sm);
}

template <class Epilogue, class Params>
cudaError_t launch_decode(const Params& p, int m_tile_bound, cudaStream_t stream) {
  const int blocks = m_tile_bound * (p.op.n / kDecodeBlockN);
  if (blocks <= 0) return cudaSuccess;
  const int smem = decode_shared_bytes(p.op.k);
  if (p.op.w_col_scale)
    return launch_dependent(sm90_mxfp4_decode_kernel<true, Epilogue, Params>, blocks, kDecodeThreads, smem, stream, p);
  return launch_dependent(sm90_mxfp4_decode_kernel<false, Epilogue, Params>, blocks, kDecodeThreads, smem, stream, p);
}

}  // namespace

cudaError_t configure_sm90_mxfp4_decode_gemm1(int k, int* blocks_per_sm) {
  return configure_decode<DecodeSwigluQ8, Gemm1Params>(k, blocks_per_sm);
}

cudaError_t configure_sm90_mxfp4_decode_gemm2(int k, int* blocks_per_sm) {
  return configure_decode<DecodeStoreBf16, Gemm2Params>(k, blocks_per_sm);
}

cudaError_t launch_sm90_mxfp4_decode_gemm1(const Gemm1Params& p, int m_tile_bound, cudaStream_t stream) {
  return launch_decode<DecodeSwigluQ8>(p, m_tile_bound, stream);
}

cudaError_t launch_sm90_mxfp4_decode_gemm2(const Gemm2Params& p, int m_tile_bound, cudaStream_t stream) {
  return launch_decode<DecodeStoreBf16>(p, m_tile_bound, stream);
}

}  // namespace moe_ep::cuda
