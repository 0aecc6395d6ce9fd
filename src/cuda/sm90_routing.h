// The routing stage on one GPU, before a layer's dispatch (kernels/sm90_route.h): the DeepSeek V4
// router or a hash layer's table, the EPLB remap and the load counters, in one kernel on the
// caller's stream (no host sync, no allocation: CUDA-graph capturable).
//
// DeviceEplb holds the placement and the counters in device memory, sized once: a new
// placement with the same L, E and at most the capacity's replicas per expert is copied into the
// same buffers (a captured graph keeps working, and follows it), and the recording flag is a
// device word the kernel reads, so a replay of one graph records or not as the flag says.
// Results are bitwise those of the CPU router (route_deepseek_v4) and Eplb::remap.
//
// This header includes no CUDA header (the CLI uses it).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "moe_ep/eplb.h"
#include "moe_ep/router.h"

namespace moe_ep::cuda {

class DeviceEplb {
 public:
  // Buffers for `placement`'s L and E and max(max_replicas, placement.max_replicas) columns.
  DeviceEplb(const EplbPlacement& placement, int device_index, int64_t max_replicas = 0);
  ~DeviceEplb();
  DeviceEplb(const DeviceEplb&) = delete;
  DeviceEplb& operator=(const DeviceEplb&) = delete;

  // Between forwards (synchronizes the device): same L and E, max_replicas <= capacity.
  void set_placement(const EplbPlacement& placement);
  const EplbPlacement& placement() const { return placement_; }
  void set_recording(bool on);  // synchronous write of the device flag word
  std::vector<int64_t> counter_values() const;  // synchronizes
  void reset_counters();

  int64_t num_logical() const { return placement_.num_logical; }
  int64_t num_physical() const { return placement_.num_physical; }
  int64_t capacity_replicas() const { return capacity_; }
  const int32_t* device_logical_to_physical() const;
  const int32_t* device_replica_count() const;
  const int32_t* device_recording_flag() const;
  int32_t* device_counters() const;

 private:
  struct Buffers;
  EplbPlacement placement_;
  int64_t capacity_ = 0;
  int device_index_ = 0;
  std::unique_ptr<Buffers> buf_;
};

// Device tensors of one routing call (T tokens).
struct RouteBinding {
  int64_t num_tokens = 0;
  int64_t layer_idx = 0;        // hash layers: layer_idx < num_hash_layers
  const void* logits = nullptr; // f32 | bf16 [T, L] (router)
  bool logits_bf16 = false;
  const float* bias = nullptr;  // f32 [L]; optional
  const void* token_ids = nullptr;  // [T]; hash layers
  bool token_ids_int64 = false;
  const int32_t* hash_table = nullptr;  // i32 [vocab, K]; hash layers
  int64_t vocab = 0;
  const void* logical_ids = nullptr;  // [T, K] remap only (no router)
  bool logical_ids_int64 = false;
  void* topk_ids = nullptr;           // out [T, K]
  bool topk_ids_int64 = false;
  float* topk_weights = nullptr;      // out f32 [T, K] (router)
};

class Sm90Router {
 public:
  // `router` null: remap only (RouteBinding::logical_ids). `eplb` null: ids stay logical. The
  // router's num_experts is L (eplb's num_logical when both are given).
  Sm90Router(const RouterConfig* router, int64_t num_logical, int64_t top_k, int device_index);
  ~Sm90Router();
  Sm90Router(const Sm90Router&) = delete;
  Sm90Router& operator=(const Sm90Router&) = delete;

  // Checks the binding's shape facts on the host (no device data is read); launches one kernel.
  void route(const RouteBinding& binding, const DeviceEplb* eplb, void* stream) const;
  // kErrorRouterInput; synchronizes.
  uint32_t read_error_flags(bool clear);

 private:
  bool has_router_ = false;
  RouterConfig config_;
  int64_t L_ = 0, K_ = 0;
  int device_index_ = 0;
  uint32_t* error_flags_ = nullptr;
};

}  // namespace moe_ep::cuda
