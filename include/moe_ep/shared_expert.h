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
#include <string>

#include "moe_ep/tensor.h"

namespace moe_ep {

// A shared expert that runs on one device. On the CPU, exactly the recipe above. On an SM90 GPU,
// on the caller's stream with no allocation or host synchronization per call (CUDA-graph
// capturable): decode-sized batches take dot-product kernels that match the recipe up to the
// last bit of an h element (the device's exp), larger ones tensor-core GEMMs whose fp32 sums
// have their own order (compared by the recipe's threshold, docs/spec.md §6).
class SharedExpert {
 public:
  class Impl;

  // w13 bf16 [2I, H], w2 bf16 [H, I], row-major, in host memory or on `device`; copied (values in
  // host memory are checked finite). H and I multiples of 16; clamp finite and >= 0 when given.
  // `device`: where it runs; a device kind whose backend has no shared expert (or a build without
  // one) gives kUnsupported with the reason. `max_tokens`: the most tokens one call takes, which
  // sizes the device scratch; a GPU needs it >= 1, the CPU takes 0 for no bound.
  static std::unique_ptr<SharedExpert> create(int64_t hidden_size, int64_t intermediate_size,
                                              std::optional<float> activation_clamp,
                                              const TensorView& w13, const TensorView& w2,
                                              Device device = Device::cpu(), int64_t max_tokens = 0);
  ~SharedExpert();
  SharedExpert(const SharedExpert&) = delete;
  SharedExpert& operator=(const SharedExpert&) = delete;

  int64_t hidden_size() const { return H_; }
  int64_t intermediate_size() const { return I_; }
  Device device() const { return device_; }
  int64_t max_tokens() const { return max_tokens_; }  // 0: no bound
  int64_t weight_bytes() const { return 3 * H_ * I_ * 2; }

  // x, out, y: bf16 [T, H] on the expert's device, T <= max_tokens when bounded. `stream` is the
  // cudaStream_t of a GPU expert (nullptr: the legacy default stream); the CPU ignores it.
  // out = o.
  void forward(const TensorView& x, const TensorView& out, void* stream = nullptr) const;
  // y = bf16(y + o), in place.
  void add_to(const TensorView& x, const TensorView& y, void* stream = nullptr) const;

  // What runs a call of `num_tokens` tokens ("dot products", "tensor cores", ...), for reports.
  std::string kernels(int64_t num_tokens) const;

 private:
  SharedExpert(std::unique_ptr<Impl> impl, int64_t H, int64_t I, Device device, int64_t max_tokens);
  void run(const TensorView& x, const TensorView& y, bool accumulate, void* stream) const;

  std::unique_ptr<Impl> impl_;
  int64_t H_, I_;
  Device device_;
  int64_t max_tokens_;
};

}  // namespace moe_ep
