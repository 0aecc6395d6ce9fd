#include "moe_ep/runtime.h"

#include <mutex>

#include "check.h"

namespace moe_ep {

std::string_view comm_source_name(CommSource source) {
  switch (source) {
    case CommSource::kSingleProcess: return "single-process";
    case CommSource::kSimulated: return "simulated";
    case CommSource::kNcclComm: return "nccl-comm";
    case CommSource::kUniqueIdFile: return "unique-id-file";
    case CommSource::kTcpStore: return "tcp-store";
  }
  return "unknown";
}

Runtime::~Runtime() = default;

namespace {

class SingleProcessRuntime final : public Runtime {
 public:
  explicit SingleProcessRuntime(const Bootstrap& b) : Runtime(b) {}
};

std::mutex g_mutex;
std::weak_ptr<Runtime> g_runtime;

}  // namespace

std::shared_ptr<Runtime> Runtime::acquire(const Bootstrap& b) {
  MOE_EP_CHECK(b.world_size >= 1, "Bootstrap.world_size = {} is invalid; expected >= 1", b.world_size);
  MOE_EP_CHECK(b.rank >= 0 && b.rank < b.world_size,
               "Bootstrap.rank = {} is invalid; expected 0..{}", b.rank, b.world_size - 1);
  MOE_EP_CHECK_CODE(b.comm == CommSource::kSingleProcess && b.world_size == 1,
                    ErrorCode::kUnsupported,
                    "Bootstrap.comm = {} with world_size = {} is not supported yet; expected "
                    "single-process with world_size 1", comm_source_name(b.comm), b.world_size);
  std::lock_guard<std::mutex> lock(g_mutex);
  if (auto existing = g_runtime.lock()) {
    const Bootstrap& e = existing->bootstrap();
    MOE_EP_CHECK_CODE(e.world_size == b.world_size && e.rank == b.rank && e.device == b.device &&
                          e.comm == b.comm,
                      ErrorCode::kRuntime,
                      "Runtime::acquire: a runtime for world_size={} rank={} device={} already "
                      "exists in this process; requested world_size={} rank={} device={}",
                      e.world_size, e.rank, e.device.str(), b.world_size, b.rank, b.device.str());
    return existing;
  }
  auto rt = std::shared_ptr<Runtime>(new SingleProcessRuntime(b));
  g_runtime = rt;
  return rt;
}

}  // namespace moe_ep
