// One forward's tensors on a driver's device: inputs uploaded from a HostInputs, y poisoned.
#pragma once

#include <cstdint>
#include <vector>

#include "cli/device_driver.h"
#include "moe_ep/layer.h"
#include "testing/synthetic.h"

namespace moe_ep::cli {

struct DeviceBatch {
  ForwardArgs args;  // x, topk_ids, topk_weights, y on the driver's device; stream set
  int64_t y_bytes = 0;
};

DeviceBatch upload_batch(Driver& driver, const testing::HostInputs& inputs);
// Fills y with 0xFF bytes (bf16 NaN) so rows a forward fails to write are caught.
void poison_y(Driver& driver, const DeviceBatch& batch);
std::vector<uint16_t> download_y(Driver& driver, const DeviceBatch& batch);

// A new device copy of a host vector, and a host copy of n elements of device memory.
template <class T>
void* upload_vector(Driver& driver, const std::vector<T>& v) {
  void* p = driver.allocate(static_cast<int64_t>(v.size() * sizeof(T)));
  if (!v.empty()) driver.upload(p, v.data(), static_cast<int64_t>(v.size() * sizeof(T)));
  return p;
}
template <class T>
std::vector<T> download_vector(Driver& driver, const void* device_src, size_t n) {
  std::vector<T> v(n);
  if (n) driver.download(v.data(), device_src, static_cast<int64_t>(n * sizeof(T)));
  return v;
}

// Experts [first, first + count) of a pack, as views into it (a rank's share of the experts).
WeightPack slice_pack(const WeightPack& all, int64_t first, int64_t count);

}  // namespace moe_ep::cli
