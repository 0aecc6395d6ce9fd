// Block shapes of the SM90 GEMM kernels, shared by the kernels and the host-only selection policy
// (no CUDA header: the policy and its tests build without the CUDA toolkit).
#pragma once

namespace moe_ep::cuda {

// mma.sync kernels: 64 tokens x 128 weight rows x 128 k per step, 256 threads.
inline constexpr int kGemmBlockM = 64;
inline constexpr int kGemmBlockN = 128;
inline constexpr int kGemmBlockK = 128;
inline constexpr int kGemmThreads = 256;
inline constexpr int kWeightMicroTileBytes = 512;  // 8 rows x 128 k of FP4

// FP8 wgmma with both operands in shared memory: 64 tokens x 256 weight rows, one producer and
// two consumer warpgroups.
inline constexpr int kWgmmaBlockM = 64;
inline constexpr int kWgmmaBlockN = 256;
inline constexpr int kWgmmaThreads = 384;

// Register-operand wgmma (the weights decoded into the A fragment): the 16-bit family on two
// consumers (kRsBlockM tokens x 128 rows) or four (kRsWideBlockM x kRsWideBlockN); GEMM 1 of the
// bf16 form over 128-token tiles (kRsWide128BlockM); the FP8 family on four consumers
// (64 x kRsFp8WideBlockN).
inline constexpr int kRsBlockM = 128;
inline constexpr int kRsBlockN = 128;
inline constexpr int kRsThreads = 384;
inline constexpr int kRsWideBlockM = 64;
inline constexpr int kRsWideBlockN = 256;
inline constexpr int kRsWide128BlockM = 128;
inline constexpr int kRsFp8WideBlockN = 256;

// Decode kernels: the weights on the MMA's m side, 16-token tiles x 128 weight rows, 256 threads,
// kDecodePrefetch k steps of weights in registers per warp; with K split in two, 64 weight rows
// a block.
inline constexpr int kDecodeBlockM = 16;
inline constexpr int kDecodeBlockN = 128;
inline constexpr int kDecodeSplitBlockN = 64;
inline constexpr int kDecodeThreads = 256;
inline constexpr int kDecodePrefetch = 2;

// The one-token layer (kernels/sm90_one_token.h): 12 warps in each of its two kernels; a down
// block keeps the experts of at most kOneTokenMaxTopK slots.
inline constexpr int kOneTokenThreads = 384;
inline constexpr int kOneTokenMaxTopK = 64;

}  // namespace moe_ep::cuda
