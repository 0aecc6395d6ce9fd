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

// e2m1 -> e4m3 of a packed word with the magnitude table of one shift (table_lo = codes 0..3, table_hi = 4..7).
MOE_EP_HD void decode_fp4_word_with(uint32_t w, uint32_t table_lo, uint32_t table_hi,
                                    uint32_t& lo_e4m3, uint32_t& hi_e4m3) {
  lo_e4m3 = ptx::prmt(table_lo, table_hi, w & 0x7777u) | (w & 0x80808080u);
  hi_e4m3 = ptx::prmt(table_lo, table_hi, (w >> 16) & 0x7777u) | ((w << 4) & 0x80808080u);
}

MOE_EP_HD void decode_fp4_word(uint32_t w, uint32_t& lo_e4m3, uint32_t& hi_e4m3) {
  decode_fp4_word_with(w, kE2M1ToE4M3Lo, kE2M1ToE4M3Hi, lo_e4m3, hi_e4m3);
}

// Folded MXFP4 decode (docs/spec.md §5 window): when every block exponent of a weight row lies within
// 15 octaves of the row's smallest, the row is stored as codes plus a shift d = exponent -
// smallest in 0..14 per 32-block, and decodes to e4m3 of e2m1 * 2^(d - 8), exact for every code
// (d - 8 in [-8, 6]); the row factor 2^(smallest - 119) is applied to the fp32 result. Table d
// holds the eight magnitude bytes of that decode for prmt, codes 0..3 in word 0, 4..7 in word 1.
inline constexpr int kFoldedShifts = 15;
inline constexpr int kFoldedShiftBias = 8;

// e4m3 bits of |e2m1 code| * 2^k, for the k of the window (exact there; 0 for code 0).
constexpr uint32_t folded_e4m3_byte(int code, int k) {
  if (code == 0) return 0;
  // code 1 = 1 * 2^-1; codes 2..7 = (1 or 1.5) * 2^(code / 2 - 1)
  const int p = (code == 1 ? -1 : code / 2 - 1) + k;
  const bool half = code >= 2 && (code & 1);
  if (p >= -6) return static_cast<uint32_t>(((p + 7) << 3) | (half ? 4 : 0));  // normal
  return half ? 3u << (p + 8) : 1u << (p + 9);  // subnormal: (m / 8) * 2^-6, m = value * 2^9
}

constexpr uint32_t folded_table_word(int d, int first_code) {
  uint32_t w = 0;
  for (int i = 0; i < 4; ++i) w |= folded_e4m3_byte(first_code + i, d - kFoldedShiftBias) << (8 * i);
  return w;
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

// Eight codes in standard order (nibble i = element i) -> e4m3 bytes of elements 0..3 (lo) and
// 4..7 (hi). The sign of an odd element is the sign bit of a byte of w, that of an even element
// the sign bit of a byte of w << 4; prmt's sign-replicating selectors (bit 3 of a selector
// nibble) spread them: 9 instructions for 8 values.
MOE_EP_HD void decode_fp4x8_standard(uint32_t w, uint32_t& lo_e4m3, uint32_t& hi_e4m3) {
  const uint32_t mag = w & 0x77777777u, w4 = w << 4;
  lo_e4m3 = ptx::prmt(kE2M1ToE4M3Lo, kE2M1ToE4M3Hi, mag) | (ptx::prmt(w4, w, 0xD9C8u) & 0x80808080u);
  hi_e4m3 = ptx::prmt(kE2M1ToE4M3Lo, kE2M1ToE4M3Hi, mag >> 16) | (ptx::prmt(w4, w, 0xFBEAu) & 0x80808080u);
}

// NVFP4 activations in the nvfp4 decode kernel's lane order. Of the 16 words of one row's
// 128-wide k step (packed e2m1 in standard order: 16-bit unit 4j + t = elements 4t..4t+3 of k16
// block j), lane t's word i holds unit t of block 2i in its low half and of block 2i + 1 in its
// high half (decode_fp4x8_standard -> the e4m3 bytes of both blocks).
MOE_EP_HD uint32_t nvfp4_lane_word(const uint32_t (&step)[16], int t, int i) {
  return ptx::prmt(step[4 * i + t / 2], step[4 * i + 2 + t / 2], t % 2 ? 0x7632u : 0x5410u);
}

}  // namespace moe_ep::cuda
