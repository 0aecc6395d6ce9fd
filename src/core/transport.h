// The transport seam: what an EP layer needs from the communicator.
//
//   - one symmetric window per rank (the workspace), the same size on every rank, allocated
//     collectively once (NCCL: ncclMemAlloc + ncclCommWindowRegister);
//   - peer addressing: rank r gets a pointer to any offset of rank q's window (NCCL: LSA
//     pointers inside the NVLink domain; nullptr for peers reachable only through GIN);
//   - barriers bounded by the bootstrap timeout that report rank and phase (NCCL: LSA barriers
//     wrapped in a bounded poll).
//
// Dispatch and combine themselves are written over these primitives by each backend (the CPU
// EP layer copies rows with plain stores into peer windows; the CUDA kernels use the device API
// on the same layout, see moe_ep/workspace.h).
//
// Failure rules (docs/spec.md §11):
//   - a rank that does not arrive at a barrier within the timeout: every waiting rank throws
//     kTimeout "rank r timed out in phase P waiting for rank q"; the world is broken from then
//     on, and every later collective call throws at once (kTimeout, naming the first failure);
//   - a rank that fails locally passes its message to barrier(): the barrier completes and
//     every rank throws (kRuntime "rank q failed before phase P: ..."), the failing rank its own
//     error; the world stays usable, so the next forward works;
//   - a rank that fails between collective calls and leaves calls abort(): the world is broken
//     and every rank's pending or next collective call throws at once (kRuntime, naming it).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace moe_ep::detail {

class Transport {
 public:
  virtual ~Transport() = default;

  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  virtual std::string_view name() const = 0;  // "simulated", "nccl"

  // Collective: every rank passes the same `bytes` (else every rank throws kRuntime naming the
  // sizes). Allocates this rank's zero-filled window, aligned to 256 bytes; once per transport.
  virtual std::byte* allocate_window(int64_t bytes) = 0;
  // Rank `peer`'s window as addressable from this rank; valid after allocate_window returned.
  virtual std::byte* peer_window(int peer) const = 0;
  virtual int64_t window_bytes() const = 0;

  // Collective: waits until every rank entered the barrier with the same phase, then returns
  // (or throws, see above). local_error: non-empty when this rank failed before the barrier.
  void barrier(std::string_view phase, const std::string& local_error = {}) {
    (void)all_gather(phase, 0, local_error);
  }
  // Collective: every rank contributes one value; returns all of them, indexed by rank.
  virtual std::vector<int64_t> all_gather(std::string_view phase, int64_t value,
                                          const std::string& local_error = {}) = 0;

  // Not collective: this rank failed outside a collective call and will not take part in the
  // next one. The world is broken from now on; every rank's pending or next collective call
  // throws at once, naming this rank and `reason`, instead of waiting out the timeout.
  virtual void abort(std::string_view reason) noexcept = 0;
};

}  // namespace moe_ep::detail
