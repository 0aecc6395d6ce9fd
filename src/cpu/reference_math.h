// Scalar building blocks of the CPU reference (docs/spec.md §3–4).
//
// Every GEMM operand is decoded to fp32 exactly: MXFP4 weights e2m1 * 2^k, Q8 activations
// e4m3 * 2^k, NVFP4 weights and activations e2m1 * e4m3 (the global scales are applied to the
// dot product, not to the operands). Each product of two decoded operands is therefore exact in
// fp32, so a fused multiply-add gives the same result as a multiply and an add.
#pragma once

#include <cstdint>

namespace moe_ep::cpu {

// fp32 dot product of n elements (n % 16 == 0) in a fixed order: element i is added to partial
// sum i % 16, element by element; the 16 partial sums are then added pairwise
// (p[j] += p[j + 8], then p[j] += p[j + 4], p[j + 2], p[j + 1]).
float dot_fp32(const float* a, const float* b, int64_t n);

// out[r] = dot_fp32(a, b + r * stride, n) for r = 0..3, bit for bit.
void dot_fp32_x4(const float* a, const float* b, int64_t stride, int64_t n, float* out);

// Rows [row_begin, row_begin + num_rows) of a [rows, k] MXFP4 tensor (packed e2m1, E8M0 per 32)
// as fp32 values e2m1 * 2^(byte - 127) into out [num_rows, k]. Both FP4 decoders run 16 elements
// at a time with AVX2 where the CPU has it, with the scalar loop's bits.
void decode_mxfp4_rows(const uint8_t* packed, const uint8_t* scales, int64_t row_begin,
                       int64_t num_rows, int64_t k, float* out);

// The same for NVFP4 (e4m3 per 16): values e2m1 * block_scale, without the global scale.
void decode_nvfp4_rows(const uint8_t* packed, const uint8_t* scales, int64_t row_begin,
                       int64_t num_rows, int64_t k, float* out);

// out[r] = dot_fp32(a, row_begin + r decoded), r = 0..3, bit for bit, for four rows of an MXFP4 /
// NVFP4 tensor; with AVX2 the rows are decoded in registers and never stored (a weight row used
// by one activation row only).
void dot_mxfp4_rows_x4(const float* a, const uint8_t* packed, const uint8_t* scales, int64_t row_begin, int64_t k,
                       float* out);
void dot_nvfp4_rows_x4(const float* a, const uint8_t* packed, const uint8_t* scales, int64_t row_begin, int64_t k,
                       float* out);

// One Q8 activation row (e4m3 codes, E8M0 per 32) as fp32 values.
void decode_q8_row(const uint8_t* codes, const uint8_t* scales, int64_t n, float* out);

// Q8 of one row, decoded back: out[i] = e4m3(v[i] / s) * s (docs/spec.md §3 step 5). In place is fine.
void q8_roundtrip_row(const float* v, int64_t n, float* out);

// NVFP4 of one row with its own global encode factor g (docs/spec.md §4): out[i] = q[i] * s[i],
// the dequantized value being out[i] / g. Returns g. In place is fine.
float nvfp4_roundtrip_row(const float* v, int64_t n, float* out);

// Clamped SwiGLU of one gate/up pair (docs/spec.md §3 steps 3–4), fp32 with exact expf:
// gate = min(gate, c), up = clamp(up, -c, c), h = silu(gate) * up * weight.
float clamped_swiglu(float gate, float up, float clamp, float weight);

}  // namespace moe_ep::cpu
