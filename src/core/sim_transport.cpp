#include "core/sim_transport.h"

#include "core/registry.h"

#include <cstdlib>
#include <cstring>
#include <new>

#include <fmt/format.h>

#include "core/check.h"
#include "core/host_memory.h"

namespace moe_ep::detail {
namespace {

std::string rank_list(const std::vector<int>& ranks) {
  std::string s = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < ranks.size(); ++i) s += fmt::format("{}{}", i ? ", " : "", ranks[i]);
  return s;
}

constexpr std::string_view kRecover =
    "the simulated world is unusable now: release every rank's runtime and acquire a new one";

}  // namespace

void SimWorld::AlignedFree::operator()(std::byte* p) const {
  ::operator delete[](p, std::align_val_t{256});
}

SimWorld::SimWorld(int world_size)
    : world_size_(world_size), arrived_(world_size, 0), windows_(world_size) {
  MOE_EP_ASSERT(world_size >= 1);
  open_.values.assign(world_size, 0);
  open_.errors.assign(world_size, {});
}

SimWorld::~SimWorld() = default;

std::string SimWorld::broken_reason() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return broken_;
}

void SimWorld::break_world(ErrorCode code, std::string reason) {
  broken_code_ = code;
  broken_ = reason;
  cv_.notify_all();
  MOE_EP_FAIL(code, "{}; {}", reason, kRecover);
}

void SimWorld::abort(int rank, std::string_view reason) noexcept {
  try {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!broken_.empty()) return;
    broken_code_ = ErrorCode::kRuntime;
    broken_ = fmt::format("rank {} failed and left the world: {}", rank, reason);
  } catch (...) {  // formatting failed (no memory): a shorter reason still breaks the world
    std::lock_guard<std::mutex> lock(mutex_);
    if (broken_.empty()) broken_code_ = ErrorCode::kRuntime, broken_ = "a rank failed and left the world";
  }
  cv_.notify_all();
}

void SimWorld::throw_broken(int rank, std::string_view phase) const {
  MOE_EP_FAIL(broken_code_, "rank {} stopped in phase '{}': {}; {}", rank, phase, broken_,
              kRecover);
}

std::vector<int64_t> SimWorld::all_gather(int rank, std::string_view phase, int64_t value,
                                          const std::string& local_error,
                                          std::chrono::milliseconds timeout) {
  MOE_EP_ASSERT(rank >= 0 && rank < world_size_);
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::unique_lock<std::mutex> lock(mutex_);
  if (!broken_.empty()) throw_broken(rank, phase);
  MOE_EP_CHECK_CODE(!arrived_[rank], ErrorCode::kRuntime,
                    "rank {} entered phase '{}' while it is already waiting in phase '{}': two "
                    "threads drive the same rank", rank, phase, phase_);
  if (num_arrived_ == 0) {
    phase_ = std::string(phase);
  } else if (phase != phase_) {
    std::vector<int> there;
    for (int q = 0; q < world_size_; ++q)
      if (arrived_[q]) there.push_back(q);
    break_world(ErrorCode::kRuntime,
                fmt::format("rank {} entered phase '{}' while {} {} in phase '{}' (the ranks do "
                            "not make the same collective calls in the same order)",
                            rank, phase, rank_list(there), there.size() == 1 ? "is" : "are",
                            phase_));
  }
  arrived_[rank] = 1;
  open_.values[rank] = value;
  open_.errors[rank] = local_error;
  ++num_arrived_;

  if (num_arrived_ == world_size_) {
    completed_ = open_;
    std::fill(arrived_.begin(), arrived_.end(), 0);
    num_arrived_ = 0;
    ++generation_;
    cv_.notify_all();
  } else {
    const uint64_t my_generation = generation_;
    cv_.wait_until(lock, deadline,
                   [&] { return generation_ != my_generation || !broken_.empty(); });
    if (generation_ == my_generation) {
      std::vector<int> missing;
      for (int q = 0; q < world_size_; ++q)
        if (!arrived_[q]) missing.push_back(q);
      const std::string mine = fmt::format("rank {} timed out in phase '{}' waiting for {}", rank,
                                           phase, rank_list(missing));
      if (broken_.empty())
        break_world(ErrorCode::kTimeout, fmt::format("{} (after {} ms)", mine, timeout.count()));
      // Another rank gave up first, or the world broke otherwise: stop waiting as well.
      if (broken_code_ == ErrorCode::kTimeout)
        MOE_EP_FAIL(ErrorCode::kTimeout, "{} ({}); {}", mine, broken_, kRecover);
      throw_broken(rank, phase);
    }
  }

  const Round& round = completed_;
  std::vector<int> failed;
  for (int q = 0; q < world_size_; ++q)
    if (!round.errors[q].empty()) failed.push_back(q);
  if (!failed.empty()) {
    const int first = failed.front();
    MOE_EP_FAIL(ErrorCode::kRuntime, "{} failed before phase '{}' (seen by rank {}): {}{}",
                rank_list(failed), phase, rank, round.errors[first],
                failed.size() > 1 ? " (first failing rank's message)" : "");
  }
  return round.values;
}

std::byte* SimWorld::allocate_window(int rank, int64_t bytes, std::chrono::milliseconds timeout) {
  const std::vector<int64_t> sizes = all_gather(rank, "workspace-allocate", bytes, {}, timeout);
  for (int q = 1; q < world_size_; ++q) {
    if (sizes[q] == sizes[0]) continue;
    std::string list;
    for (int p = 0; p < world_size_; ++p)
      list += fmt::format("{}rank {}: {}", p ? ", " : "", p, sizes[p]);
    MOE_EP_FAIL(ErrorCode::kRuntime,
                "workspace-allocate: the ranks asked for different window sizes ({} bytes); "
                "every rank must reserve the same workspace shape", list);
  }
  std::string error;
  std::byte* mine = nullptr;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (windows_[rank]) {
      error = fmt::format("rank {} already has a window of {} bytes; it is allocated once",
                          rank, window_bytes_);
    } else {
      error = detail::host_allocation_problem(
          bytes, fmt::format("rank {}'s workspace window", rank),
          "workspace_bytes(R, E, max_tokens_per_rank, H, I, K) of the reserved shape "
          "(moe_ep/workspace.h)");
    }
    if (error.empty()) {
      try {
        const size_t n = static_cast<size_t>(std::max<int64_t>(bytes, 1));
        mine = static_cast<std::byte*>(::operator new[](n, std::align_val_t{256}));
        std::memset(mine, 0, n);
        windows_[rank].reset(mine);
        window_bytes_ = bytes;
      } catch (const std::bad_alloc&) {
        error = fmt::format("rank {} could not allocate a window of {} bytes", rank, bytes);
      }
    }
  }
  try {
    all_gather(rank, "workspace-publish", 0, error, timeout);
  } catch (...) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (mine) windows_[rank].reset();
    throw;
  }
  return mine;
}

std::byte* SimWorld::window(int rank) const {
  std::lock_guard<std::mutex> lock(mutex_);
  MOE_EP_ASSERT(rank >= 0 && rank < world_size_);
  return windows_[rank].get();
}

int64_t SimWorld::window_bytes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return window_bytes_;
}

SimTransport::SimTransport(std::shared_ptr<SimWorld> world, int rank,
                           std::chrono::milliseconds timeout)
    : world_(std::move(world)), rank_(rank), timeout_(timeout) {
  MOE_EP_ASSERT(world_ && rank_ >= 0 && rank_ < world_->world_size());
}

std::byte* SimTransport::allocate_window(int64_t bytes) {
  return world_->allocate_window(rank_, bytes, timeout_);
}

std::byte* SimTransport::peer_window(int peer) const {
  MOE_EP_CHECK(peer >= 0 && peer < world_->world_size(),
               "peer rank {} is outside [0, world_size = {})", peer, world_->world_size());
  return world_->window(peer);
}

void SimTransport::abort(std::string_view reason) noexcept { world_->abort(rank_, reason); }

std::vector<int64_t> SimTransport::all_gather(std::string_view phase, int64_t value,
                                              const std::string& local_error) {
  return world_->all_gather(rank_, phase, value, local_error, timeout_);
}

namespace {

std::shared_ptr<Transport> create_sim_transport(const Bootstrap& b, std::shared_ptr<void>& world) {
  if (!world) world = std::make_shared<SimWorld>(b.world_size);
  return std::make_shared<SimTransport>(std::static_pointer_cast<SimWorld>(world), b.rank,
                                        std::chrono::milliseconds(b.timeout_ms));
}

// CPU ranks share a symmetric host workspace. A GPU rank of one process has none (its layers
// keep their scratch); simulated GPU ranks meet through this transport's barriers.
uint32_t single_process_parts(const Bootstrap& b) {
  return b.device.type == DeviceType::kCPU
             ? kRuntimeSymmetricWorkspace | kRuntimePeerTransport | kRuntimeDeviceErrorFlag
             : 0u;
}
uint32_t simulated_parts(const Bootstrap& b) {
  return b.device.type == DeviceType::kCPU
             ? kRuntimeSymmetricWorkspace | kRuntimePeerTransport | kRuntimeDeviceErrorFlag
             : kRuntimePeerTransport | kRuntimeDeviceErrorFlag;
}

constexpr CommSource kSingleSources[] = {CommSource::kSingleProcess};
constexpr CommSource kSimSources[] = {CommSource::kSimulated};
constexpr DeviceType kAnyDevice[] = {DeviceType::kCPU, DeviceType::kCUDA};

}  // namespace

void register_sim_transports() {
  register_transport({"single-process", kSingleSources, kAnyDevice, &single_process_parts,
                      &create_sim_transport, nullptr});
  register_transport({"simulated", kSimSources, kAnyDevice, &simulated_parts, &create_sim_transport,
                      nullptr});
}

}  // namespace moe_ep::detail
