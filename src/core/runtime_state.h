// What a Runtime holds besides its Bootstrap: the transport, the workspace, the error word.
// Internal to the library; layers reach it through Runtime::state().
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>

#include "core/transport.h"
#include "moe_ep/workspace.h"

namespace moe_ep::detail {

class RuntimeState {
 public:
  RuntimeState(std::shared_ptr<Transport> transport, uint32_t parts)
      : transport_(std::move(transport)), parts_(parts) {}

  Transport& transport() const { return *transport_; }
  uint32_t parts() const { return parts_; }

  std::mutex& mutex() { return mutex_; }
  std::optional<Workspace>& workspace() { return workspace_; }
  const std::optional<Workspace>& workspace() const { return workspace_; }

  // The runtime's sticky error word (RuntimePart kRuntimeDeviceErrorFlag): host memory on CPU
  // runtimes, readable and writable by every layer of the rank.
  std::atomic<uint32_t>& error_flags() { return error_flags_; }

  // Layers of a rank are numbered in creation order; the ranks create them in the same order,
  // so the number names one layer on every rank (in barrier phases, for example).
  int64_t next_layer_index() { return next_layer_index_++; }

 private:
  std::shared_ptr<Transport> transport_;
  uint32_t parts_;
  std::mutex mutex_;
  std::optional<Workspace> workspace_;
  std::atomic<uint32_t> error_flags_{0};
  std::atomic<int64_t> next_layer_index_{0};
};

}  // namespace moe_ep::detail
