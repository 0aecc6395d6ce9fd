// Element formats (formats.h) against ml_dtypes: every code point decoded, and encodes of
// random, tie, subnormal, saturating and special fp32 values (tests/python/gen_format_vectors.py).
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "core/test_formats_vector_file.h"
#include "moe_ep/formats.h"

namespace moe_ep {
namespace {

using testvectors::all_equal;
using testvectors::load;
using testvectors::SameBitsOrBothNaN;
using testvectors::show;

template <class Code, class Decode>
void check_decode(const std::string& case_name, size_t num_codes, Decode decode) {
  const auto codes = load<Code>(case_name, "input");
  const auto expected = load<float>(case_name, "expected");
  ASSERT_EQ(codes.size(), num_codes) << case_name << ": every code point must be listed";
  std::vector<float> actual(codes.size());
  for (size_t i = 0; i < codes.size(); ++i) actual[i] = decode(codes[i]);
  EXPECT_TRUE(all_equal(case_name, expected, actual,
                        [&](size_t i) { return "code " + show(codes[i]); }, SameBitsOrBothNaN{}));
}

TEST(FormatVectorsDecode, E4M3EveryCode) { check_decode<uint8_t>("e4m3_decode", 256, e4m3_to_float); }
TEST(FormatVectorsDecode, E2M1EveryCode) { check_decode<uint8_t>("e2m1_decode", 16, e2m1_to_float); }
TEST(FormatVectorsDecode, E8M0EveryCode) { check_decode<uint8_t>("e8m0_decode", 256, e8m0_to_float); }
TEST(FormatVectorsDecode, BF16EveryCode) {
  check_decode<uint16_t>("bf16_decode", 65536, bf16_to_float);
}

TEST(FormatVectorsDecode, E2M1HighNibbleIgnored) {
  const auto expected = load<float>("e2m1_decode", "expected");
  for (int byte = 0; byte < 256; ++byte)
    ASSERT_TRUE(testvectors::SameBits{}(e2m1_to_float(static_cast<uint8_t>(byte)),
                                        expected[byte & 0xF]))
        << "byte " << byte;
}

template <class Code, class Encode>
void check_encode(const std::string& case_name, Encode encode) {
  const auto input = load<float>(case_name, "input");
  const auto expected = load<Code>(case_name, "expected");
  ASSERT_FALSE(input.empty()) << case_name;
  std::vector<Code> actual(input.size());
  for (size_t i = 0; i < input.size(); ++i) actual[i] = encode(input[i]);
  EXPECT_TRUE(all_equal(case_name, expected, actual,
                        [&](size_t i) { return "input " + show(input[i]); }));
}

// One test per generator case <format>_encode_<category>.
class FormatVectorsEncode : public ::testing::TestWithParam<std::string> {};

TEST_P(FormatVectorsEncode, MatchesReference) {
  const std::string& case_name = GetParam();
  if (case_name.rfind("e4m3_", 0) == 0) {
    check_encode<uint8_t>(case_name, float_to_e4m3);
  } else if (case_name.rfind("e2m1_", 0) == 0) {
    check_encode<uint8_t>(case_name, float_to_e2m1);
  } else if (case_name.rfind("bf16_", 0) == 0) {
    check_encode<uint16_t>(case_name, float_to_bf16);
  } else {
    FAIL() << "no encoder for case " << case_name;
  }
}

std::vector<std::string> encode_cases() {
  std::vector<std::string> cases;
  for (const char* format : {"e4m3", "e2m1", "bf16"})
    for (const std::string& c : testvectors::checked_cases_starting_with(std::string(format) + "_encode_"))
      cases.push_back(c);
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Cases, FormatVectorsEncode, ::testing::ValuesIn(encode_cases()),
                         [](const auto& info) { return info.param; });

TEST(FormatVectorsBf16, RoundToBf16IsEncodeThenDecode) {
  const auto input = load<float>("bf16_encode_ties", "input");
  const auto expected = load<uint16_t>("bf16_encode_ties", "expected");
  std::vector<float> actual(input.size()), want(input.size());
  for (size_t i = 0; i < input.size(); ++i) {
    actual[i] = round_to_bf16(input[i]);
    want[i] = bf16_to_float(expected[i]);
  }
  EXPECT_TRUE(all_equal("round_to_bf16", want, actual,
                        [&](size_t i) { return "input " + show(input[i]); }));
}

TEST(FormatVectorsCeilLog2, MatchesFrexp) {
  const auto input = load<float>("ceil_log2", "input");
  const auto expected = load<int32_t>("ceil_log2", "expected");
  std::vector<int32_t> actual(input.size());
  for (size_t i = 0; i < input.size(); ++i) actual[i] = ceil_log2(input[i]);
  EXPECT_TRUE(all_equal("ceil_log2", expected, actual,
                        [&](size_t i) { return "input " + show(input[i]); }));
}

TEST(FormatVectorsManifest, EveryGeneratedCaseIsChecked) {
  const auto generated = testvectors::manifest_cases();
  const auto& checked = testvectors::checked_cases();
  const std::set<std::string> g(generated.begin(), generated.end()), c(checked.begin(), checked.end());
  for (const auto& name : g) EXPECT_TRUE(c.count(name)) << "generated case '" << name << "' is not checked";
  for (const auto& name : c) EXPECT_TRUE(g.count(name)) << "checked case '" << name << "' is not generated";
}

}  // namespace
}  // namespace moe_ep
