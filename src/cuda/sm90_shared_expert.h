// The shared expert (moe_ep/shared_expert.h) on one GPU: bf16 weights in device memory, two
// kernels on the caller's stream (kernels/sm90_shared_expert.h), no allocation or host sync per
// call (CUDA-graph capturable). add_to fuses y = bf16(y + o) into the down projection's store.
// Decode (T < 64) takes the dot-product kernels, which match the CPU SharedExpert up to the last
// bf16 bit of an h element (expf vs std::exp); prefill takes the tensor-core kernels (fp32 sums
// in the tensor cores' order: within the recipe's threshold of the CPU). The expert engine runs
// it inside a layer; make_sm90_shared_expert is the public SharedExpert on a GPU.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>

#include "core/shared_expert_impl.h"
#include "moe_ep/tensor.h"

namespace moe_ep::cuda {

struct SharedExpertParams;  // kernels/sm90_shared_expert.h

class Sm90SharedExpert {
 public:
  enum class Way { kAuto, kDotProducts, kTensorCores };  // kernels/sm90_shared_expert.h
  // How the weights are kept on the device: row-major as given, or tiled for the dot-product
  // warps (shared_expert_tiled_index; H and I multiples of 256). kAuto: kSharedExpertTiledByDefault
  // where the sizes allow. Results are the same bits either way.
  enum class Layout { kAuto, kRowMajor, kTiled };
  // w13 bf16 [2I, H], w2 bf16 [H, I] in host memory or on this device (copied); H and I
  // multiples of 16. own_scratch: allocate h (max_tokens x I bf16) for forward / add_to; without
  // it only the forward that takes the caller's h runs (a layer's workspace, cuda/plan.h).
  Sm90SharedExpert(int64_t hidden_size, int64_t intermediate_size, std::optional<float> activation_clamp,
                   const TensorView& w13, const TensorView& w2, int64_t max_tokens, int device_index,
                   bool own_scratch = true, Layout layout = Layout::kAuto);
  ~Sm90SharedExpert();
  Sm90SharedExpert(const Sm90SharedExpert&) = delete;
  Sm90SharedExpert& operator=(const Sm90SharedExpert&) = delete;

  // Device bf16 [T, H] pointers, T <= max_tokens.
  void forward(const uint16_t* x, uint16_t* out, int64_t num_tokens, void* stream) const;
  void add_to(const uint16_t* x, uint16_t* y, int64_t num_tokens, void* stream) const;
  // out = o with the caller's h scratch: bf16 [T, I], T <= max_tokens.
  void forward(const uint16_t* x, uint16_t* out, uint16_t* h, int64_t num_tokens, void* stream) const;

  // Pins the kernels (tests, benchmarks); kTensorCores needs H % 128 == 0 and I % 64 == 0.
  void set_way(Way way);
  bool uses_tensor_cores(int64_t num_tokens) const;
  bool tiled() const { return tiled_; }

  int64_t weight_bytes() const { return 3 * H_ * I_ * 2; }
  int64_t hidden_size() const { return H_; }
  int64_t intermediate_size() const { return I_; }

 private:
  void run(const uint16_t* x, uint16_t* y, uint16_t* h, int64_t T, bool accumulate, void* stream) const;
  SharedExpertParams params(int64_t num_tokens) const;
  struct Buffers;
  int64_t H_, I_, max_tokens_;
  float clamp_;
  int device_index_;
  bool tiled_ = false;
  Way way_ = Way::kAuto;
  std::unique_ptr<Buffers> buf_;
};

// SharedExpert::create on a CUDA device (sm90_backend.cpp registers it): its own h scratch for
// max_tokens tokens, the kernels' own choice of way and layout.
std::unique_ptr<SharedExpert::Impl> make_sm90_shared_expert(const SharedExpertRequest& request);

}  // namespace moe_ep::cuda
