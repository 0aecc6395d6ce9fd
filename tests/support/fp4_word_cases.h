// Packed FP4 words (tile/fp4_codec.h nibble order) for the host tests of the register decoders:
// random codes with one chosen code at one chosen position, so every code meets every position.
#pragma once

#include <cstdint>
#include <random>

#include "cuda/tile/fp4_codec.h"

namespace moe_ep::cuda {

struct Fp4WordCase {
  uint8_t lo[4], hi[4];  // 4-bit e2m1 codes, sign in bit 3
  uint32_t word;         // encode_fp4_word(lo, hi)
};

// Position 0..3 is lo[pos], 4..7 is hi[pos - 4].
inline Fp4WordCase random_fp4_word_with(std::mt19937& rng, int pos, uint8_t code) {
  Fp4WordCase c;
  for (int i = 0; i < 4; ++i) {
    c.lo[i] = rng() & 0xF;
    c.hi[i] = rng() & 0xF;
  }
  (pos < 4 ? c.lo[pos] : c.hi[pos - 4]) = code;
  c.word = encode_fp4_word(c.lo, c.hi);
  return c;
}

}  // namespace moe_ep::cuda
