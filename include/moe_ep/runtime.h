// Process-wide runtime: the EP group, the device, the communicator and the symmetric
// workspace shared by every layer of the process.
//
// Acquired once per process and reference-counted: acquire() with an equal Bootstrap returns
// the same runtime; the last reference frees only what the runtime created (never a
// communicator the caller handed in). acquire() with a different world fails loudly.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "moe_ep/tensor.h"

namespace moe_ep {

enum class CommSource {
  kSingleProcess,  // world_size == 1, no communicator
  kSimulated,      // world_size in-process ranks (one thread each) sharing host memory
  kNcclComm,       // an ncclComm_t created by the caller (nccl_comm)
  kUniqueIdFile,   // NCCL unique id exchanged through a file (rendezvous = path)
  kTcpStore,       // NCCL unique id exchanged through a TCP store (rendezvous = host:port)
};

std::string_view comm_source_name(CommSource source);

struct Bootstrap {
  int world_size = 1;
  int rank = 0;
  Device device = Device::cpu();  // explicit: never derived from LOCAL_RANK or rank
  CommSource comm = CommSource::kSingleProcess;
  void* nccl_comm = nullptr;      // kNcclComm: caller-owned ncclComm_t
  std::string rendezvous;         // kUniqueIdFile / kTcpStore
  int64_t timeout_ms = 30000;     // every wait on a peer is bounded by this
};

class Runtime {
 public:
  static std::shared_ptr<Runtime> acquire(const Bootstrap& bootstrap);
  virtual ~Runtime();

  const Bootstrap& bootstrap() const { return bootstrap_; }
  int world_size() const { return bootstrap_.world_size; }
  int rank() const { return bootstrap_.rank; }
  Device device() const { return bootstrap_.device; }

 protected:
  explicit Runtime(const Bootstrap& bootstrap) : bootstrap_(bootstrap) {}

 private:
  Bootstrap bootstrap_;
};

}  // namespace moe_ep
