// NVFP4 weight quantize/dequantize and per-row activation quantization (e2m1 + e4m3 per 16 +
// fp32 global, docs/spec.md §4) against the numpy implementation of
// tests/python/gen_format_vectors.py, byte for byte.
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

TEST(QuantVectorsNvfp4, GlobalEncode) {
  const auto amax = load<float>("nvfp4_global_encode", "input");
  const auto expected = load<float>("nvfp4_global_encode", "expected");
  std::vector<float> actual(amax.size());
  for (size_t i = 0; i < amax.size(); ++i) actual[i] = nvfp4_global_encode(amax[i]);
  EXPECT_TRUE(all_equal("nvfp4_global_encode", expected, actual,
                        [&](size_t i) { return "amax " + show(amax[i]); }));
}

struct Nvfp4Case {
  std::string name;
  int64_t rows = 0, k = 0;
  std::vector<float> input, global_encode;
  std::vector<uint8_t> packed, scales;
};

Nvfp4Case load_case(const std::string& name) {
  Nvfp4Case c;
  c.name = name;
  const auto shape = shape_of(name, "input");
  if (shape.size() != 2) throw std::runtime_error(name + ": input is not 2-D");
  c.rows = shape[0];
  c.k = shape[1];
  c.input = load<float>(name, "input");
  c.global_encode = load<float>(name, "global_encode");
  c.packed = load<uint8_t>(name, "packed");
  c.scales = load<uint8_t>(name, "scales");
  if (static_cast<int64_t>(c.packed.size()) != c.rows * c.k / 2 ||
      static_cast<int64_t>(c.scales.size()) != c.rows * c.k / kNvBlock)
    throw std::runtime_error(name + ": packed / scales sizes do not match the input");
  return c;
}

// Compares the quantizer's packed codes and block scales with the case's.
void expect_same_codes(const Nvfp4Case& c, const std::vector<uint8_t>& packed,
                       const std::vector<uint8_t>& scales) {
  const bool per_row = c.global_encode.size() > 1;
  auto block = [&](size_t b) {
    const float g = c.global_encode[per_row ? b * kNvBlock / c.k : 0];
    return fmt::format("rows={} k={} block {} (amax {}, g {}, expected scale {})", c.rows, c.k, b,
                       show(max_abs(c.input.data() + b * kNvBlock, kNvBlock)), show(g),
                       show(c.scales[b]));
  };
  EXPECT_TRUE(all_equal(c.name + " scales", c.scales, scales, block));
  EXPECT_TRUE(all_equal(c.name + " packed", c.packed, packed, [&](size_t j) {
    return fmt::format("elements {} {} in {}", show(c.input[2 * j]), show(c.input[2 * j + 1]),
                       block(2 * j / kNvBlock));
  }));
}

class QuantVectorsNvfp4Quantize : public ::testing::TestWithParam<std::string> {};

TEST_P(QuantVectorsNvfp4Quantize, MatchesReference) {
  const Nvfp4Case c = load_case(GetParam());
  ASSERT_EQ(c.global_encode.size(), 1u) << c.name;
  const float g = c.global_encode[0];
  if (c.name != "nvfp4_quantize_saturating") {  // that case takes a g unrelated to its amax
    const float amax = max_abs(c.input.data(), static_cast<int64_t>(c.input.size()));
    EXPECT_TRUE(testvectors::SameBits{}(nvfp4_global_encode(amax), g))
        << c.name << ": amax " << show(amax) << " expected g " << show(g) << ", got "
        << show(nvfp4_global_encode(amax));
  }
  for (const uint8_t poison : {uint8_t{0x00}, uint8_t{0xFF}}) {
    std::vector<uint8_t> packed(c.packed.size(), poison), scales(c.scales.size(), poison);
    quantize_nvfp4(c.input.data(), c.rows, c.k, g, packed.data(), scales.data());
    expect_same_codes(c, packed, scales);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Cases, QuantVectorsNvfp4Quantize,
    ::testing::ValuesIn(testvectors::checked_cases_starting_with("nvfp4_quantize_")),
    [](const auto& info) { return info.param; });

TEST(QuantVectorsNvfp4, QuantizeRows) {
  const Nvfp4Case c = load_case("nvfp4_rows");
  ASSERT_EQ(static_cast<int64_t>(c.global_encode.size()), c.rows);
  for (const uint8_t poison : {uint8_t{0x00}, uint8_t{0xFF}}) {
    std::vector<uint8_t> packed(c.packed.size(), poison), scales(c.scales.size(), poison);
    std::vector<float> g(c.rows, -12345.0f);
    quantize_nvfp4_rows(c.input.data(), c.rows, c.k, packed.data(), scales.data(), g.data());
    EXPECT_TRUE(all_equal(c.name + " global_encode", c.global_encode, g, [&](size_t r) {
      return fmt::format("row {} (amax {})", r, show(max_abs(c.input.data() + r * c.k, c.k)));
    }));
    expect_same_codes(c, packed, scales);
  }
}

TEST(QuantVectorsNvfp4, Dequantize) {
  const auto shape = shape_of("nvfp4_dequantize", "packed");
  ASSERT_EQ(shape.size(), 2u);
  const int64_t rows = shape[0], k = shape[1] * 2;
  const auto packed = load<uint8_t>("nvfp4_dequantize", "packed");
  const auto scales = load<uint8_t>("nvfp4_dequantize", "scales");
  const auto g = load<float>("nvfp4_dequantize", "global_encode");
  const auto expected = load<float>("nvfp4_dequantize", "expected");
  ASSERT_EQ(g.size(), 1u);
  ASSERT_EQ(static_cast<int64_t>(scales.size()), rows * k / kNvBlock);
  std::vector<float> out(rows * k, -12345.0f);
  dequantize_nvfp4(packed.data(), scales.data(), g[0], rows, k, out.data());
  EXPECT_TRUE(all_equal("nvfp4_dequantize", expected, out, [&](size_t i) {
    return fmt::format("packed byte {} element {} scale {} g {}", show(packed[i / 2]), i % 2,
                       show(scales[i / kNvBlock]), show(g[0]));
  }));
}

}  // namespace
}  // namespace moe_ep
