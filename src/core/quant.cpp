#include "moe_ep/quant.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "check.h"
#include "moe_ep/formats.h"

namespace moe_ep {

float max_abs(const float* v, int64_t n) {
  float m = 0.0f;
  for (int64_t i = 0; i < n; ++i) m = std::fmax(m, std::fabs(v[i]));
  return m;
}

namespace {

// ceil(log2(amax / divisor)) of the exact quotient, for finite amax > 0 and divisor 448 or 6.
// The double quotient of a float by either never rounds onto a power of two; the float quotient
// can, where it is an fp32 subnormal (amax / 6 just above 2^-127 rounds to 2^-127).
int ceil_log2_of_quotient(float amax, double divisor) {
  int e = 0;
  const double m = std::frexp(static_cast<double>(amax) / divisor, &e);  // m in [0.5, 1)
  return m == 0.5 ? e - 1 : e;
}

}  // namespace

uint8_t q8_scale_byte(float amax) {
  const float floored = std::fmax(amax, kQ8AmaxFloor);
  if (!std::isfinite(floored)) return 254;
  const int e = ceil_log2_of_quotient(floored, kE4M3Max);
  return static_cast<uint8_t>(std::clamp(e + 127, 1, 254));
}

float q8_saturate(float v) {
  const float a = std::fabs(v);
  return a > kQ8MaxFinite && a <= std::numeric_limits<float>::max() ? std::copysign(kQ8MaxFinite, v) : v;
}

void quantize_q8(const float* v, int64_t n, uint8_t* q, uint8_t* scales) {
  MOE_EP_CHECK(n % kMxBlock == 0, "Q8 row length {} is not a multiple of {}", n, kMxBlock);
  for (int64_t b = 0; b < n / kMxBlock; ++b) {
    const float* blk = v + b * kMxBlock;
    const uint8_t byte = q8_scale_byte(max_abs(blk, kMxBlock));
    const float s = e8m0_to_float(byte);
    scales[b] = byte;
    for (int64_t i = 0; i < kMxBlock; ++i) q[b * kMxBlock + i] = float_to_e4m3(q8_saturate(blk[i]) / s);
  }
}

void dequantize_q8(const uint8_t* q, const uint8_t* scales, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = e4m3_to_float(q[i]) * e8m0_to_float(scales[i / kMxBlock]);
}

uint8_t mxfp4_scale_byte(float amax) {
  if (amax == 0.0f) return 127;
  if (!std::isfinite(amax)) return 254;
  const int e = ceil_log2_of_quotient(amax, kE2M1Max);
  return static_cast<uint8_t>(std::clamp(e + 127, 0, 254));
}

void quantize_mxfp4(const float* w, int64_t rows, int64_t k, uint8_t* packed, uint8_t* scales) {
  MOE_EP_CHECK(k % kMxBlock == 0, "MXFP4 K = {} is not a multiple of {}", k, kMxBlock);
  const int64_t nb = k / kMxBlock;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t b = 0; b < nb; ++b) {
      const float* blk = w + r * k + b * kMxBlock;
      const uint8_t byte = mxfp4_scale_byte(max_abs(blk, kMxBlock));
      const float s = e8m0_to_float(byte);
      scales[r * nb + b] = byte;
      uint8_t* out = packed + (r * k + b * kMxBlock) / 2;
      for (int64_t i = 0; i < kMxBlock; i += 2)
        out[i / 2] = pack_e2m1(float_to_e2m1(blk[i] / s), float_to_e2m1(blk[i + 1] / s));
    }
  }
}

void dequantize_mxfp4(const uint8_t* packed, const uint8_t* scales, int64_t rows, int64_t k,
                      float* out) {
  const int64_t nb = k / kMxBlock;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < k; ++i) {
      const int64_t idx = r * k + i;
      out[idx] = e2m1_to_float(unpack_e2m1(packed[idx / 2], i)) *
                 e8m0_to_float(scales[r * nb + i / kMxBlock]);
    }
}

float nvfp4_global_encode(float amax) {
  if (amax == 0.0f) return 1.0f;
  const float g = kE4M3Max * kE2M1Max / amax;
  return std::isfinite(g) ? g : 1.0f;
}

namespace {

void quantize_nvfp4_row(const float* w, int64_t k, float g, uint8_t* packed, uint8_t* scales) {
  for (int64_t b = 0; b < k / kNvBlock; ++b) {
    const float* blk = w + b * kNvBlock;
    const uint8_t sbits = float_to_e4m3(g * max_abs(blk, kNvBlock) / kE2M1Max);
    const float s = e4m3_to_float(sbits);
    scales[b] = sbits;
    uint8_t* out = packed + b * kNvBlock / 2;
    auto code = [&](float v) {
      if (s == 0.0f) return float_to_e2m1(0.0f);
      return float_to_e2m1(std::clamp(v * g / s, -kE2M1Max, kE2M1Max));
    };
    for (int64_t i = 0; i < kNvBlock; i += 2) out[i / 2] = pack_e2m1(code(blk[i]), code(blk[i + 1]));
  }
}

}  // namespace

void quantize_nvfp4(const float* w, int64_t rows, int64_t k, float global_encode,
                    uint8_t* packed, uint8_t* scales) {
  MOE_EP_CHECK(k % kNvBlock == 0, "NVFP4 K = {} is not a multiple of {}", k, kNvBlock);
  for (int64_t r = 0; r < rows; ++r)
    quantize_nvfp4_row(w + r * k, k, global_encode, packed + r * k / 2, scales + r * k / kNvBlock);
}

void dequantize_nvfp4(const uint8_t* packed, const uint8_t* scales, float global_encode,
                      int64_t rows, int64_t k, float* out) {
  const int64_t nb = k / kNvBlock;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < k; ++i) {
      const int64_t idx = r * k + i;
      const float q = e2m1_to_float(unpack_e2m1(packed[idx / 2], i));
      out[idx] = q * e4m3_to_float(scales[r * nb + i / kNvBlock]) / global_encode;
    }
}

void quantize_nvfp4_rows(const float* v, int64_t rows, int64_t k, uint8_t* packed,
                         uint8_t* scales, float* global_encode) {
  MOE_EP_CHECK(k % kNvBlock == 0, "NVFP4 K = {} is not a multiple of {}", k, kNvBlock);
  for (int64_t r = 0; r < rows; ++r) {
    const float g = nvfp4_global_encode(max_abs(v + r * k, k));
    global_encode[r] = g;
    quantize_nvfp4_row(v + r * k, k, g, packed + r * k / 2, scales + r * k / kNvBlock);
  }
}

void quantize_activation_row(Recipe recipe, const float* v, int64_t k, uint8_t* codes,
                             uint8_t* scales, float* global) {
  switch (recipe) {
    case Recipe::kMxfp4: quantize_q8(v, k, codes, scales); return;
    case Recipe::kNvfp4: quantize_nvfp4_rows(v, 1, k, codes, scales, global); return;
  }
  MOE_EP_FAIL(ErrorCode::kInvalidArgument, "recipe = {} is not a known recipe",
              static_cast<int>(recipe));
}

}  // namespace moe_ep
