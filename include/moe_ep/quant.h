// Quantization recipes of docs/spec.md §3–5, on host memory. These are the library's reference
// implementations: the CPU backend and the weight loaders use them, the CUDA kernels must
// reproduce them bit for bit (Q8) or within each recipe's tolerance. tests/core/test_quant_*
// check them byte for byte against an independent numpy + ml_dtypes implementation.
//
// Arithmetic: the power-of-two scales take ceil(log2(.)) of the exact real quotient amax / 448
// or amax / 6; the NVFP4 formulas are evaluated in fp32, left to right as written.
#pragma once

#include <cstdint>

#include "moe_ep/recipe.h"

namespace moe_ep {

inline constexpr int64_t kMxBlock = 32;  // elements per UE8M0 scale (MXFP4 weights, Q8)
inline constexpr int64_t kNvBlock = 16;  // elements per e4m3 scale (NVFP4)
inline constexpr float kE4M3Max = 448.0f;
inline constexpr float kE2M1Max = 6.0f;
inline constexpr float kQ8AmaxFloor = 1e-4f;
// The largest magnitude Q8 holds: 1.875 * 2^127 (e4m3's 1.875 times the largest E8M0 scale
// that keeps the product finite). A finite bf16 or fp32 value above it would round to 2^128,
// fp32 Inf, and the Infs of opposite signs in one dot product give NaN.
inline constexpr float kQ8MaxFinite = 0x1.ep+127f;

// ---- Q8: FP8 e4m3 with one UE8M0 scale per 32 elements (activations) ----
// amax floored at 1e-4; s = 2^ceil(log2(amax / 448)), byte clamped to [1, 254]. With the floor
// a finite amax gives a byte in [105, 247]; +Inf gives 254.
uint8_t q8_scale_byte(float amax);
// A finite v beyond +-kQ8MaxFinite saturates to +-kQ8MaxFinite; Inf and NaN pass unchanged.
// quantize_q8 applies it to every element (after the scale is chosen from the raw amax), so a
// finite input never quantizes to Inf.
float q8_saturate(float v);
// n % 32 == 0. q gets n e4m3 bytes, scales n / 32 E8M0 bytes.
void quantize_q8(const float* v, int64_t n, uint8_t* q, uint8_t* scales);
void dequantize_q8(const uint8_t* q, const uint8_t* scales, int64_t n, float* out);

// ---- MXFP4 weights: e2m1 with one UE8M0 scale per 32 elements along K ----
// s = 2^ceil(log2(amax / 6)) (byte clamped to [0, 254]; +Inf gives 254); an all-zero block,
// which the SPEC leaves open, gets byte 127 (s = 1).
uint8_t mxfp4_scale_byte(float amax);
// w: [rows, k] row-major, k % 32 == 0. packed: [rows, k / 2], scales: [rows, k / 32].
void quantize_mxfp4(const float* w, int64_t rows, int64_t k, uint8_t* packed, uint8_t* scales);
void dequantize_mxfp4(const uint8_t* packed, const uint8_t* scales, int64_t rows, int64_t k,
                      float* out);

// ---- NVFP4: e2m1 with one e4m3 scale per 16 elements and one fp32 global scale ----
// For a tensor of amax A the global encode factor is g = 448 * 6 / A (g = 1 when A == 0);
// checkpoints store its inverse as weight_scale_2. Block scale s = e4m3(g * amax_block / 6);
// q = e2m1_rne(clamp(v * g / s, ±6)) (q = 0 where s == 0); dequantized v ≈ q * s / g.
float nvfp4_global_encode(float amax);
// w: [rows, k] row-major, k % 16 == 0. packed: [rows, k / 2], scales: [rows, k / 16] e4m3.
void quantize_nvfp4(const float* w, int64_t rows, int64_t k, float global_encode,
                    uint8_t* packed, uint8_t* scales);
void dequantize_nvfp4(const uint8_t* packed, const uint8_t* scales, float global_encode,
                      int64_t rows, int64_t k, float* out);

// ---- NVFP4 activations: per-token dynamic global scale ----
// Each row r of v [rows, k] gets g_r = nvfp4_global_encode(amax of row r), written to
// global_encode[r]; the row is then quantized as above.
void quantize_nvfp4_rows(const float* v, int64_t rows, int64_t k, uint8_t* packed,
                         uint8_t* scales, float* global_encode);

// ---- The activation quantizer of a recipe (Q8 for mxfp4, NVFP4 per token for nvfp4) ----
// One row of k elements: codes [traits.code_bytes(k)], scales [traits.scale_count(k)], and for
// recipes with global scales its per-row encode factor in *global (unused otherwise).
void quantize_activation_row(Recipe recipe, const float* v, int64_t k, uint8_t* codes,
                             uint8_t* scales, float* global);

// max |v[i]|, 0 for n == 0; NaN elements are ignored (std::fmax).
float max_abs(const float* v, int64_t n);

}  // namespace moe_ep
