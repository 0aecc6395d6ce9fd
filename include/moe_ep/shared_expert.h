// The optional shared expert (docs/spec.md §6): one dense SwiGLU expert that every token passes
// through, with the routed experts' clamp; its output is added to the layer's y.
//
// Weights bf16, K-major like the routed experts: w13 [2I, H] (rows [0, I) gate, [I, 2I) up),
// w2 [H, I]; I is the shared expert's own intermediate size. Precision recipe, per token:
//   1. gu   = bf16(x . W13^T)               bf16 operands widened exactly to fp32, fp32 dot
//   2. gate = min(gu[:I], c), up = clamp(gu[I:], -c, c)        (c absent = +inf)
//   3. h    = bf16(silu(gate) * up)         fp32 with exact exp, then rounded to bf16
//   4. o    = bf16(h . W2^T)                fp32 dot
//   5. add_to: y = bf16(fp32(y) + fp32(o))
// Every fp32 dot product of n terms adds term i into partial sum i % 16, then folds the 16
// partial sums pairwise (p[j] += p[j+8], p[j+4], p[j+2], p[j+1]); products of two bf16 values
// are exact in fp32, so the result depends on this order only.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "moe_ep/tensor.h"

namespace moe_ep {

class SharedExpert {
 public:
  // w13 bf16 [2I, H], w2 bf16 [H, I], host memory; copied. H and I multiples of 16; clamp
  // finite and >= 0 when given.
  static std::unique_ptr<SharedExpert> create(int64_t hidden_size, int64_t intermediate_size,
                                              std::optional<float> activation_clamp,
                                              const TensorView& w13, const TensorView& w2);

  int64_t hidden_size() const { return H_; }
  int64_t intermediate_size() const { return I_; }

  // out bf16 [T, H] = o for x bf16 [T, H].
  void forward(const TensorView& x, const TensorView& out) const;
  // y bf16 [T, H] = bf16(y + o), in place.
  void add_to(const TensorView& x, const TensorView& y) const;

 private:
  SharedExpert(int64_t H, int64_t I, float clamp, std::vector<float> w13, std::vector<float> w2)
      : H_(H), I_(I), clamp_(clamp), w13_(std::move(w13)), w2_(std::move(w2)) {}
  void run(const TensorView& x, const TensorView& y, bool accumulate) const;

  int64_t H_, I_;
  float clamp_;
  std::vector<float> w13_, w2_;  // widened bf16 values
};

}  // namespace moe_ep
