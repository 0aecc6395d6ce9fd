// Q8 (FP8 e4m3 + UE8M0 per 32, docs/spec.md §3) against the numpy implementation of
// tests/python/gen_format_vectors.py, byte for byte.
#include <gtest/gtest.h>

#include "core/test_formats_vector_file.h"
#include "moe_ep/formats.h"
#include "moe_ep/quant.h"

namespace moe_ep {
namespace {

using testvectors::all_equal;
using testvectors::load;
using testvectors::show;

TEST(QuantVectorsQ8, ScaleByte) {
  const auto amax = load<float>("q8_scale_byte", "input");
  const auto expected = load<uint8_t>("q8_scale_byte", "expected");
  std::vector<uint8_t> actual(amax.size());
  for (size_t i = 0; i < amax.size(); ++i) actual[i] = q8_scale_byte(amax[i]);
  EXPECT_TRUE(all_equal("q8_scale_byte", expected, actual,
                        [&](size_t i) { return "amax " + show(amax[i]); }));
}

class QuantVectorsQ8Quantize : public ::testing::TestWithParam<std::string> {};

TEST_P(QuantVectorsQ8Quantize, MatchesReference) {
  const std::string& case_name = GetParam();
  const auto v = load<float>(case_name, "input");
  const auto expected_q = load<uint8_t>(case_name, "q");
  const auto expected_scales = load<uint8_t>(case_name, "scales");
  const int64_t n = static_cast<int64_t>(v.size());
  ASSERT_EQ(n % kMxBlock, 0) << case_name;
  ASSERT_EQ(expected_q.size(), v.size()) << case_name;
  ASSERT_EQ(static_cast<int64_t>(expected_scales.size()), n / kMxBlock) << case_name;
  // Two poison values: a byte the quantizer does not write differs from one of them.
  for (const uint8_t poison : {uint8_t{0x00}, uint8_t{0xFF}}) {
    std::vector<uint8_t> q(v.size(), poison), scales(expected_scales.size(), poison);
    quantize_q8(v.data(), n, q.data(), scales.data());
    auto block = [&](size_t b) {
      return fmt::format("block {} (amax {}, expected scale byte {})", b,
                         show(max_abs(v.data() + b * kMxBlock, kMxBlock)), expected_scales[b]);
    };
    EXPECT_TRUE(all_equal(case_name + " scales", expected_scales, scales, block));
    EXPECT_TRUE(all_equal(case_name + " q", expected_q, q, [&](size_t i) {
      return "v " + show(v[i]) + " in " + block(i / kMxBlock);
    }));
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, QuantVectorsQ8Quantize,
                         ::testing::ValuesIn(testvectors::checked_cases_starting_with("q8_quantize_")),
                         [](const auto& info) { return info.param; });

TEST(QuantVectorsQ8, Dequantize) {
  const auto q = load<uint8_t>("q8_dequantize", "q");
  const auto scales = load<uint8_t>("q8_dequantize", "scales");
  const auto expected = load<float>("q8_dequantize", "expected");
  ASSERT_EQ(q.size(), scales.size() * kMxBlock);
  std::vector<float> out(q.size(), -12345.0f);  // not a product e4m3 * 2^k
  dequantize_q8(q.data(), scales.data(), static_cast<int64_t>(q.size()), out.data());
  EXPECT_TRUE(all_equal("q8_dequantize", expected, out, [&](size_t i) {
    return fmt::format("q {} scale byte {}", show(q[i]), scales[i / kMxBlock]);
  }, testvectors::SameBitsOrBothNaN{}));
}

}  // namespace
}  // namespace moe_ep
