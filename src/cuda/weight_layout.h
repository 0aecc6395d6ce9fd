// Load-time conversion of canonical host weights (core/weight_prep.h) into the layout the SM90
// grouped GEMMs read (described in kernels/sm90_grouped_gemm.h). Pure host code: the layout and
// its decoding are unit-tested without a GPU.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "core/weight_prep.h"

namespace moe_ep::cuda {

// One GEMM's weights of all local experts in kernel layout.
struct KernelWeightTensor {
  int64_t num_experts = 0, n = 0, k = 0;  // per expert: N output rows, K reduction
  std::vector<uint8_t> tiles;             // [E][N/8][K/128][512 B]
  std::vector<uint8_t> scales;            // [E][K/128][N][4 (mxfp4) | 8 (nvfp4)]
  // mxfp4 folded into the FP8 window (tile/fp4_codec.h): `scales` holds the shift d = E8M0 -
  // row_base in 0..14 of each block (0 for an all-zero block), and row n of expert e carries
  // the factor 2^(row_base[e][n] - 119) (row_factors()).
  bool folded = false;
  std::vector<uint8_t> row_base;          // [E][N] smallest E8M0 byte of the row (folded only)

  std::vector<float> row_factors() const;  // [E][N] 2^(row_base - 119); empty when not folded
};

// Whether mxfp4 weights are folded into the FP8 window at load (docs/spec.md §5).
enum class Fp8Fold {
  kWhenInside,  // fold a GEMM's weights when every row of every expert is inside the window
                // (its non-zero blocks span at most 15 octaves)
  kNever,       // keep E8M0 block scales, applied in fp32 per k block (exact for any spread)
};

struct KernelWeights {
  WeightFormat format = WeightFormat::kMXFP4;
  KernelWeightTensor w13;  // N = 2I, rows interleaved by 8 (gate block, up block, ...)
  KernelWeightTensor w2;   // N = H
  std::vector<float> w13_global, w2_global;  // nvfp4 weight_scale_2 [E]
};

// The fold of one GEMM's weights (kernel rows n of each expert e, row(e, n) = the exponents of
// its canonical source row): the row bases [E][N] when every row is inside the window, else
// empty (the tensor keeps its E8M0 scales).
std::vector<uint8_t> fold_row_bases(int64_t experts, int64_t n_dim,
                                    const std::function<Mxfp4RowExponents(int64_t, int64_t)>& row,
                                    const ParallelFor& parallel_for = serial_for);
// 2^(row_base - 119) of each row: the column factors a folded tensor's GEMM applies.
std::vector<float> row_factors_of(const std::vector<uint8_t>& row_base);

// Source row (0..2I-1 of canonical W13) of kernel row n of GEMM 1.
int64_t gemm1_source_row(int64_t n, int64_t intermediate);

// Converts; `parallel_for` runs independent (expert, row block) tasks.
KernelWeights make_kernel_weights(const HostExpertWeights& w,
                                  const ParallelFor& parallel_for = serial_for,
                                  Fp8Fold fold = Fp8Fold::kWhenInside);

// Reads back element (e, n, k) of a kernel tensor the way a kernel lane does: the e2m1 code
// (4 bits, sign in bit 3) and the block scale byte. Used by tests.
struct KernelWeightElement {
  uint8_t code;
  uint8_t scale;
};
KernelWeightElement read_kernel_weight(const KernelWeightTensor& t, WeightFormat format,
                                       int64_t e, int64_t n, int64_t k);

}  // namespace moe_ep::cuda
