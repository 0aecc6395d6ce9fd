#include "cuda/layer_scratch.h"

#include <map>
#include <mutex>
#include <utility>

namespace moe_ep::cuda {

std::shared_ptr<DeviceBuffer> shared_layer_scratch(const void* runtime, int device_index, size_t bytes) {
  static std::mutex mu;
  // Weak: the buffer lives as long as a layer holds it; a released runtime's entry expires.
  static std::map<std::pair<const void*, int>, std::weak_ptr<DeviceBuffer>> scratch;
  std::lock_guard<std::mutex> lock(mu);
  for (auto it = scratch.begin(); it != scratch.end();)
    it = it->second.expired() ? scratch.erase(it) : std::next(it);
  std::weak_ptr<DeviceBuffer>& slot = scratch[{runtime, device_index}];
  std::shared_ptr<DeviceBuffer> have = slot.lock();
  if (have && have->bytes() >= bytes) return have;
  auto fresh = std::make_shared<DeviceBuffer>(bytes);
  slot = fresh;
  return fresh;
}

}  // namespace moe_ep::cuda
