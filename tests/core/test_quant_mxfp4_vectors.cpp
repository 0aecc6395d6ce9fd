// MXFP4 weight quantize/dequantize (e2m1 + UE8M0 per 32, docs/spec.md §5) against the numpy
// implementation of tests/python/gen_format_vectors.py, byte for byte.
#include <gtest/gtest.h>

#include "core/test_formats_vector_file.h"
#include "moe_ep/formats.h"
#include "moe_ep/quant.h"

namespace moe_ep {
namespace {

using testvectors::all_equal;
using testvectors::load;
using testvectors::shape_of;
using testvectors::show;

TEST(QuantVectorsMxfp4, ScaleByte) {
  const auto amax = load<float>("mxfp4_scale_byte", "input");
  const auto expected = load<uint8_t>("mxfp4_scale_byte", "expected");
  std::vector<uint8_t> actual(amax.size());
  for (size_t i = 0; i < amax.size(); ++i) actual[i] = mxfp4_scale_byte(amax[i]);
  EXPECT_TRUE(all_equal("mxfp4_scale_byte", expected, actual,
                        [&](size_t i) { return "amax " + show(amax[i]); }));
}

class QuantVectorsMxfp4Quantize : public ::testing::TestWithParam<std::string> {};

TEST_P(QuantVectorsMxfp4Quantize, MatchesReference) {
  const std::string& case_name = GetParam();
  const auto shape = shape_of(case_name, "input");
  ASSERT_EQ(shape.size(), 2u) << case_name;
  const int64_t rows = shape[0], k = shape[1];
  const auto w = load<float>(case_name, "input");
  const auto expected_packed = load<uint8_t>(case_name, "packed");
  const auto expected_scales = load<uint8_t>(case_name, "scales");
  ASSERT_EQ(static_cast<int64_t>(expected_packed.size()), rows * k / 2) << case_name;
  ASSERT_EQ(static_cast<int64_t>(expected_scales.size()), rows * k / kMxBlock) << case_name;
  for (const uint8_t poison : {uint8_t{0x00}, uint8_t{0xFF}}) {
    std::vector<uint8_t> packed(expected_packed.size(), poison), scales(expected_scales.size(), poison);
    quantize_mxfp4(w.data(), rows, k, packed.data(), scales.data());
    auto block = [&](size_t b) {  // b: flat block index = row * (k / 32) + block in row
      return fmt::format("rows={} k={} block {} (amax {}, expected scale byte {})", rows, k, b,
                         show(max_abs(w.data() + b * kMxBlock, kMxBlock)), expected_scales[b]);
    };
    EXPECT_TRUE(all_equal(case_name + " scales", expected_scales, scales, block));
    EXPECT_TRUE(all_equal(case_name + " packed", expected_packed, packed, [&](size_t j) {
      return fmt::format("elements {} {} in {}", show(w[2 * j]), show(w[2 * j + 1]),
                         block(2 * j / kMxBlock));
    }));
  }
}

INSTANTIATE_TEST_SUITE_P(
    Cases, QuantVectorsMxfp4Quantize,
    ::testing::ValuesIn(testvectors::checked_cases_starting_with("mxfp4_quantize_")),
    [](const auto& info) { return info.param; });

TEST(QuantVectorsMxfp4, Dequantize) {
  const auto shape = shape_of("mxfp4_dequantize", "packed");
  ASSERT_EQ(shape.size(), 2u);
  const int64_t rows = shape[0], k = shape[1] * 2;
  const auto packed = load<uint8_t>("mxfp4_dequantize", "packed");
  const auto scales = load<uint8_t>("mxfp4_dequantize", "scales");
  const auto expected = load<float>("mxfp4_dequantize", "expected");
  ASSERT_EQ(static_cast<int64_t>(scales.size()), rows * k / kMxBlock);
  std::vector<float> out(rows * k, -12345.0f);  // not a product e2m1 * 2^k
  dequantize_mxfp4(packed.data(), scales.data(), rows, k, out.data());
  EXPECT_TRUE(all_equal("mxfp4_dequantize", expected, out, [&](size_t i) {
    return fmt::format("packed byte {} element {} scale byte {}", show(packed[i / 2]), i % 2,
                       scales[i / kMxBlock]);
  }));
}

}  // namespace
}  // namespace moe_ep
