// Grouped (per-expert) GEMMs of the layer: their parameters and the kernels of each form.
//
// Rows of every GEMM are the permuted (expert-grouped) rows of sm90_permute: expert e owns rows
// [expert_offsets[e], expert_offsets[e+1]). The routing kernel also lists the m-tiles
// (tile_expert, tile_row_begin; the bucket's list_block_m rows each, the last one of an expert
// partial), so a persistent GEMM grid walks tiles = m_tile * (n / block_n) + n_tile without a host
// sync.
//
// Weight layouts (written by weight_layout.cpp; N = output features, K = reduction):
//   w        [E][N/8][K/128][512 B]  micro-tiles of 8 rows x 128 k; lane l = 4*g + t of a warp
//                                    owns bytes [16l, 16l+16): row g, four 32-bit words.
//            mxfp4: word j = k block j (32 wide), values k = 32j + 4t + {0..3} (lo) and
//                   32j + 16 + 4t + {0..3} (hi), in the nibble order of tile/fp4_codec.h.
//            nvfp4: word j = k16 blocks 2j (lo) and 2j+1 (hi), values 16b + 4t + {0..3}.
//   w_scale  mxfp4: [E][K/128][N][4]  E8M0 of the four k32 blocks of a 128-wide k step (or,
//                                    folded, their shifts 0..14 with w_col_scale)
//            nvfp4: [E][K/128][N][8]  e4m3 of the eight k16 blocks
//   GEMM 1 rows are interleaved by 8: row block 2b holds gate rows 8b..8b+7, block 2b+1 the
//   up rows I+8b..; so a 128-wide n tile yields 64 complete SwiGLU outputs.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

#include "cuda/policy/sm90_forms.h"
#include "cuda/policy/sm90_tiles.h"

namespace moe_ep::cuda {

struct GroupedGemmSchedule {
  const int32_t* num_m_tiles;     // [1]
  const int32_t* tile_expert;     // [max_m_tiles]
  const int32_t* tile_row_begin;  // [max_m_tiles]
  const int32_t* expert_offsets;  // [E + 1]
  int32_t num_experts = 0;        // E (the walks over experts: TileWalk::kOddLast)
};

struct GroupedGemmOperands {
  int32_t n = 0, k = 0;
  // A: row r of the GEMM reads A row a_row_index[r] (identity when null).
  const uint8_t* a = nullptr;        // mxfp4: e4m3 [rows, k]; nvfp4: packed e2m1 [rows, k/2]
  int64_t a_row_bytes = 0;
  const uint8_t* a_scale = nullptr;  // mxfp4: E8M0 [rows, k/32]; nvfp4: e4m3 [rows, k/16]
  int64_t a_scale_row_bytes = 0;
  const float* a_global = nullptr;   // nvfp4: per A row encode factor g (dequant q * s / g)
  const int32_t* a_row_index = nullptr;
  const uint8_t* w = nullptr;
  const uint8_t* w_scale = nullptr;
  const float* w_global = nullptr;   // nvfp4: [E] weight_scale_2
  // mxfp4 folded into the FP8 window (w_scale = shifts, tile/fp4_codec.h): factor of output
  // column n of expert e, [E][N]; the epilogues multiply the fp32 accumulator by it.
  const float* w_col_scale = nullptr;
};

// GEMM 1 epilogue: gu = bf16(acc); h = silu(min(gate, c)) * clamp(up, -c, c) * row_weight.
// mxfp4 writes Q8(h) (e4m3 [rows, I] + E8M0 [rows, I/32]); nvfp4 writes fp32 h [rows, I].
struct SwigluEpilogueParams {
  const float* row_weight = nullptr;  // [rows]
  float clamp = 0.0f;                 // +inf when the layer has no clamp
  int32_t fast_math = 0;
  int32_t intermediate = 0;           // I
  uint8_t* h_q = nullptr;
  uint8_t* h_scale = nullptr;
  float* h_f32 = nullptr;
};

// GEMM 2 epilogue: o = bf16(acc) [rows, n].
struct StoreEpilogueParams {
  uint16_t* out = nullptr;
};

struct Gemm1Params {
  GroupedGemmSchedule schedule;
  GroupedGemmOperands op;
  SwigluEpilogueParams epilogue;
};

struct Gemm2Params {
  GroupedGemmSchedule schedule;
  GroupedGemmOperands op;
  StoreEpilogueParams epilogue;
};

// The kernels of one form (policy/sm90_forms.h). configure* raise the kernel's shared-memory limit
// and report how many blocks fit on one SM for a reduction size k (the decode forms hold a tile's
// rows of A in shared memory; the others ignore k); called at plan time. launch* run over the
// routing's m tiles with `grid` blocks: a persistent form's grid is at most blocks per SM x SMs,
// a decode form's is the m-tile bound (blocks past the routing's tile count return at once).
// A form's kernels check their operands (whole tiles of n and k, the scales the form reads) and
// return cudaErrorInvalidValue where they do not hold.
struct Sm90FormKernels {
  cudaError_t (*configure1)(int k, int* blocks_per_sm) = nullptr;
  cudaError_t (*configure2)(int k, int* blocks_per_sm) = nullptr;  // null: a GEMM 1 form
  cudaError_t (*launch1)(const Gemm1Params& params, int grid, cudaStream_t stream) = nullptr;
  cudaError_t (*launch2)(const Gemm2Params& params, int grid, cudaStream_t stream) = nullptr;
};
// The row of the CUDA side of the form table (sm90_form_kernels.cpp).
const Sm90FormKernels& sm90_form_kernels(Sm90Form form);

// The kernels of a form from its launcher: Form::configure<Epilogue, Params>(k, blocks_per_sm) and
// Form::launch<Epilogue, Params>(params, grid, stream), GEMM 1 with Epilogue1, GEMM 2 with
// Epilogue2.
template <class Form, class Epilogue1, class Epilogue2>
constexpr Sm90FormKernels form_kernels() {
  return {&Form::template configure<Epilogue1, Gemm1Params>, &Form::template configure<Epilogue2, Gemm2Params>,
          &Form::template launch<Epilogue1, Gemm1Params>, &Form::template launch<Epilogue2, Gemm2Params>};
}

// Each kernel file defines the kernels of its forms:
extern const Sm90FormKernels kMxfp4DecodeKernels, kMxfp4DecodeSplitKernels;  // sm90_mxfp4_decode_gemm.cu
extern const Sm90FormKernels kMxfp4DecodeWgmmaKernels,
    kMxfp4DecodeWgmmaSplitKernels;  // sm90_mxfp4_decode_fp8_gemm.cu
extern const Sm90FormKernels kMxfp4MmaKernels;                                // sm90_mxfp4_mma_gemm.cu
extern const Sm90FormKernels kMxfp4WgmmaFp8Kernels;                           // sm90_mxfp4_wgmma_gemm.cu
extern const Sm90FormKernels kMxfp4RsFp8Kernels, kMxfp4RsFp8TailsKernels;     // sm90_mxfp4_rs_fp8_gemm.cu
extern const Sm90FormKernels kMxfp4RsBf16PairsKernels;                        // sm90_mxfp4_rs_bf16_gemm.cu
extern const Sm90FormKernels kNvfp4DecodeKernels, kNvfp4DecodeSplitKernels;  // sm90_nvfp4_decode_gemm.cu
extern const Sm90FormKernels kNvfp4MmaKernels;                                // sm90_nvfp4_mma_gemm.cu
extern const Sm90FormKernels kNvfp4RsF16Kernels, kNvfp4RsF16WideKernels;      // sm90_nvfp4_rs_gemm.cu

// ---- the 16-bit activations of the register-operand forms that read them (x_16bit, h_16bit) ----

// A of those forms: 16-bit rows of op.k elements in their kernel's order, no block scales (an
// nvfp4 row keeps its a_global factor).
inline void set_16bit_activations(GroupedGemmOperands& op, const uint16_t* a) {
  op.a = reinterpret_cast<const uint8_t*>(a);
  op.a_row_bytes = 2 * static_cast<int64_t>(op.k);
  op.a_scale = nullptr;
  op.a_scale_row_bytes = 0;
}
// Q8 rows (e4m3 [rows, k] + E8M0 [rows, k / 32]) -> bf16 [rows, k]: element k' of each 128-wide
// k step at position rs_position_of_k(k') of that step, value e4m3 * 2^(E8M0 - 127) (exact).
// rows bounds the grid; row_count (device, may be null) the rows converted, when it is smaller
// (the routed rows of h: rows past them are neither read nor written).
cudaError_t launch_sm90_q8_to_rs_bf16(const uint8_t* a, const uint8_t* a_scale, int64_t rows,
                                      const int32_t* row_count, int k, uint16_t* out, cudaStream_t stream);
// NVFP4 rows (packed e2m1 [rows, k / 2] in standard order + e4m3 [rows, k / 16]) -> f16 [rows, k]:
// element k' of each 128-wide k step at position nvfp4_f16_position_of_k(k') of that step, value
// e2m1 * e4m3 block scale (exact; the row's global factor stays with the GEMM's epilogue). rows
// and row_count as for launch_sm90_q8_to_rs_bf16.
cudaError_t launch_sm90_nvfp4_to_rs_f16(const uint8_t* packed, const uint8_t* scales, int64_t rows,
                                        const int32_t* row_count, int k, uint16_t* out, cudaStream_t stream);

}  // namespace moe_ep::cuda
