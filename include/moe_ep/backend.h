// The backend table: a backend name picks a kernel family, the device picks the
// implementation. Every request is answered ("can you do this?") before any allocation.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "moe_ep/config.h"
#include "moe_ep/tensor.h"
#include "moe_ep/weights.h"

namespace moe_ep {

// Runtime parts a family needs; Runtime::acquire provides them.
enum RuntimePart : uint32_t {
  kRuntimeSymmetricWorkspace = 1u << 0,  // one workspace shared by all layers
  kRuntimePeerTransport = 1u << 1,       // dispatch/combine across ranks
  kRuntimeDeviceErrorFlag = 1u << 2,     // sticky device-side error flag
};

struct Implementation {
  std::string_view name;  // "cpu", "cuda-sm90"
  DeviceType device;
  int min_compute_capability;  // major*10+minor; 0 for the CPU
  int max_compute_capability;
  bool compiled;               // built into this library
};

struct FamilyProperties {
  std::string_view name;         // what users type: "mxfp4", "nvfp4"
  std::string_view description;
  uint32_t runtime_parts;        // RuntimePart bits
  std::span<const Implementation> implementations;
  std::span<const WeightFormat> weight_formats;  // accepted WeightPack formats
  int64_t hidden_align;          // H % hidden_align == 0
  int64_t intermediate_align;    // I % intermediate_align == 0
};

std::span<const FamilyProperties> backend_table();
std::string backend_names();  // "mxfp4, nvfp4"

// Throws kInvalidArgument naming `option` (the flag or field the user typed) and the allowed
// names when `name` is unknown.
const FamilyProperties& find_family(std::string_view name, std::string_view option = "family");

// The implementation of `family` for `device`; compute_capability is read from the device
// by the caller (0 for the CPU). Returns nullptr and fills `reason` when none fits.
const Implementation* find_implementation(const FamilyProperties& family, Device device,
                                          int compute_capability, std::string* reason);

// Full configuration check, before any allocation. Throws kInvalidArgument / kUnsupported
// with a message naming the field, the value and what was expected.
void validate_config(const FleetParams& fleet, const KernelConfig& config, int world_size);

// Problem check: "" when the family can run this problem, else the reason.
std::string can_implement(const FleetParams& fleet, const KernelConfig& config, int world_size,
                          Device device, int compute_capability, WeightFormat format);

}  // namespace moe_ep
