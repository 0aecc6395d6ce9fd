// In-process transport for simulated ranks: R threads of one process share one SimWorld.
//
// Windows are host allocations owned by the world (so a rank that released its runtime never
// leaves a peer writing into freed memory); barriers are a mutex and a condition variable with
// a deadline. The mutex also orders memory: every store a rank made before a barrier is visible
// to every rank after it.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "core/transport.h"
#include "moe_ep/error.h"

namespace moe_ep::detail {

class SimWorld {
 public:
  explicit SimWorld(int world_size);
  ~SimWorld();
  SimWorld(const SimWorld&) = delete;
  SimWorld& operator=(const SimWorld&) = delete;

  int world_size() const { return world_size_; }

  std::vector<int64_t> all_gather(int rank, std::string_view phase, int64_t value,
                                  const std::string& local_error, std::chrono::milliseconds timeout);
  std::byte* allocate_window(int rank, int64_t bytes, std::chrono::milliseconds timeout);
  std::byte* window(int rank) const;
  int64_t window_bytes() const;

  // Non-empty once a timeout or a protocol mismatch broke the world.
  std::string broken_reason() const;
  // Breaks the world (kRuntime, naming `rank` and `reason`) and wakes every waiting rank.
  void abort(int rank, std::string_view reason) noexcept;

 private:
  struct AlignedFree {
    void operator()(std::byte* p) const;
  };
  struct Round {
    std::vector<int64_t> values;
    std::vector<std::string> errors;
  };

  [[noreturn]] void break_world(ErrorCode code, std::string reason);
  [[noreturn]] void throw_broken(int rank, std::string_view phase) const;

  const int world_size_;
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  // The open round: who has arrived, with what.
  uint64_t generation_ = 0;
  int num_arrived_ = 0;
  std::string phase_;
  std::vector<char> arrived_;
  Round open_;
  Round completed_;  // the last completed round; read by its waiters before the next can close
  // Broken state.
  ErrorCode broken_code_ = ErrorCode::kTimeout;
  std::string broken_;
  // Windows.
  std::vector<std::unique_ptr<std::byte, AlignedFree>> windows_;
  int64_t window_bytes_ = 0;
};

class SimTransport final : public Transport {
 public:
  SimTransport(std::shared_ptr<SimWorld> world, int rank, std::chrono::milliseconds timeout);

  int rank() const override { return rank_; }
  int world_size() const override { return world_->world_size(); }
  std::string_view name() const override { return "simulated"; }
  std::byte* allocate_window(int64_t bytes) override;
  std::byte* peer_window(int peer) const override;
  int64_t window_bytes() const override { return world_->window_bytes(); }
  std::vector<int64_t> all_gather(std::string_view phase, int64_t value,
                                  const std::string& local_error = {}) override;
  void abort(std::string_view reason) noexcept override;

  const std::shared_ptr<SimWorld>& world() const { return world_; }

 private:
  std::shared_ptr<SimWorld> world_;
  int rank_;
  std::chrono::milliseconds timeout_;
};

}  // namespace moe_ep::detail
