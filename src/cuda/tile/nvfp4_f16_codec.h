// NVFP4 operands -> f16 in registers, for the f16 MMAs: mma.sync m16n8k16 (the nvfp4 decode
// kernels) and wgmma k16 with the weights as the register operand (the nvfp4-wgmma kernels).
//
// Values. e2m1 -> e4m3 (tile/fp4_codec.h) -> f16, times the f16 of the k16 block's e4m3 scale:
// exact (at most 5 significant bits, |value| <= 6 * 448, >= 2^-10 when nonzero).
//
// Order along k. The A (and B) fragment of an f16 k16 MMA gives lane t of a row slots 2t, 2t + 1
// (a0) and 2t + 8, 2t + 9 (a2). The weight micro-tiles and the decode kernels' activations give
// lane t elements 4t .. 4t + 3 of each k16 block instead, so slot 2t + e carries element 4t + e
// and slot 2t + 8 + e element 4t + 2 + e: slot q of k16 block b holds element
// nvfp4_f16_source_k(b, q). Both operands follow the same order, so the sum over k is unchanged;
// the activations of the wgmma kernels sit in shared memory in slot order (16-bit rows where
// position 16b + q of a 128-wide k step holds element nvfp4_f16_source_k(b, q) of the step).
#pragma once

#include <cstdint>

#include "cuda/ptx/convert.cuh"

namespace moe_ep::cuda {

// Element (0..127) of a 128-wide k step that slot q (0..15) of its k16 block b (0..7) holds.
constexpr int nvfp4_f16_source_k(int block, int slot) {
  return 16 * block + 4 * ((slot % 8) / 2) + 2 * (slot / 8) + slot % 2;
}

// Position (16b + q) of element k (0..127) of a 128-wide k step: the inverse of the above.
constexpr int nvfp4_f16_position_of_k(int k) {
  const int b = k / 16, t = (k % 16) / 4, i = k % 4;
  return 16 * b + 8 * (i / 2) + 2 * t + i % 2;
}

#if defined(__CUDACC__)
// f16x2 of the e4m3 scales of k16 blocks 2kb, 2kb + 1: bytes 2kb, 2kb + 1 of a row's 8 of a k step.
__device__ __forceinline__ uint32_t nvfp4_scale_pair(const uint2& scales, int kb) {
  const uint32_t word = kb < 2 ? scales.x : scales.y;  // the half is picked in the cvt (no shift)
  return kb % 2 ? ptx::cvt_f16x2_from_e4m3x2_of<true>(word) : ptx::cvt_f16x2_from_e4m3x2_of<false>(word);
}

// Both f16x2 registers (pairs 0 and 1) of one k16 block of 4 e4m3 values times the block's
// scale; kHigh picks the block's scale out of the f16x2 pair of scales.
template <bool kHigh>
__device__ __forceinline__ void nvfp4_scaled_pairs(uint32_t e4m3x4, uint32_t scales, uint32_t& p0, uint32_t& p1) {
  uint32_t lo, hi;
  ptx::cvt_f16x2x2_from_e4m3x4(e4m3x4, lo, hi);
  p0 = ptx::hmul2_f16_by_half<kHigh>(lo, scales);
  p1 = ptx::hmul2_f16_by_half<kHigh>(hi, scales);
}
#endif

}  // namespace moe_ep::cuda
