#include "core/call_guard.h"

#include <condition_variable>
#include <mutex>
#include <unordered_set>

#include <fmt/format.h>

#include "core/check.h"

namespace moe_ep::detail {
namespace {

// Calls in flight, keyed by the layer (single-rank runtimes) or by the runtime (multi-rank).
// An entry exists only while its call runs, so the table holds at most one entry per thread.
struct InFlight {
  std::mutex mutex;
  std::condition_variable released;
  std::unordered_set<const void*> owners;
};

InFlight& in_flight() {
  static InFlight table;
  return table;
}

// Simulated and NCCL runtimes (any world size) give their layers one shared workspace.
bool shares_workspace(const Runtime& rt) { return rt.bootstrap().comm != CommSource::kSingleProcess; }

}  // namespace

LayerCallGuard::LayerCallGuard(const void* layer, const Runtime& runtime, const char* call)
    : key_(shares_workspace(runtime) ? static_cast<const void*>(&runtime) : layer) {
  InFlight& t = in_flight();
  std::unique_lock<std::mutex> lock(t.mutex);
  if (key_ == layer) {
    t.released.wait(lock, [&] { return t.owners.count(key_) == 0; });
  } else {
    MOE_EP_CHECK_CODE(t.owners.count(key_) == 0, ErrorCode::kRuntime,
                      "{} on rank {} of {}: another thread is already in a forward of a layer "
                      "of this rank; a rank's collective calls share its workspace and must come "
                      "from one thread at a time, in the same order on every rank (refused, "
                      "nothing was done)", call, runtime.rank(), runtime.world_size());
  }
  t.owners.insert(key_);
}

LayerCallGuard::~LayerCallGuard() {
  InFlight& t = in_flight();
  {
    std::lock_guard<std::mutex> lock(t.mutex);
    t.owners.erase(key_);
  }
  t.released.notify_all();
}

}  // namespace moe_ep::detail
