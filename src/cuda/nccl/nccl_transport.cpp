#include "cuda/nccl/nccl_transport.h"

#include <cstdlib>
#include <cstring>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/check.h"
#include "core/rendezvous.h"
#include "cuda/errors.h"

namespace moe_ep::cuda::nccl {
namespace {

using Clock = std::chrono::steady_clock;

// One rank's contribution to all_gather.
struct GatherRecord {
  int64_t value;
  uint64_t phase_hash;
  int32_t error_len;  // bytes of error (0: this rank did not fail)
  char phase[100];
  char error[136];
};
static_assert(sizeof(GatherRecord) == 256, "all_gather moves 256 bytes per rank");

uint64_t fnv1a(std::string_view s) {
  uint64_t h = 1469598103934665603ull;
  for (char c : s) h = (h ^ static_cast<uint8_t>(c)) * 1099511628211ull;
  return h;
}

void copy_text(char* dst, size_t cap, std::string_view s, int32_t* len = nullptr) {
  const size_t n = std::min(s.size(), cap - 1);
  std::memcpy(dst, s.data(), n);
  dst[n] = '\0';
  if (len) *len = static_cast<int32_t>(n);
}

int64_t ms_since(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t).count();
}

constexpr std::string_view kRecover = "the NCCL world is unusable now: release the runtime on every rank";

}  // namespace

NcclTransport::NcclTransport(const Bootstrap& b)
    : api_(&nccl_api()), rank_(b.rank), world_size_(b.world_size), device_(b.device.index),
      timeout_(b.timeout_ms) {
  const auto start = Clock::now();
  const auto deadline = start + timeout_;
  // NVLink multicast (NVLS) stays off: it can take a shared host's GPUs out of service.
  ::setenv("NCCL_NVLS_ENABLE", "0", /*overwrite=*/0);
  MOE_EP_CUDA_CHECK(cudaSetDevice(device_));

  if (b.comm == CommSource::kNcclComm) {
    comm_ = static_cast<ncclComm_t>(b.nccl_comm);
    int count = 0, rank = -1, dev = -1;
    api_->CommCount(comm_, &count);
    api_->CommUserRank(comm_, &rank);
    api_->CommCuDevice(comm_, &dev);
    MOE_EP_CHECK(count == world_size_ && rank == rank_ && dev == device_,
                 "Bootstrap.nccl_comm has {} ranks, rank {}, device cuda:{}; the bootstrap says "
                 "world_size = {}, rank = {}, device = cuda:{}", count, rank, dev, world_size_,
                 rank_, device_);
  } else {
    auto make_id = [this] {
      ncclUniqueId id;
      const ncclResult_t r = api_->GetUniqueId(&id);
      MOE_EP_CHECK_CODE(r == ncclSuccess, ErrorCode::kDevice, "rank 0: ncclGetUniqueId failed: {}",
                        api_->error_str(r));
      detail::UniqueId out;
      static_assert(sizeof(id) == out.size(), "ncclUniqueId is 128 bytes");
      std::memcpy(out.data(), &id, out.size());
      return out;
    };
    const detail::UniqueId uid =
        b.comm == CommSource::kUniqueIdFile
            ? detail::exchange_unique_id_file(b.rendezvous, rank_, world_size_, timeout_, make_id)
            : detail::exchange_unique_id_tcp(b.rendezvous, rank_, world_size_, timeout_, make_id);
    ncclUniqueId id;
    std::memcpy(&id, uid.data(), sizeof(id));
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;  // init returns at once; wait_ready bounds the wait for the peers
    const ncclResult_t r = api_->CommInitRankConfig(&comm_, world_size_, id, rank_, &config);
    MOE_EP_CHECK_CODE(r == ncclSuccess || r == ncclInProgress, ErrorCode::kDevice,
                      "rank {}: ncclCommInitRankConfig failed in phase nccl init: {}", rank_,
                      api_->error_str(r));
    owns_comm_ = true;
    wait_ready("nccl init", deadline);
  }
  MOE_EP_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  MOE_EP_CUDA_CHECK(cudaMalloc(&gather_, sizeof(GatherRecord) * (world_size_ + 1)));
  // Pinned, so that the copies around the all_gather are asynchronous and the wait stays ours.
  MOE_EP_CUDA_CHECK(cudaMallocHost(&host_gather_, sizeof(GatherRecord) * (world_size_ + 1)));
}

NcclTransport::~NcclTransport() {
  cudaSetDevice(device_);
  if (comm_ && broken_.empty()) {
    // A non-blocking communicator may still run each call when it returns: the next one waits
    // for it. Bounded: a peer that left early must not hang this destructor.
    const auto deadline = Clock::now() + timeout_;
    auto settled = [&] {
      ncclResult_t state = ncclInProgress;
      while (Clock::now() < deadline && api_->CommGetAsyncError(comm_, &state) == ncclSuccess &&
             state == ncclInProgress)
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      return state == ncclSuccess;
    };
    auto done = [&](ncclResult_t r) { return (r == ncclSuccess || r == ncclInProgress) && settled(); };
    bool ok = true;
    if (has_dev_comm_) ok = done(api_->DevCommDestroy(comm_, &dev_comm_));
    if (ok && window_) ok = done(api_->CommWindowDeregister(comm_, window_));
    if (ok && owns_comm_) ok = done(api_->CommFinalize(comm_));
    if (!ok && owns_comm_) broken_ = "teardown did not complete";
  }
  if (base_) api_->MemFree(base_);
  if (owns_comm_ && comm_) {
    if (broken_.empty())
      api_->CommDestroy(comm_);
    else
      api_->CommAbort(comm_);
  }
  if (gather_) cudaFree(gather_);
  if (host_gather_) cudaFreeHost(host_gather_);
  if (stream_) cudaStreamDestroy(stream_);
}

std::string NcclTransport::describe() const {
  return fmt::format("nccl {} ({}), rank {} of {} on cuda:{}, lsa team {} of {}{}", api_->version_str(),
                     api_->path, rank_, world_size_, device_, has_dev_comm_ ? dev_comm_.lsaSize : 0,
                     world_size_, has_dev_comm_ && !lsa_covers_world() ? " (GIN beyond it)" : "");
}

void NcclTransport::fail(ErrorCode code, std::string message) {
  if (broken_.empty()) {
    broken_ = message;
    // Unblocks every pending NCCL operation of this rank; also a caller's communicator, which
    // would otherwise hang its next call (the caller must not use or destroy it any more).
    if (comm_) api_->CommAbort(comm_);
    comm_ = nullptr;
  }
  MOE_EP_FAIL(code, "{}; {}", message, kRecover);
}

void NcclTransport::abort(std::string_view reason) noexcept {
  try {
    fail(ErrorCode::kRuntime, fmt::format("rank {} failed and left the world: {}", rank_, reason));
  } catch (...) {  // fail() reports by throwing; abort() only needs its effect
  }
}

void NcclTransport::check_usable(std::string_view phase) const {
  MOE_EP_CHECK_CODE(broken_.empty(), ErrorCode::kTimeout, "rank {} stopped in phase '{}': {}; {}",
                    rank_, phase, broken_, kRecover);
}

void NcclTransport::wait_ready(std::string_view phase, Clock::time_point deadline) {
  const auto start = Clock::now();
  while (true) {
    ncclResult_t state = ncclSuccess;
    const ncclResult_t r = api_->CommGetAsyncError(comm_, &state);
    if (r != ncclSuccess) state = r;
    if (state == ncclSuccess) return;
    if (state != ncclInProgress)
      fail(ErrorCode::kDevice, fmt::format("rank {}: NCCL failed in phase {}: {}", rank_, phase,
                                           api_->error_str(state, comm_)));
    if (Clock::now() >= deadline)
      fail(ErrorCode::kTimeout,
           fmt::format("rank {} timed out in phase {} after {} ms waiting for the other ranks "
                       "(NCCL does not tell which rank is missing)", rank_, phase, ms_since(start)));
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

std::vector<int64_t> NcclTransport::all_gather(std::string_view phase, int64_t value,
                                               const std::string& local_error) {
  check_usable(phase);
  MOE_EP_CUDA_CHECK(cudaSetDevice(device_));
  const auto start = Clock::now();
  const auto deadline = start + timeout_;
  GatherRecord mine{};
  mine.value = value;
  mine.phase_hash = fnv1a(phase);
  copy_text(mine.phase, sizeof(mine.phase), phase);
  if (!local_error.empty()) copy_text(mine.error, sizeof(mine.error), local_error, &mine.error_len);
  auto* send = static_cast<GatherRecord*>(gather_);
  GatherRecord* recv = send + 1;
  auto* host = static_cast<GatherRecord*>(host_gather_);
  host[0] = mine;
  MOE_EP_CUDA_CHECK(cudaMemcpyAsync(send, host, sizeof(mine), cudaMemcpyHostToDevice, stream_));
  const ncclResult_t r = api_->AllGather(send, recv, sizeof(GatherRecord), ncclUint8, comm_, stream_);
  if (r != ncclSuccess && r != ncclInProgress)
    fail(ErrorCode::kDevice, fmt::format("rank {}: ncclAllGather failed in phase '{}': {}", rank_,
                                         phase, api_->error_str(r, comm_)));
  wait_ready(fmt::format("'{}' (all_gather enqueue)", phase), deadline);
  MOE_EP_CUDA_CHECK(cudaMemcpyAsync(host + 1, recv, sizeof(GatherRecord) * world_size_,
                                    cudaMemcpyDeviceToHost, stream_));
  while (true) {
    const cudaError_t q = cudaStreamQuery(stream_);
    if (q == cudaSuccess) break;
    if (q != cudaErrorNotReady)
      fail(ErrorCode::kDevice, fmt::format("rank {}: the all_gather of phase '{}' failed: {}", rank_,
                                           phase, cudaGetErrorString(q)));
    ncclResult_t state = ncclSuccess;
    api_->CommGetAsyncError(comm_, &state);
    if (state != ncclSuccess && state != ncclInProgress)
      fail(ErrorCode::kDevice, fmt::format("rank {}: NCCL failed in phase '{}': {}", rank_, phase,
                                           api_->error_str(state, comm_)));
    if (Clock::now() >= deadline)
      fail(ErrorCode::kTimeout,
           fmt::format("rank {} timed out in phase '{}' after {} ms waiting for the other ranks in "
                       "the NCCL all_gather (NCCL does not tell which rank is missing)",
                       rank_, phase, ms_since(start)));
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  const std::vector<GatherRecord> all(host + 1, host + 1 + world_size_);
  std::vector<int64_t> values(world_size_);
  std::vector<int> failed;
  for (int q = 0; q < world_size_; ++q) {
    if (all[q].phase_hash != mine.phase_hash)
      fail(ErrorCode::kRuntime,
           fmt::format("rank {} entered phase '{}' while rank {} was in phase '{}' (the ranks do "
                       "not make the same collective calls in the same order)",
                       rank_, phase, q, std::string(all[q].phase)));
    values[q] = all[q].value;
    if (all[q].error_len > 0) failed.push_back(q);
  }
  if (!failed.empty())
    MOE_EP_FAIL(ErrorCode::kRuntime, "rank{} {} failed before phase '{}' (seen by rank {}): {}",
                failed.size() > 1 ? "s" : "", fmt::join(failed, ", "), phase, rank_,
                std::string(all[failed.front()].error));
  return values;
}

std::byte* NcclTransport::allocate_window(int64_t bytes) {
  MOE_EP_CHECK_CODE(base_ == nullptr, ErrorCode::kInternal, "allocate_window called twice");
  const std::vector<int64_t> sizes = all_gather("allocate window", bytes);
  for (int q = 0; q < world_size_; ++q)
    MOE_EP_CHECK_CODE(sizes[q] == bytes, ErrorCode::kRuntime,
                      "rank {} asks for a workspace window of {} bytes, rank {} for {} bytes; every "
                      "rank must reserve the same shape", rank_, bytes, q, sizes[q]);
  const auto deadline = Clock::now() + timeout_;
  MOE_EP_CUDA_CHECK(cudaSetDevice(device_));
  const size_t size = (static_cast<size_t>(bytes) + NCCL_WIN_REQUIRED_ALIGNMENT - 1) /
                      NCCL_WIN_REQUIRED_ALIGNMENT * NCCL_WIN_REQUIRED_ALIGNMENT;
  ncclResult_t r = api_->MemAlloc(&base_, size);
  MOE_EP_CHECK_CODE(r == ncclSuccess, ErrorCode::kDevice,
                    "rank {}: ncclMemAlloc of {} bytes for the workspace window failed: {}", rank_,
                    size, api_->error_str(r, comm_));
  MOE_EP_CUDA_CHECK(cudaMemset(base_, 0, size));
  MOE_EP_CUDA_CHECK(cudaDeviceSynchronize());
  // A non-blocking communicator (the one made here) may return ncclSuccess while the call still
  // runs in the background: every call is followed by wait_ready before its result is read.
  r = api_->CommWindowRegister(comm_, base_, size, &window_, NCCL_WIN_COLL_SYMMETRIC);
  if (r != ncclSuccess && r != ncclInProgress)
    fail(ErrorCode::kDevice, fmt::format("rank {}: ncclCommWindowRegister failed: {}", rank_,
                                         api_->error_str(r, comm_)));
  wait_ready("register window", deadline);

  // One LSA barrier (the kernels' barriers run in one CTA per rank). When the LSA team is
  // smaller than the world, the device communicator is made again with GIN signals.
  ncclDevCommRequirements reqs{};
  reqs.lsaBarrierCount = 1;
  r = api_->DevCommCreate(comm_, &reqs, &dev_comm_);
  if (r != ncclSuccess && r != ncclInProgress)
    fail(ErrorCode::kDevice, fmt::format("rank {}: ncclDevCommCreate failed: {}", rank_,
                                         api_->error_str(r, comm_)));
  wait_ready("create device communicator", deadline);
  has_dev_comm_ = true;
  if (!lsa_covers_world()) {
    const int lsa_size = dev_comm_.lsaSize;
    api_->DevCommDestroy(comm_, &dev_comm_);
    wait_ready("destroy device communicator", deadline);
    has_dev_comm_ = false;
    reqs.ginForceEnable = true;
    reqs.ginContextCount = 1;
    reqs.ginSignalCount = 1;
    r = api_->DevCommCreate(comm_, &reqs, &dev_comm_);
    if (r != ncclSuccess && r != ncclInProgress)
      fail(ErrorCode::kDevice, fmt::format("rank {}: ncclDevCommCreate with GIN failed (the world "
                                           "spans {} ranks, the LSA team {}): {}", rank_,
                                           world_size_, lsa_size, api_->error_str(r, comm_)));
    wait_ready("create device communicator (gin)", deadline);
    has_dev_comm_ = true;
  }
  window_bytes_ = bytes;
  barrier("window ready");
  return static_cast<std::byte*>(base_);
}

std::byte* NcclTransport::peer_window(int peer) const {
  return peer == rank_ ? static_cast<std::byte*>(base_) : nullptr;
}

}  // namespace moe_ep::cuda::nccl
