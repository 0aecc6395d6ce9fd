// Bit-exact scalar conversions for the number formats of docs/spec.md §5.
//
//   bf16   1-8-7, round to nearest even (values past the maximum become ±Inf); every NaN
//          gives the quiet NaN 0x7FC0 with the sign of the input (as ml_dtypes does).
//   e4m3   float8_e4m3fn: 1-4-3, bias 7, max 448, no Inf, NaN = 0x7F/0xFF.
//          Round to nearest even, saturating: |v| > 448 and ±Inf give ±448; NaN gives 0x7F
//          with the sign of the input.
//   e2m1   float4_e2m1fn: values ±{0, 0.5, 1, 1.5, 2, 3, 4, 6}, no Inf/NaN. Round to nearest
//          even, saturating to ±6; NaN gives +0 (inputs are checked for NaN before quantizing).
//   e8m0   float8_e8m0fnu: value 2^(b - 127), 0xFF is NaN.
#pragma once

#include <cstdint>

namespace moe_ep {

uint16_t float_to_bf16(float v);
float bf16_to_float(uint16_t bits);
inline float round_to_bf16(float v) { return bf16_to_float(float_to_bf16(v)); }

uint8_t float_to_e4m3(float v);
float e4m3_to_float(uint8_t bits);

uint8_t float_to_e2m1(float v);      // 4-bit code in the low nibble
float e2m1_to_float(uint8_t nibble);  // only the low nibble is read

inline constexpr uint8_t kE8M0NaN = 0xFF;
float e8m0_to_float(uint8_t bits);  // NaN for 0xFF, 2^-127 for 0x00

// Packed FP4: element 2j in the low nibble of byte j, element 2j+1 in the high nibble.
inline uint8_t pack_e2m1(uint8_t even, uint8_t odd) {
  return static_cast<uint8_t>((even & 0xF) | ((odd & 0xF) << 4));
}
inline uint8_t unpack_e2m1(uint8_t byte, int64_t element) {
  return (element & 1) ? (byte >> 4) : (byte & 0xF);
}

// ceil(log2(v)) for finite v > 0, computed exactly from the bits of v (no libm rounding).
int ceil_log2(float v);

}  // namespace moe_ep
