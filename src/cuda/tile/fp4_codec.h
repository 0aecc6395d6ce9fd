// FP4 (e2m1) -> FP8 (e4m3) decoding in registers, and the packed-word encoding it reads.
//
// Every e2m1 value is exact in e4m3 (0.5 = 0x30 ... 6 = 0x4C), so the decode is a table
// lookup: prmt picks magnitude bytes from an 8-entry table held in two registers, and the sign
// bits are ORed in. To make the sign step one mask (low half) or one shift + mask (high half),
// the kernels' weight words use their own nibble order (written at load time by
// encode_fp4_word):
//
//   a word holds 8 values lo[0..3], hi[0..3]; nibble p = magnitude (bits 0-2) + a sign (bit 3)
//     nibble:     0      1      2      3      4      5      6      7
//     magnitude   lo0    lo1    lo2    lo3    hi0    hi1    hi2    hi3
//     sign of     hi0    lo0    hi1    lo1    hi2    lo2    hi3    lo3
//   decode_fp4_word -> lo_e4m3 = e4m3 bytes of lo[0..3] (byte i = lo[i]), hi_e4m3 likewise.
//
// Host and device share this file: the host packs weights with it, the kernels decode with it,
// and host tests check one against the other.
#pragma once

#include <cstdint>

#include "cuda/ptx/convert.cuh"

namespace moe_ep::cuda {

inline constexpr uint32_t kE2M1ToE4M3Lo = 0x3C383000u;  // |e2m1| codes 0..3 -> 0, .5, 1, 1.5
inline constexpr uint32_t kE2M1ToE4M3Hi = 0x4C484440u;  // codes 4..7 -> 2, 3, 4, 6

// lo[i], hi[i]: 4-bit e2m1 codes (bit 3 = sign).
MOE_EP_HD uint32_t encode_fp4_word(const uint8_t (&lo)[4], const uint8_t (&hi)[4]) {
  uint32_t w = 0;
  for (int i = 0; i < 4; ++i) {
    w |= static_cast<uint32_t>(lo[i] & 7) << (4 * i);
    w |= static_cast<uint32_t>(hi[i] & 7) << (16 + 4 * i);
    w |= static_cast<uint32_t>((lo[i] >> 3) & 1) << (8 * i + 7);
    w |= static_cast<uint32_t>((hi[i] >> 3) & 1) << (8 * i + 3);
  }
  return w;
}

MOE_EP_HD void decode_fp4_word(uint32_t w, uint32_t& lo_e4m3, uint32_t& hi_e4m3) {
  lo_e4m3 = ptx::prmt(kE2M1ToE4M3Lo, kE2M1ToE4M3Hi, w & 0x7777u) | (w & 0x80808080u);
  hi_e4m3 = ptx::prmt(kE2M1ToE4M3Lo, kE2M1ToE4M3Hi, (w >> 16) & 0x7777u) |
            ((w << 4) & 0x80808080u);
}

// Four e2m1 codes in standard order (nibble i = element i, as in packed tensors) -> four e4m3
// bytes (byte i = element i). Used for activations, whose layout is the caller's.
MOE_EP_HD uint32_t decode_fp4x4_standard(uint32_t x16) {
  const uint32_t mag = ptx::prmt(kE2M1ToE4M3Lo, kE2M1ToE4M3Hi, x16 & 0x7777u);
  const uint32_t s = x16 & 0x8888u;
  const uint32_t sign = ((s << 4) & 0x80u) | ((s << 8) & 0x8000u) | ((s << 12) & 0x800000u) |
                        ((s << 16) & 0x80000000u);
  return mag | sign;
}

}  // namespace moe_ep::cuda
