// A few results worked out by hand from docs/spec.md §3–5, so that the formats are checked even where
// the ml_dtypes vectors (test_formats_vectors.cpp) cannot be made.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <limits>

#include "moe_ep/formats.h"
#include "moe_ep/quant.h"

namespace moe_ep {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

TEST(FormatsByHand, E2M1TiesToEvenAndSaturates) {
  EXPECT_EQ(float_to_e2m1(0.25f), 0);   // 0 vs 0.5: even code 0
  EXPECT_EQ(float_to_e2m1(0.75f), 2);   // 0.5 (code 1) vs 1.0 (code 2)
  EXPECT_EQ(float_to_e2m1(1.75f), 4);   // 1.5 (code 3) vs 2.0 (code 4)
  EXPECT_EQ(float_to_e2m1(5.0f), 6);    // 4.0 (code 6) vs 6.0 (code 7)
  EXPECT_EQ(float_to_e2m1(5.0000005f), 7);
  EXPECT_EQ(float_to_e2m1(100.0f), 7);
  EXPECT_EQ(float_to_e2m1(1e30f), 7);
  EXPECT_EQ(float_to_e2m1(kInf), 7);
  EXPECT_EQ(float_to_e2m1(-kInf), 0xF);
  EXPECT_EQ(float_to_e2m1(-0.1f), 0x8);  // rounds to -0
  EXPECT_EQ(float_to_e2m1(std::nanf("")), 0);
}

TEST(FormatsByHand, E4M3SaturatesAndKeepsNaN) {
  EXPECT_EQ(float_to_e4m3(448.0f), 0x7E);
  EXPECT_EQ(float_to_e4m3(464.0f), 0x7E);  // tie between 448 and the NaN code: saturates
  EXPECT_EQ(float_to_e4m3(1e9f), 0x7E);
  EXPECT_EQ(float_to_e4m3(-kInf), 0xFE);
  EXPECT_EQ(float_to_e4m3(0x1p-10f), 0x00);  // half the smallest subnormal: tie to 0
  EXPECT_EQ(float_to_e4m3(0x1.8p-9f), 0x02);  // 1.5 * 2^-9: tie to 2 * 2^-9
  EXPECT_EQ(float_to_e4m3(-0.0f), 0x80);
  EXPECT_EQ(float_to_e4m3(std::nanf("")), 0x7F);
  EXPECT_EQ(float_to_e4m3(-std::nanf("")), 0xFF);
}

TEST(FormatsByHand, Bf16RoundsToEvenAndQuietsNaN) {
  EXPECT_EQ(float_to_bf16(1.0f + 0x1p-8f), 0x3F80);  // tie: even mantissa
  EXPECT_EQ(float_to_bf16(1.0f + 0x1.8p-7f), 0x3F82);
  EXPECT_EQ(float_to_bf16(3.4e38f), 0x7F80);  // above the bf16 maximum: +Inf
  EXPECT_EQ(float_to_bf16(std::bit_cast<float>(0x7FA00001u)), 0x7FC0);
  EXPECT_EQ(float_to_bf16(std::bit_cast<float>(0xFF800001u)), 0xFFC0);
}

TEST(FormatsByHand, ScaleBytes) {
  EXPECT_EQ(q8_scale_byte(448.0f), 127);
  EXPECT_EQ(q8_scale_byte(std::nextafter(448.0f, kInf)), 128);
  EXPECT_EQ(q8_scale_byte(0.0f), q8_scale_byte(1e-4f));   // amax floor
  EXPECT_EQ(q8_scale_byte(1e-4f), 127 - 22);              // 1e-4 / 448 in (2^-23, 2^-22]
  EXPECT_EQ(q8_scale_byte(kInf), 254);
  EXPECT_EQ(mxfp4_scale_byte(6.0f), 127);
  EXPECT_EQ(mxfp4_scale_byte(0.0f), 127);
  EXPECT_EQ(mxfp4_scale_byte(1e-44f), 0);
  // amax / 6 is just above 2^-127: the exact quotient asks for 2^-126.
  EXPECT_EQ(mxfp4_scale_byte(std::nextafter(6 * 0x1p-127f, kInf)), 1);
  EXPECT_EQ(mxfp4_scale_byte(kInf), 254);
}

}  // namespace
}  // namespace moe_ep
