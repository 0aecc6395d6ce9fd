// The routing stage before a layer (docs/spec.md §8–9): gate logits, or a hash layer's table, or
// ids routed elsewhere, in; the physical topk_ids and topk_weights that Layer::forward takes, out.
// One stage holds what stays between calls: the router's configuration, the EPLB placement and
// its load counters, and the sticky error flags.
//
//   router   route_deepseek_v4 (moe_ep/router.h): logits [T, L] -> logical ids and weights
//   remap    Eplb::remap (moe_ep/eplb.h): logical ids -> physical ids, recording the load
//   either or both; without a router the stage remaps the caller's logical_ids.
//
// Results are bitwise those of route_deepseek_v4 followed by Eplb::remap, on every device.
//
// On a CUDA device the stage is one kernel on args.stream: no host synchronization and no
// allocation per call, so it can be captured in a CUDA graph. Its placement and counters live in
// device memory sized at create(); set_placement() copies a new placement into the same buffers
// (a captured graph follows it) and the recording flag is a device word, so a replay records or
// not as the flag says when it runs. Bad data in device memory cannot be thrown from a kernel:
// non-finite logits, token ids outside [0, vocab) and table ids outside [0, L) make their slots
// -1 (skipped by the layer) and raise kErrorRouterInput (moe_ep/layer.h), read with
// read_error_flags() / check_error_flags(). On the CPU the same inputs throw kInvalidArgument
// naming the index, as route_deepseek_v4 does.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "moe_ep/eplb.h"
#include "moe_ep/router.h"
#include "moe_ep/tensor.h"

namespace moe_ep {

struct RoutingStageOptions {
  Device device = Device::cpu();
  int64_t num_logical = 0;                 // L: the router's num_experts, the placement's L
  int64_t top_k = 0;                       // K
  std::optional<RouterConfig> router;      // absent: remap only (RoutingArgs::logical_ids)
  std::optional<EplbPlacement> placement;  // absent: the ids stay logical
  int64_t max_replicas = 0;  // replica columns kept for set_placement(); 0: the placement's
};

// One call's tensors, all on the stage's device, row-major contiguous. T may be 0.
struct RoutingArgs {
  int64_t layer_idx = 0;    // hash layers: layer_idx < router->num_hash_layers
  TensorView logits;        // f32 | bf16 [T, L]                  (router)
  TensorView bias;          // f32 [L]; optional                  (router)
  TensorView token_ids;     // i32 | i64 [T]                      (hash layers)
  TensorView hash_table;    // i32 [vocab, K]; the CPU also takes i64    (hash layers)
  TensorView logical_ids;   // i32 | i64 [T, K]                   (remap only)
  TensorView topk_ids;      // out: i32 | i64 [T, K], physical when a placement is given
  TensorView topk_weights;  // out: f32 [T, K]                    (router)
  void* stream = nullptr;   // cudaStream_t on CUDA devices; ignored on the CPU
};

// The router's part of a call (route_deepseek_v4's arguments): the same views.
RouterArgs router_args(const RoutingArgs& args);

class RoutingStage {
 public:
  class Impl;

  // Validates the options (kInvalidArgument naming the field) and refuses a device this build
  // has no routing stage for (kUnsupported).
  static std::unique_ptr<RoutingStage> create(const RoutingStageOptions& options);
  ~RoutingStage();
  RoutingStage(const RoutingStage&) = delete;
  RoutingStage& operator=(const RoutingStage&) = delete;

  // Checks the arguments' dtypes, shapes and devices on the host (no tensor data is read on a
  // device), then routes.
  void route(const RoutingArgs& args);

  // Between calls (synchronizes the device): same L and E, max_replicas <= the capacity.
  void set_placement(const EplbPlacement& placement);
  // The load counters [E] count the slots routed to each physical expert while recording is on.
  void set_recording(bool on);
  std::vector<int64_t> counter_values() const;
  void reset_counters();

  // Reads (and with clear, resets) the sticky error bits; synchronizes with the device.
  uint32_t read_error_flags(bool clear = true);
  // Throws kDevice naming each raised flag; clears them.
  void check_error_flags();

  const RoutingStageOptions& options() const;  // placement: the current one
  bool has_router() const { return options().router.has_value(); }
  bool has_placement() const { return options().placement.has_value(); }
  int64_t num_physical() const;  // E: the placement's, else L

 private:
  explicit RoutingStage(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace moe_ep
