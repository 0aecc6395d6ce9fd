// Folded MXFP4 weights -> bf16 in registers, for bf16 wgmma with the weights as the register
// operand A (M side = weight rows, N side = tokens, B = bf16 activations in shared memory).
//
// Decode. Pair p (0..3) of a packed word (tile/fp4_codec.h nibble order) becomes one bf16x2:
// (lo[p], hi[p]) in the low / high half. Each half first gets the magnitude bits (code & 7) << 6
// and the sign at bit 15: read as bf16 that is exactly e2m1 * 2^-126 (code 1 = 0.5 lands on the
// subnormal 2^-127, the others on normals). One bf16 multiply by 2^(112 + d) then gives
// e2m1 * 2^(d - 14) for the shift d = 0..14 of the folded window (weight_layout.h), exact; the
// epilogue's column factor is the fold's row factor times 2^kRsFoldBias = 2^6 (the fold's own
// decode, to e4m3, is e2m1 * 2^(d - 8)).
//
// Order along k. The A fragment of a bf16 wgmma k16 step is that of mma.sync m16n8k16 per warp
// (lane = 4g + t of the warp owning rows 16w..16w+15): a0 = row g, k slots 2t, 2t + 1; a1 = row
// g + 8, same slots; a2 = row g, slots 2t + 8, 2t + 9; a3 = row g + 8, slots 2t + 8, 2t + 9. A
// lane's 16 bytes of a weight micro-tile hold, in word j, k = 32j + 4t + {0..3} (lo) and
// 32j + 16 + 4t + {0..3} (hi) of row g. For k16 step L = 2j + s of a 128-wide k step the lane
// puts pair 2s of word j in a0 (row g) / a1 (row g + 8) and pair 2s + 1 in a2 / a3, so slot q of
// step L holds k = rs_source_k(L, q). The activations are stored in that order (position
// 16L + q of a 128-wide k step holds source k rs_source_k(L, q)); the sum over k is unchanged.
#pragma once

#include <cstdint>

#include "cuda/ptx/convert.cuh"

namespace moe_ep::cuda {

inline constexpr int kRsFoldBias = 6;  // decode = e2m1 * 2^(d - 8 - kRsFoldBias)

// Source k (0..127) of slot q (0..15) of k16 step L (0..7) within a 128-wide k step.
constexpr int rs_source_k(int step, int slot) {
  return 32 * (step / 2) + 16 * (slot % 2) + 4 * ((slot % 8) / 2) + 2 * (step % 2) + slot / 8;
}

// Position (16L + q) of source k within a 128-wide k step: the inverse of rs_source_k.
constexpr int rs_position_of_k(int k) {
  const int j = k / 32, c = (k % 32) / 16, t = (k % 16) / 4, i = k % 4;
  return 16 * (2 * j + i / 2) + 2 * t + c + 8 * (i % 2);
}

// The sign bits of a packed word: lo[p] at bit 8p + 7 of .lo, hi[p] at bit 8p + 7 of .hi.
struct Fp4SignBytes {
  uint32_t lo, hi;
};
MOE_EP_HD Fp4SignBytes fp4_sign_bytes(uint32_t w) { return {w & 0x80808080u, (w << 4) & 0x80808080u}; }

// bf16x2 of (lo[kPair], hi[kPair]) * 2^-126 (see above).
template <int kPair>
MOE_EP_HD uint32_t fp4_pair_bf16_unscaled(uint32_t w, Fp4SignBytes s) {
  static_assert(kPair >= 0 && kPair < 4);
  constexpr uint32_t kMagnitude = 0x01C001C0u;  // bits 6..8 of each half
  const uint32_t mag = kPair == 0 ? w << 6 : kPair == 1 ? w << 2 : kPair == 2 ? w >> 2 : w >> 6;
  // Bytes 1 and 3 <- sign byte kPair of .lo and .hi (bits 15, 31); bytes 0 and 2 copy the same
  // bytes, and their bits 7 and 23 fall inside kMagnitude, which takes them from `mag`.
  constexpr uint32_t kSelect = kPair | kPair << 4 | (4 + kPair) << 8 | (4 + kPair) << 12;
  const uint32_t sign = ptx::prmt(s.lo, s.hi, kSelect);
  return (mag & kMagnitude) | (sign & ~kMagnitude);
}

// bf16x2 of 2^(112 + d) in both halves, d = 0..14: exponent field 127 + 112 + d.
MOE_EP_HD uint32_t rs_fold_factor(uint32_t d) { return (239u + d) * 0x00800080u; }

// A fragment of k16 step 2j + s (kStep = s) from word j of rows g and g + 8 and their shifts.
template <int kStep>
MOE_EP_HD void rs_a_fragment(uint32_t word_g, uint32_t word_g8, uint32_t factor_g, uint32_t factor_g8,
                             uint32_t (&a)[4]) {
  const Fp4SignBytes sg = fp4_sign_bytes(word_g), sg8 = fp4_sign_bytes(word_g8);
  a[0] = ptx::mul_bf16x2(fp4_pair_bf16_unscaled<2 * kStep>(word_g, sg), factor_g);
  a[1] = ptx::mul_bf16x2(fp4_pair_bf16_unscaled<2 * kStep>(word_g8, sg8), factor_g8);
  a[2] = ptx::mul_bf16x2(fp4_pair_bf16_unscaled<2 * kStep + 1>(word_g, sg), factor_g);
  a[3] = ptx::mul_bf16x2(fp4_pair_bf16_unscaled<2 * kStep + 1>(word_g8, sg8), factor_g8);
}

}  // namespace moe_ep::cuda
