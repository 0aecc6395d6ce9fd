// Concurrency rule of Layer::forward (README.md "Concurrency"), enforced by one guard object at
// the top of the call:
//   - single-process runtimes (world size 1, no shared workspace): calls on one layer are
//     serialized (a second thread waits for the first); calls on different layers run at once
//     (they share no mutable state);
//   - simulated and NCCL runtimes (any world size): a rank's forwards are collective and share
//     the rank's workspace, so while one thread is in a forward of any layer of the rank, a
//     forward from another thread is refused at once with kRuntime (never a silent race, never
//     an interleaving of collective calls that the other ranks cannot match).
#pragma once

#include "moe_ep/runtime.h"

namespace moe_ep::detail {

class LayerCallGuard {
 public:
  // `layer` identifies the layer (its Impl); `call` names the entry point in messages.
  LayerCallGuard(const void* layer, const Runtime& runtime, const char* call);
  ~LayerCallGuard();
  LayerCallGuard(const LayerCallGuard&) = delete;
  LayerCallGuard& operator=(const LayerCallGuard&) = delete;

 private:
  const void* key_;
};

}  // namespace moe_ep::detail
