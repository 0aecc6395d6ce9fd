// rs fp8 grouped GEMMs (kernels/sm90_mxfp4_rs_fp8_mainloop.cuh), and the four-consumer rs bf16
// ones (kernels/sm90_rs16_wide_mainloop.cuh), in configurations the library does not launch
// (tests/cuda/rs_fp8_variant_probe.cu): the weights by bulk copies or straight into the consumers'
// registers, four consumer warpgroups with narrow tail tiles in tile order, and the mainloops with
// parts of their work left out, which splits a kernel's time between the activation copies, the
// weight copies and the math.
#pragma once

#include <cuda_runtime.h>

#include "cuda/kernels/sm90_grouped_gemm.h"

namespace moe_ep::cuda::test {

// How the weights reach the consumers (RsFp8Weights): 16-byte cp.async, bulk copies, registers
// (64-token tiles only).
enum class RsFp8WeightPath { kCpAsync, kBulk, kRegisters };

struct RsFp8Variant {
  int block_m = 64;  // 64 or 96 tokens per m tile
  RsFp8WeightPath weights = RsFp8WeightPath::kCpAsync;
  int work = 7;      // RsFp8Work bits: 1 activation copies, 2 weight copies, 4 math
  int consumers = 2;  // consumer warpgroups: 2 (n tiles of 128 weight rows) or 4 (256; 64-token
                      // tiles, cp.async weights, the whole kernel or its math only)
  bool narrow_in_order = false;  // four consumers, whole kernel: tiles of <= 48 rows on n48 wgmmas in
                                 // tile order (RsFp8Tails::kNarrow; the library's form is kNarrowLast)
};

// Plan-time configuration of both GEMMs' kernels (blocks per SM of each).
cudaError_t configure_rs_fp8_variant(const RsFp8Variant& v, int* blocks_per_sm1, int* blocks_per_sm2);
cudaError_t launch_rs_fp8_variant_gemm1(const RsFp8Variant& v, const Gemm1Params& p, int grid, cudaStream_t stream);
cudaError_t launch_rs_fp8_variant_gemm2(const RsFp8Variant& v, const Gemm2Params& p, int grid, cudaStream_t stream);

// The four-consumer rs bf16 kernels (kernels/sm90_rs16_wide_mainloop.cuh) with parts of their work
// left out (work = 3 copies only, 4 math only: RsFp8Work bits; group_blocks = 1, the library's
// k32 blocks per wgmma group), or whole (work = 7) with two k32 blocks per group (group_blocks = 2)
// or on tiles of block_m = 128 tokens (m64n128k16 wgmmas over the 64-row tile list; group_blocks =
// 1: GEMM 1 is the library's launch_sm90_mxfp4_rs_wide128_grouped_gemm1); block_m 64 otherwise.
cudaError_t configure_rs16_wide_work(int work, int group_blocks, int block_m, int* blocks_per_sm1,
                                     int* blocks_per_sm2);
cudaError_t launch_rs16_wide_work_gemm1(int work, int group_blocks, int block_m, const Gemm1Params& p, int grid,
                                        cudaStream_t stream);
cudaError_t launch_rs16_wide_work_gemm2(int work, int group_blocks, int block_m, const Gemm2Params& p, int grid,
                                        cudaStream_t stream);

}  // namespace moe_ep::cuda::test
