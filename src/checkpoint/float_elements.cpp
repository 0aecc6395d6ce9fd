#include "checkpoint/float_elements.h"

#include <cmath>
#include <cstring>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/check.h"
#include "moe_ep/formats.h"

namespace moe_ep::checkpoint {
namespace {

// [i0, i1, ...] of flat element `flat` of `t`.
std::string index_of(const CheckpointTensor& t, int64_t flat) {
  std::vector<int64_t> idx(t.shape.size());
  for (size_t d = t.shape.size(); d-- > 0;) {
    idx[d] = flat % t.shape[d];
    flat /= t.shape[d];
  }
  return fmt::format("[{}]", fmt::join(idx, ", "));
}

}  // namespace

bool is_float_dtype(std::string_view dtype) { return dtype == "BF16" || dtype == "F16" || dtype == "F32"; }

float f16_to_float(uint16_t h) {
  const int sign = h >> 15, exponent = (h >> 10) & 0x1F, mantissa = h & 0x3FF;
  float v;
  if (exponent == 0)
    v = std::ldexp(static_cast<float>(mantissa), -24);
  else if (exponent == 31)
    v = mantissa ? NAN : INFINITY;
  else
    v = std::ldexp(static_cast<float>(mantissa | 0x400), exponent - 25);
  return sign ? -v : v;
}

float float_element(const CheckpointTensor& t, int64_t i) {
  if (t.dtype == "F32") {
    float v;
    std::memcpy(&v, t.data + 4 * i, 4);
    return v;
  }
  uint16_t bits;
  std::memcpy(&bits, t.data + 2 * i, 2);
  return t.dtype == "BF16" ? bf16_to_float(bits) : f16_to_float(bits);
}

void copy_as_bf16(const CheckpointTensor& t, std::string_view role, int64_t begin, int64_t n,
                  uint16_t* dst) {
  MOE_EP_ASSERT(is_float_dtype(t.dtype));
  if (t.dtype == "BF16") std::memcpy(dst, t.data + 2 * begin, static_cast<size_t>(2 * n));
  for (int64_t i = 0; i < n; ++i) {
    if (t.dtype != "BF16") dst[i] = float_to_bf16(float_element(t, begin + i));
    if ((dst[i] & 0x7F80) == 0x7F80)
      MOE_EP_FAIL(ErrorCode::kInvalidArgument, "{}: tensor '{}' ({}): element {} = {}{}; expected "
                  "finite values", *t.file, t.name, role, index_of(t, begin + i),
                  float_element(t, begin + i), t.dtype == "BF16" ? "" : " (in bf16: not finite)");
  }
}

}  // namespace moe_ep::checkpoint
