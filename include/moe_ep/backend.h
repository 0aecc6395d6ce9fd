// The implementations registered in this build: each backend folder registers itself (name,
// device kind, recipes, `can_implement`, factory); a build without CUDA simply has one entry
// fewer. Every request is answered ("can you do this?") before any allocation.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "moe_ep/desc.h"
#include "moe_ep/tensor.h"
#include "moe_ep/weights.h"

namespace moe_ep {

struct BackendInfo {
  std::string_view name;  // "cpu", "cuda-sm90"
  std::string_view description;
  DeviceType device;
  int min_compute_capability = 0;  // CUDA: major*10+minor; 0 on the CPU
  int max_compute_capability = 0;
  std::span<const Recipe> recipes;
};

// In registration order (the CPU first).
std::vector<BackendInfo> registered_backends();

// major*10+minor of a CUDA device as its backend reads it (90 for H100/H200); 0 for the CPU,
// for a device this build has no backend for, or when it cannot be read.
int device_compute_capability(Device device);

// A device as its backend sees it.
struct DeviceProperties {
  Device device;
  std::string name;            // "NVIDIA H200", or the CPU's model name
  int compute_capability = 0;  // major*10+minor; 0 for the CPU
  int64_t memory_bytes = 0;    // device memory (host RAM for the CPU); 0 when unknown
  int num_units = 0;           // streaming multiprocessors, or the CPU's hardware threads
};

// The devices of kind `type` that this build can see: the one host for kCPU; every visible GPU
// for kCUDA, whether or not a backend can run layers on it (compare compute_capability with
// registered_backends()). Empty when there is none, with `status` saying why (no backend for
// the kind in this build, no device, the driver's error); else `status` counts them. Never
// throws.
std::vector<DeviceProperties> list_devices(DeviceType type, std::string* status = nullptr);

// The communicator sources registered in this build ("simulated", "nccl", ...) with their
// status lines (e.g. the NCCL library found at run time), for `moe_ep info`.
struct TransportInfo {
  std::string name;
  std::string status;
};
std::vector<TransportInfo> registered_transports();

// "" when a registered implementation can run `desc` on `device` in a world of `world_size`
// ranks with weights of `format`; else the reason, naming the option and the allowed values.
std::string can_implement(const MoeDesc& desc, int world_size, Device device, WeightFormat format);

// The name of the implementation that runs `desc` on `device`; throws kUnsupported with the
// reason of can_implement (kInvalidArgument for a descriptor that is invalid on any device).
std::string_view select_implementation(const MoeDesc& desc, int world_size, Device device,
                                       WeightFormat format);

}  // namespace moe_ep
