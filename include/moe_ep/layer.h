// The MoE layer: dispatch -> GEMM 1 -> clamped SwiGLU -> GEMM 2 -> combine (docs/spec.md §2–4).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "moe_ep/backend.h"
#include "moe_ep/desc.h"
#include "moe_ep/kernel_config.h"
#include "moe_ep/runtime.h"
#include "moe_ep/tensor.h"
#include "moe_ep/weights.h"

namespace moe_ep {

// Per-call tensors on the calling rank. T may be 0.
//   x             bf16 [T, H]                       when desc.quantize_input
//   a, a_scale    mxfp4: e4m3 [T, H], u8|e8m0 [T, H/32]            when !quantize_input
//                 nvfp4: u8 [T, H/2] packed e2m1, u8|e4m3 [T, H/16],
//   a_global      nvfp4: f32 [T] per-token global encode factor g (dequant = q * s / g)
//   topk_ids      i32 | i64 [T, K], global expert ids, -1 = skip the slot
//   topk_weights  f32 [T, K]
//   y             bf16 [T, H] (written for every row)
struct ForwardArgs {
  TensorView x;
  TensorView a, a_scale, a_global;
  TensorView topk_ids;
  TensorView topk_weights;
  TensorView y;
  void* stream = nullptr;  // cudaStream_t for CUDA layers; ignored on the CPU
};

// Sticky device-side error bits, raised by kernels instead of a host sync (docs/spec.md §11).
enum ErrorFlag : uint32_t {
  kErrorExpertIdOutOfRange = 1u << 0,  // a topk id outside [-1, E) was treated as skipped
  // The device routing stage (router / hash / EPLB before a layer): non-finite logits, a token
  // id outside [0, vocab) or a hash-table id outside [0, L); such slots become -1.
  kErrorRouterInput = 1u << 1,
};

struct LayerInfo {
  MoeDesc desc;
  std::string implementation;  // "cpu", "cuda-sm90"
  Device device;
  int64_t num_local_experts = 0;
  SelectedConfig config;  // what the implementation selected and its launch plan
  std::string notes;      // load-time findings, e.g. the MXFP4 -> FP8 exactness window
};

class Layer {
 public:
  class Impl;

  // Validates everything before allocating; weights are copied/converted at load. The
  // implementation selects its kernel configuration once, here (Layer::info().config), taking
  // what `overrides` pins. MOE_EP_PRINT_CONFIG=1 prints it to stderr.
  static std::unique_ptr<Layer> create(std::shared_ptr<Runtime> runtime, const MoeDesc& desc,
                                       const WeightPack& weights,
                                       const KernelOverrides& overrides = {});
  ~Layer();
  Layer(const Layer&) = delete;
  Layer& operator=(const Layer&) = delete;

  void forward(const ForwardArgs& args);

  // Computes only the listed output rows (others untouched). CPU layers only; used to check
  // large GPU runs cheaply.
  void forward_rows(const ForwardArgs& args, std::span<const int64_t> rows);

  // Replaces the weights of one physical expert in place (EPLB). physical_expert is a global id
  // owned by this rank, [rank*E_loc, (rank+1)*E_loc); one_expert holds that expert alone (the
  // WeightPack layout with E_loc = 1, any format the family accepts). Not collective; must not
  // run while a forward of this layer runs.
  void replace_expert_weights(int64_t physical_expert, const WeightPack& one_expert);

  // Reads (and with clear, resets) the sticky error bits. Synchronizes with the device.
  uint32_t read_error_flags(bool clear = true);
  // Throws kDevice naming each raised flag; clears them.
  void check_error_flags();

  const LayerInfo& info() const;
  const MoeDesc& desc() const { return info().desc; }
  Runtime& runtime() const;

 private:
  explicit Layer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace moe_ep
