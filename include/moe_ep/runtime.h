// Process-wide runtime: the EP group, the device, the communicator and the symmetric
// workspace shared by every layer of the process.
//
// Acquired once per rank and reference-counted: acquire() with an equal Bootstrap returns the
// same runtime; the last reference frees only what the runtime created (never a communicator
// the caller handed in). acquire() while a different world is alive fails loudly (kRuntime),
// naming both worlds.
//
// NCCL ranks (kNcclComm, kUniqueIdFile, kTcpStore; builds with NCCL, CUDA devices): one process
// per GPU; acquire() bootstraps the communicator (a unique id made by rank 0 and exchanged
// through the file or the TCP store, then ncclCommInitRank; or the caller's ncclComm_t), every
// step bounded by timeout_ms with kTimeout naming the rank and the phase. NVLink multicast is
// never used (NCCL_NVLS_ENABLE=0 is set unless the environment sets it). The workspace is a
// symmetric NCCL window (ncclMemAlloc + ncclCommWindowRegister) in the device layout.
//
// Simulated ranks (CommSource::kSimulated): the process holds one simulated world of
// world_size ranks; each rank is driven by its own thread, which calls acquire() with its own
// rank and the same world fields. All ranks share the world; it is freed with the last
// reference of its last rank.
//
// Collective calls: on a world of several ranks, reserve_workspace(), Layer::create and
// Layer::forward are collective: every rank makes the same calls in the same order. A rank that
// does not arrive within timeout_ms makes the others fail with kTimeout naming the rank and the
// phase (never an endless wait); the world is then unusable and must be released.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "moe_ep/tensor.h"
#include "moe_ep/workspace.h"

namespace moe_ep {

enum class CommSource {
  kSingleProcess,  // world_size == 1, no communicator
  kSimulated,      // world_size in-process ranks (one thread each) sharing host memory
  kNcclComm,       // an ncclComm_t created by the caller (nccl_comm); never destroyed by moe_ep
  kUniqueIdFile,   // NCCL unique id exchanged through a file (rendezvous = path)
  kTcpStore,       // NCCL unique id exchanged through a TCP store (rendezvous = host:port)
};

std::string_view comm_source_name(CommSource source);  // "single-process", "simulated", ...

// Runtime parts a layer may need; Runtime::parts() says which this runtime provides.
enum RuntimePart : uint32_t {
  kRuntimeSymmetricWorkspace = 1u << 0,  // one workspace shared by all layers
  kRuntimePeerTransport = 1u << 1,       // dispatch/combine across ranks
  kRuntimeDeviceErrorFlag = 1u << 2,     // sticky device-side error flag
};

struct Bootstrap {
  int world_size = 1;
  int rank = 0;
  Device device = Device::cpu();  // explicit: never derived from LOCAL_RANK or rank
  CommSource comm = CommSource::kSingleProcess;
  void* nccl_comm = nullptr;      // kNcclComm: caller-owned ncclComm_t
  std::string rendezvous;         // kUniqueIdFile: a path; kTcpStore: "host:port"
  int64_t timeout_ms = 30000;     // every wait on a peer is bounded by this

  std::string str() const;        // "world_size=2 rank=0 device=cpu comm=simulated timeout_ms=..."
};

class Runtime;
namespace detail {
class RuntimeState;  // src/core/runtime_state.h
}

class Runtime {
 public:
  // Validates the bootstrap (kInvalidArgument), refuses communicator sources this build cannot
  // use yet (kUnsupported) and a second, different world (kRuntime).
  static std::shared_ptr<Runtime> acquire(const Bootstrap& bootstrap);
  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  const Bootstrap& bootstrap() const { return bootstrap_; }
  int world_size() const { return bootstrap_.world_size; }
  int rank() const { return bootstrap_.rank; }
  Device device() const { return bootstrap_.device; }

  // RuntimePart bits this runtime provides.
  uint32_t parts() const;

  // The process's symmetric workspace. The first call creates it, sized workspace_bytes(shape)
  // (collective: every rank passes the same shape); later calls only check that `shape` fits
  // (throws kRuntime naming the dimension that does not). It is never reallocated: reserve the
  // largest shape of all layers first when layers differ.
  const Workspace& reserve_workspace(const WorkspaceShape& shape);
  // nullptr until the first reserve_workspace().
  const Workspace* workspace() const;

  // Collective: returns once every rank of the world entered a barrier of the same `phase`;
  // bounded by timeout_ms (kTimeout naming the rank and the phase). A world of one returns at once.
  void barrier(std::string_view phase);

  // For a rank that failed outside a collective call (its own allocation, its own code between
  // forwards) and will not make the collective calls its peers wait in: breaks the world at
  // once, so every rank's pending or next collective call throws naming this rank and `reason`
  // instead of waiting out timeout_ms. Not collective; a world of one: nothing. Never throws.
  // Release the runtime on every rank afterwards.
  void abort(std::string_view reason) noexcept;

  // Internal: the transport and the workspace memory (src/core/runtime_state.h).
  detail::RuntimeState& state() const { return *state_; }

 private:
  Runtime(const Bootstrap& bootstrap, std::unique_ptr<detail::RuntimeState> state);
  Bootstrap bootstrap_;
  std::unique_ptr<detail::RuntimeState> state_;
};

}  // namespace moe_ep
