#include "core/fault_points.h"

#include <atomic>

namespace moe_ep::detail {
namespace {
std::atomic<FaultHook*> g_hook{nullptr};
}

void set_fault_hook(FaultHook* hook) { g_hook.store(hook, std::memory_order_release); }

void fault_point(int rank, std::string_view point) {
  if (FaultHook* hook = g_hook.load(std::memory_order_acquire)) hook->at(rank, point);
}

}  // namespace moe_ep::detail
