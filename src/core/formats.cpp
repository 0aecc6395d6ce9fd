#include "moe_ep/formats.h"

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

namespace moe_ep {
namespace {

constexpr float kE2M1Values[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};

}  // namespace

uint16_t float_to_bf16(float v) {
  uint32_t bits = std::bit_cast<uint32_t>(v);
  if (std::isnan(v)) return static_cast<uint16_t>(((bits >> 16) & 0x8000) | 0x7FC0);
  const uint32_t rounding = 0x7FFF + ((bits >> 16) & 1);
  return static_cast<uint16_t>((bits + rounding) >> 16);
}

float bf16_to_float(uint16_t bits) { return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16); }

uint8_t float_to_e4m3(float v) {
  const uint8_t sign = std::signbit(v) ? 0x80 : 0x00;
  if (std::isnan(v)) return sign | 0x7F;
  const float a = std::fabs(v);
  if (a >= 448.0f) return sign | 0x7E;  // saturate (Inf included)
  if (a < 0x1p-6f) {
    // Subnormal range: multiples of 2^-9; a code of 8 is the smallest normal, encoded alike.
    return sign | static_cast<uint8_t>(std::rint(a * 512.0f));
  }
  int exp2 = 0;
  const float mant = std::frexp(a, &exp2);  // a = mant * 2^exp2, mant in [0.5, 1)
  int e = exp2 - 1;                        // a = (2 * mant) * 2^e
  int q = static_cast<int>(std::rint(mant * 16.0f));  // in [8, 16]
  if (q == 16) {
    q = 8;
    ++e;
  }
  return sign | static_cast<uint8_t>(((e + 7) << 3) | (q - 8));
}

float e4m3_to_float(uint8_t bits) {
  const float sign = (bits & 0x80) ? -1.0f : 1.0f;
  const int e = (bits >> 3) & 0xF;
  const int m = bits & 0x7;
  if (e == 0xF && m == 0x7) return std::numeric_limits<float>::quiet_NaN();
  if (e == 0) return sign * std::ldexp(static_cast<float>(m), -9);
  return sign * std::ldexp(1.0f + m / 8.0f, e - 7);
}

uint8_t float_to_e2m1(float v) {
  if (std::isnan(v)) return 0;
  const uint8_t sign = std::signbit(v) ? 0x8 : 0x0;
  // Magnitude code by the midpoints between adjacent values; a tie (<= on the left of a code
  // with mantissa bit 0, < on the left of one with bit 1) goes to the even code. Everything
  // above 5, Inf included, saturates to 6.
  // Counted without branches: random weights make a branch ladder mispredict on every element.
  const float a = std::fabs(v);
  const int code = (a > 0.25f) + (a >= 0.75f) + (a > 1.25f) + (a >= 1.75f) + (a > 2.5f) +
                   (a >= 3.5f) + (a > 5.0f);
  return static_cast<uint8_t>(sign | code);
}

float e2m1_to_float(uint8_t nibble) {
  const float mag = kE2M1Values[nibble & 0x7];
  return (nibble & 0x8) ? -mag : mag;
}

float e8m0_to_float(uint8_t bits) {
  if (bits == kE8M0NaN) return std::numeric_limits<float>::quiet_NaN();
  return std::ldexp(1.0f, static_cast<int>(bits) - 127);
}

int ceil_log2(float v) {
  const uint32_t bits = std::bit_cast<uint32_t>(v);
  const int biased = static_cast<int>((bits >> 23) & 0xFF);
  const uint32_t mant = bits & 0x7FFFFF;
  if (biased == 0) {  // subnormal: v = mant * 2^-149
    const int floor_log2 = 31 - std::countl_zero(mant);
    return (std::has_single_bit(mant) ? floor_log2 : floor_log2 + 1) - 149;
  }
  return biased - 127 + (mant != 0 ? 1 : 0);
}

}  // namespace moe_ep
