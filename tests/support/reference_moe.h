// An independent float64 model of the layer (docs/spec.md §3–4), one token at a time, written
// without any moe_ep library code: its own decoders and quantizers in double precision.
//
// Rounding::kBf16 rounds gu, o_k and y to bf16 where the recipe does (so the CPU backend should
// match it up to rare rounding-boundary flips); Rounding::kNone keeps float64 everywhere except
// the recipe's quantizers (Q8 / NVFP4 of x and h, and the weight formats), which define the
// recipe.
#pragma once

#include <cstdint>
#include <vector>

#include "support/layer_problem.h"

namespace moe_ep::testsupport {

namespace ref {
double e2m1(uint8_t nibble);
double e4m3(uint8_t byte);   // NaN for 0x7F / 0xFF
double e8m0(uint8_t byte);   // 2^(byte - 127)
double bf16(uint16_t bits);
double round_bf16(double v);    // nearest even
double round_e4m3(double v);    // nearest even, saturating at 448
double round_e2m1(double v);    // nearest even, saturating at 6
}  // namespace ref

class ReferenceModel {
 public:
  enum class Rounding { kNone, kBf16 };

  // Dequantizes the weights in the family's format (requantizing BF16/MXFP4 as the family
  // prescribes) into [E, 2I, H] and [E, H, I] doubles.
  ReferenceModel(const Problem& p, const WeightSet& w);

  std::vector<double> token(const Inputs& in, int64_t t, Rounding rounding) const;  // [H]
  std::vector<double> forward(const Inputs& in, Rounding rounding) const;           // [T, H]

 private:
  std::vector<double> activation(const Inputs& in, int64_t t) const;  // dequantized a, [H]
  std::vector<double> quantize_h(const std::vector<double>& h) const;  // Q8 / NVFP4, dequantized

  Problem p_;
  std::vector<double> w13_, w2_;
};

}  // namespace moe_ep::testsupport
