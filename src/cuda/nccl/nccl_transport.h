// The NCCL transport (core/transport.h) of one rank per process:
//
//   bootstrap   kNcclComm: the caller's communicator (checked: count, rank, device; never
//               destroyed here); kUniqueIdFile / kTcpStore: rank 0's ncclGetUniqueId through
//               core/rendezvous.h, then a non-blocking ncclCommInitRankConfig polled until
//               timeout_ms (ncclCommAbort and kTimeout naming rank and phase when it does not
//               complete). NCCL_NVLS_ENABLE=0 is set first unless the environment sets it: NVLink
//               multicast is never used.
//   window      ncclMemAlloc + ncclCommWindowRegister (symmetric), then ncclDevCommCreate with
//               one LSA barrier (and GIN signals when the world spans more than the LSA team);
//   all_gather  ncclAllGather of a 256-byte record per rank (value, phase hash, local error) on
//               the transport's stream, polled (cudaStreamQuery, ncclCommGetAsyncError) until
//               timeout_ms; on timeout ncclCommAbort and kTimeout naming rank and phase.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include <cuda_runtime.h>

#include "core/transport.h"
#include "cuda/nccl/nccl_api.h"
#include "moe_ep/error.h"
#include "moe_ep/runtime.h"

namespace moe_ep::cuda::nccl {

class NcclTransport final : public detail::Transport {
 public:
  explicit NcclTransport(const Bootstrap& bootstrap);
  ~NcclTransport() override;

  int rank() const override { return rank_; }
  int world_size() const override { return world_size_; }
  std::string_view name() const override { return "nccl"; }
  std::byte* allocate_window(int64_t bytes) override;
  // This rank's window; null for peers (device code reaches them through the window handle).
  std::byte* peer_window(int peer) const override;
  int64_t window_bytes() const override { return window_bytes_; }
  std::vector<int64_t> all_gather(std::string_view phase, int64_t value,
                                  const std::string& local_error = {}) override;
  // Aborts the communicator: the peers' pending NCCL collectives fail (their async error) and
  // they see the world broken; this rank's later calls throw naming `reason`.
  void abort(std::string_view reason) noexcept override;

  // Device side, valid after allocate_window.
  const ncclDevComm& dev_comm() const { return dev_comm_; }
  ncclWindow_t window() const { return window_; }
  // Every rank of the world is reachable through LSA pointers (one NVLink domain); otherwise
  // the kernels use GIN puts and signals.
  bool lsa_covers_world() const { return dev_comm_.lsaSize == world_size_; }
  int device_index() const { return device_; }
  int64_t timeout_ms() const { return timeout_.count(); }
  const NcclApi& api() const { return *api_; }
  std::string describe() const;  // "nccl 2.28.9 (path), rank r of R on cuda:d, lsa team n, ..."

 private:
  // Polls ncclCommGetAsyncError until the communicator is no longer in progress; throws
  // (kDevice, or kTimeout after ncclCommAbort) naming the phase.
  void wait_ready(std::string_view phase, std::chrono::steady_clock::time_point deadline);
  [[noreturn]] void fail(ErrorCode code, std::string message);
  void check_usable(std::string_view phase) const;

  const NcclApi* api_ = nullptr;
  int rank_ = 0, world_size_ = 1, device_ = 0;
  std::chrono::milliseconds timeout_;
  ncclComm_t comm_ = nullptr;
  bool owns_comm_ = false;
  std::string broken_;  // non-empty: aborted, and why
  cudaStream_t stream_ = nullptr;
  void* gather_ = nullptr;       // device: send record, then R receive records
  void* host_gather_ = nullptr;  // pinned host copy of the same
  void* base_ = nullptr;
  int64_t window_bytes_ = 0;
  ncclWindow_t window_ = nullptr;
  ncclDevComm dev_comm_{};
  bool has_dev_comm_ = false;
};

}  // namespace moe_ep::cuda::nccl
