#include "cpu/reference_math.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <limits>
#include <vector>

#include "moe_ep/formats.h"
#include "moe_ep/quant.h"

#if defined(__x86_64__)
#include <immintrin.h>
#define MOE_EP_CPU_AVX2_DECODE 1
#endif

namespace moe_ep::cpu {
namespace {

constexpr int kLanes = 16;

// dot_fp32's last step on its 16 partial sums: added pairwise (p[j] += p[j + 8], then + 4, + 2,
// + 1); the result is p[0].
inline float add_partial_sums(float* p) {
  for (int width = kLanes / 2; width >= 1; width /= 2)
    for (int j = 0; j < width; ++j) p[j] += p[j + width];
  return p[0];
}

// e2m1 values of both nibbles of a byte: {low (even element), high (odd element)}.
struct E2M1PairTable {
  std::array<std::array<float, 2>, 256> pair;
  E2M1PairTable() {
    for (int b = 0; b < 256; ++b)
      pair[b] = {e2m1_to_float(static_cast<uint8_t>(b & 0xF)),
                 e2m1_to_float(static_cast<uint8_t>(b >> 4))};
  }
};
const E2M1PairTable kE2M1Pairs;

struct ByteTable {
  std::array<float, 256> value;
  explicit ByteTable(float (*decode)(uint8_t)) {
    for (int b = 0; b < 256; ++b) value[b] = decode(static_cast<uint8_t>(b));
  }
};
const ByteTable kE8M0(&e8m0_to_float);
const ByteTable kE4M3(&e4m3_to_float);

#if MOE_EP_CPU_AVX2_DECODE
// e2m1 values of codes 0..15; the AVX2 decode permutes the first 8 and takes the sign from bit 3,
// which holds where codes 8..15 are codes 0..7 with the sign bit set (sign_symmetric).
struct E2M1Table {
  std::array<float, 16> value;
  bool sign_symmetric = true;
  E2M1Table() {
    for (int c = 0; c < 16; ++c) value[c] = e2m1_to_float(static_cast<uint8_t>(c));
    for (int c = 0; c < 8; ++c)
      sign_symmetric = sign_symmetric && std::bit_cast<uint32_t>(value[c + 8]) ==
                                             (std::bit_cast<uint32_t>(value[c]) | 0x80000000u);
  }
};
const E2M1Table kE2M1;

// A static initializer may run before libgcc's own, so it initializes the feature bits itself.
const bool kHasAvx2 = [] {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") != 0 && kE2M1.sign_symmetric;
}();

// The 16 elements of 8 code bytes (nibble i of each 4-byte word is element i: byte j's low nibble
// is element 2j, its high nibble 2j + 1) as the scalar loop below gives them: each code's
// magnitude from the same table (codes 0..7, one permute), its sign bit from bit 3 (the table's
// codes 8..15 are the negated 0..7, -0 for 8), times the block's scale by one multiply in the same
// operand order, so every element has the scalar loop's bits. The word is broadcast from memory
// and shifted per lane, so a round of 8 elements takes one shuffle. Elements 0..7 in first, 8..15
// in second.
struct Fp4x16Avx2 {
  __m256 magnitudes;
  __m256i shifts, nibble, sign;
  __attribute__((target("avx2"))) Fp4x16Avx2()
      : magnitudes(_mm256_loadu_ps(kE2M1.value.data())),
        shifts(_mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28)),
        nibble(_mm256_set1_epi32(0xF)),
        sign(_mm256_set1_epi32(static_cast<int>(0x80000000u))) {}
  __attribute__((target("avx2"))) void decode(const uint8_t* c, __m256 scale, __m256& first,
                                              __m256& second) const {
    first = value(c, scale);
    second = value(c + 4, scale);
  }
  __attribute__((target("avx2"))) __m256 value(const uint8_t* word, __m256 scale) const {
    int32_t w;
    __builtin_memcpy(&w, word, sizeof(w));
    const __m256i e = _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(w), shifts), nibble);
    const __m256 v = _mm256_xor_ps(_mm256_permutevar8x32_ps(magnitudes, e),
                                   _mm256_castsi256_ps(_mm256_and_si256(_mm256_slli_epi32(e, 28), sign)));
    return _mm256_mul_ps(v, scale);
  }
};

template <int64_t kBlock>
__attribute__((target("avx2"))) void decode_fp4_blocks_avx2(const uint8_t* codes, const uint8_t* s,
                                                            const ByteTable& scale_table,
                                                            int64_t num_blocks, float* out) {
  static_assert(kBlock % 16 == 0, "whole rounds of 8 bytes");
  const Fp4x16Avx2 fp4;
  for (int64_t b = 0; b < num_blocks; ++b) {
    const __m256 scale = _mm256_set1_ps(scale_table.value[s[b]]);
    for (int64_t i = 0; i < kBlock; i += 16) {
      __m256 first, second;
      fp4.decode(codes + (b * kBlock + i) / 2, scale, first, second);
      _mm256_storeu_ps(out + b * kBlock + i, first);
      _mm256_storeu_ps(out + b * kBlock + i + 8, second);
    }
  }
}

// dot_fp32_x4 of a with four consecutive FP4 rows decoded on the fly: the decoded values and the
// 16 partial sums of each row are those of decoding the rows and calling dot_fp32.
template <int64_t kBlock>
__attribute__((target("avx2"))) void decode_dot_x4_avx2(const float* a, const uint8_t* codes, const uint8_t* s,
                                                        const ByteTable& scale_table, int64_t k, float* out) {
  const Fp4x16Avx2 fp4;
  __m256 p[4][2];
  for (auto& row : p) row[0] = row[1] = _mm256_setzero_ps();
  for (int64_t i = 0; i < k; i += 16) {
    const __m256 a0 = _mm256_loadu_ps(a + i), a1 = _mm256_loadu_ps(a + i + 8);
    for (int r = 0; r < 4; ++r) {
      __m256 w0, w1;
      fp4.decode(codes + (r * k + i) / 2, _mm256_set1_ps(scale_table.value[s[(r * k + i) / kBlock]]), w0, w1);
      p[r][0] = _mm256_add_ps(p[r][0], _mm256_mul_ps(a0, w0));
      p[r][1] = _mm256_add_ps(p[r][1], _mm256_mul_ps(a1, w1));
    }
  }
  for (int r = 0; r < 4; ++r) {
    float q[kLanes];
    _mm256_storeu_ps(q, p[r][0]);
    _mm256_storeu_ps(q + 8, p[r][1]);
    out[r] = add_partial_sums(q);
  }
}
#endif

// num_rows x k e2m1 elements, one scale per `block` elements along k.
template <int64_t kBlock>
void decode_fp4_rows(const uint8_t* packed, const uint8_t* scales, const ByteTable& scale_table,
                     int64_t row_begin, int64_t num_rows, int64_t k, float* out) {
  const int64_t num_blocks = num_rows * k / kBlock;
  const uint8_t* codes = packed + row_begin * k / 2;
  const uint8_t* s = scales + row_begin * k / kBlock;
#if MOE_EP_CPU_AVX2_DECODE
  if (kHasAvx2) return decode_fp4_blocks_avx2<kBlock>(codes, s, scale_table, num_blocks, out);
#endif
  for (int64_t b = 0; b < num_blocks; ++b) {
    const float scale = scale_table.value[s[b]];
    const uint8_t* c = codes + b * kBlock / 2;
    float* o = out + b * kBlock;
    for (int64_t i = 0; i < kBlock / 2; ++i) {
      const auto& pair = kE2M1Pairs.pair[c[i]];
      o[2 * i] = pair[0] * scale;
      o[2 * i + 1] = pair[1] * scale;
    }
  }
}

}  // namespace

// The AVX2 clone computes the same 16 partial sums in 8-wide registers: no reassociation and no
// contraction (FMA is not enabled), so every clone gives the same bits.
// ThreadSanitizer instruments the ifunc resolver that target_clones emits; the resolver runs
// during relocation, before the TSan runtime is up, and the program crashes at load. TSan builds
// keep the default clone only.
#if defined(__SANITIZE_THREAD__)
#define MOE_EP_DOT_CLONES
#else
#define MOE_EP_DOT_CLONES __attribute__((target_clones("avx2", "default")))
#endif
MOE_EP_DOT_CLONES
float dot_fp32(const float* a, const float* b, int64_t n) {
  float p[kLanes] = {};
  for (int64_t i = 0; i < n; i += kLanes)
    for (int j = 0; j < kLanes; ++j) p[j] += a[i + j] * b[i + j];
  return add_partial_sums(p);
}

// Four rows at once: the same 16 partial sums per row in the same order (lanes 0..7 of a row's
// first vector are partial sums 0..7, of its second 8..15), so each result has dot_fp32's bits;
// the four rows' sums are independent, which keeps more additions in flight than one row's 16 can.
MOE_EP_DOT_CLONES
void dot_fp32_x4(const float* a, const float* b, int64_t stride, int64_t n, float* out) {
  typedef float Vec8 __attribute__((vector_size(32)));
  Vec8 p[4][2] = {}, a0, a1, w0, w1;
  for (int64_t i = 0; i < n; i += kLanes) {
    __builtin_memcpy(&a0, a + i, sizeof(Vec8));
    __builtin_memcpy(&a1, a + i + 8, sizeof(Vec8));
    for (int r = 0; r < 4; ++r) {
      __builtin_memcpy(&w0, b + r * stride + i, sizeof(Vec8));
      __builtin_memcpy(&w1, b + r * stride + i + 8, sizeof(Vec8));
      p[r][0] += a0 * w0;
      p[r][1] += a1 * w1;
    }
  }
  for (int r = 0; r < 4; ++r) {
    float q[kLanes];
    __builtin_memcpy(q, &p[r][0], sizeof(p[r][0]));
    __builtin_memcpy(q + 8, &p[r][1], sizeof(p[r][1]));
    out[r] = add_partial_sums(q);
  }
}

void decode_mxfp4_rows(const uint8_t* packed, const uint8_t* scales, int64_t row_begin,
                       int64_t num_rows, int64_t k, float* out) {
  decode_fp4_rows<kMxBlock>(packed, scales, kE8M0, row_begin, num_rows, k, out);
}

void decode_nvfp4_rows(const uint8_t* packed, const uint8_t* scales, int64_t row_begin,
                       int64_t num_rows, int64_t k, float* out) {
  decode_fp4_rows<kNvBlock>(packed, scales, kE4M3, row_begin, num_rows, k, out);
}

namespace {

template <int64_t kBlock>
void dot_fp4_rows_x4(const float* a, const uint8_t* packed, const uint8_t* scales, const ByteTable& scale_table,
                     int64_t row_begin, int64_t k, float* out) {
#if MOE_EP_CPU_AVX2_DECODE
  if (kHasAvx2)
    return decode_dot_x4_avx2<kBlock>(a, packed + row_begin * k / 2, scales + row_begin * k / kBlock, scale_table,
                                      k, out);
#endif
  thread_local std::vector<float> rows;
  rows.resize(static_cast<size_t>(4 * k));
  decode_fp4_rows<kBlock>(packed, scales, scale_table, row_begin, 4, k, rows.data());
  dot_fp32_x4(a, rows.data(), k, k, out);
}

}  // namespace

void dot_mxfp4_rows_x4(const float* a, const uint8_t* packed, const uint8_t* scales, int64_t row_begin, int64_t k,
                       float* out) {
  dot_fp4_rows_x4<kMxBlock>(a, packed, scales, kE8M0, row_begin, k, out);
}

void dot_nvfp4_rows_x4(const float* a, const uint8_t* packed, const uint8_t* scales, int64_t row_begin, int64_t k,
                       float* out) {
  dot_fp4_rows_x4<kNvBlock>(a, packed, scales, kE4M3, row_begin, k, out);
}

void decode_q8_row(const uint8_t* codes, const uint8_t* scales, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = kE4M3.value[codes[i]] * kE8M0.value[scales[i / kMxBlock]];
}

void q8_roundtrip_row(const float* v, int64_t n, float* out) {
  thread_local std::vector<uint8_t> codes, scales;
  codes.resize(n);
  scales.resize(n / kMxBlock);
  quantize_q8(v, n, codes.data(), scales.data());
  decode_q8_row(codes.data(), scales.data(), n, out);
}

float nvfp4_roundtrip_row(const float* v, int64_t n, float* out) {
  thread_local std::vector<uint8_t> packed, scales;
  packed.resize(n / 2);
  scales.resize(n / kNvBlock);
  float g = 0.0f;
  quantize_nvfp4_rows(v, 1, n, packed.data(), scales.data(), &g);
  decode_nvfp4_rows(packed.data(), scales.data(), 0, 1, n, out);
  return g;
}

float clamped_swiglu(float gate, float up, float clamp, float weight) {
  gate = std::min(gate, clamp);
  up = std::clamp(up, -clamp, clamp);
  // silu(-inf) is its limit, -0 (the formula gives -inf / inf = NaN): a GEMM 1 sum that
  // overflowed fp32 must not turn the row into NaN.
  const float silu = gate == -std::numeric_limits<float>::infinity() ? -0.0f : gate / (1.0f + std::exp(-gate));
  return silu * up * weight;
}

}  // namespace moe_ep::cpu
