#include "moe_ep/runtime.h"

#include <charconv>
#include <chrono>
#include <mutex>
#include <vector>

#include <fmt/format.h>

#include "check.h"
#include "core/registry.h"
#include "moe_ep/backend.h"
#include "runtime_state.h"

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

std::string Bootstrap::str() const {
  std::string s = fmt::format("world_size={} rank={} device={} comm={} timeout_ms={}", world_size,
                              rank, device.str(), comm_source_name(comm), timeout_ms);
  if (nccl_comm) s += fmt::format(" nccl_comm={}", nccl_comm);
  if (!rendezvous.empty()) s += fmt::format(" rendezvous={}", rendezvous);
  return s;
}

namespace {

// The world fields of a bootstrap (everything but the rank).
bool same_world(const Bootstrap& a, const Bootstrap& b) {
  return a.world_size == b.world_size && a.device == b.device && a.comm == b.comm &&
         a.nccl_comm == b.nccl_comm && a.rendezvous == b.rendezvous &&
         a.timeout_ms == b.timeout_ms;
}

std::string world_str(const Bootstrap& b) {
  Bootstrap w = b;
  std::string s = w.str();
  // Drop " rank=N": the world is the same for every rank.
  const auto pos = s.find(" rank=");
  if (pos != std::string::npos) s.erase(pos, s.find(' ', pos + 1) - pos);
  return s;
}

bool is_nccl_source(CommSource c) {
  return c == CommSource::kNcclComm || c == CommSource::kUniqueIdFile || c == CommSource::kTcpStore;
}

bool valid_host_port(const std::string& s) {
  const auto colon = s.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 >= s.size()) return false;
  int port = 0;
  const char* first = s.data() + colon + 1;
  const char* last = s.data() + s.size();
  const auto [ptr, ec] = std::from_chars(first, last, port);
  return ec == std::errc() && ptr == last && port >= 1 && port <= 65535;
}

void check_bootstrap(const Bootstrap& b) {
  MOE_EP_CHECK(b.world_size >= 1, "Bootstrap.world_size = {} is invalid; expected >= 1",
               b.world_size);
  MOE_EP_CHECK(b.rank >= 0 && b.rank < b.world_size,
               "Bootstrap.rank = {} is invalid; expected 0..{} (world_size = {})", b.rank,
               b.world_size - 1, b.world_size);
  MOE_EP_CHECK(b.timeout_ms >= 1, "Bootstrap.timeout_ms = {} is invalid; expected >= 1",
               b.timeout_ms);
  MOE_EP_CHECK(b.device.index >= 0, "Bootstrap.device = {} is invalid; expected an index >= 0",
               b.device.str());
  if (b.comm != CommSource::kNcclComm)
    MOE_EP_CHECK(b.nccl_comm == nullptr,
                 "Bootstrap.nccl_comm is given but Bootstrap.comm = {}; set comm = nccl-comm to "
                 "use it, or leave nccl_comm null", comm_source_name(b.comm));
  if (b.comm != CommSource::kUniqueIdFile && b.comm != CommSource::kTcpStore)
    MOE_EP_CHECK(b.rendezvous.empty(),
                 "Bootstrap.rendezvous = '{}' is given but Bootstrap.comm = {}; it is used by "
                 "unique-id-file and tcp-store only", b.rendezvous, comm_source_name(b.comm));

  switch (b.comm) {
    case CommSource::kSingleProcess:
      MOE_EP_CHECK(b.world_size == 1,
                   "Bootstrap.comm = single-process needs world_size 1; got world_size = {} "
                   "(use comm = simulated for in-process ranks, or an NCCL source)",
                   b.world_size);
      return;
    case CommSource::kSimulated:
      return;
    case CommSource::kNcclComm:
      MOE_EP_CHECK(b.nccl_comm != nullptr,
                   "Bootstrap.nccl_comm is null; comm = nccl-comm expects the caller's "
                   "ncclComm_t");
      break;
    case CommSource::kUniqueIdFile:
      MOE_EP_CHECK(!b.rendezvous.empty(),
                   "Bootstrap.rendezvous is empty; comm = unique-id-file expects the path of "
                   "the file through which the ranks exchange the NCCL unique id");
      break;
    case CommSource::kTcpStore:
      MOE_EP_CHECK(valid_host_port(b.rendezvous),
                   "Bootstrap.rendezvous = '{}' is invalid; comm = tcp-store expects host:port "
                   "with a port in 1..65535", b.rendezvous);
      break;
    default:
      MOE_EP_FAIL(ErrorCode::kInvalidArgument,
                  "Bootstrap.comm = {} is not a known communicator source; expected "
                  "single-process, simulated, nccl-comm, unique-id-file or tcp-store",
                  static_cast<int>(b.comm));
  }
  MOE_EP_CHECK_CODE(b.device.type == DeviceType::kCUDA, ErrorCode::kUnsupported,
                    "Bootstrap.comm = {} needs a CUDA device (one process per GPU); got device = "
                    "{} (use comm = simulated for in-process ranks on the CPU)",
                    comm_source_name(b.comm), b.device.str());
}

// The registered transport of the bootstrap's source and device (kUnsupported otherwise).
const detail::TransportEntry& transport_for(const Bootstrap& b) {
  std::string reason;
  const detail::TransportEntry* t = detail::find_transport(b.comm, b.device.type, &reason);
  MOE_EP_CHECK_CODE(t != nullptr, ErrorCode::kUnsupported, "{}", reason);
  return *t;
}

// The one world of this process: its bootstrap and its live ranks (weak: a runtime lives as
// long as its callers hold it).
struct Registry {
  std::mutex mutex;
  Bootstrap world;
  std::weak_ptr<void> shared;  // what the transport's ranks share (TransportEntry::create)
  std::vector<std::weak_ptr<Runtime>> ranks;

  bool alive() const {
    for (const auto& r : ranks)
      if (!r.expired()) return true;
    return false;
  }
};

Registry& registry() {
  static Registry r;
  return r;
}

}  // namespace

Runtime::Runtime(const Bootstrap& bootstrap, std::unique_ptr<detail::RuntimeState> state)
    : bootstrap_(bootstrap), state_(std::move(state)) {}

Runtime::~Runtime() = default;

std::shared_ptr<Runtime> Runtime::acquire(const Bootstrap& b) {
  check_bootstrap(b);
  const detail::TransportEntry& transport = transport_for(b);
  Registry& reg = registry();
  std::lock_guard<std::mutex> lock(reg.mutex);
  std::shared_ptr<void> shared;
  if (reg.alive()) {
    MOE_EP_CHECK_CODE(same_world(reg.world, b), ErrorCode::kRuntime,
                      "Runtime::acquire: this process holds the world [{}]; requested [{}]: one "
                      "world per process: release every reference to the first world before "
                      "acquiring another", world_str(reg.world), world_str(b));
    if (auto existing = reg.ranks[b.rank].lock()) return existing;
    MOE_EP_CHECK_CODE(!is_nccl_source(b.comm), ErrorCode::kRuntime,
                      "Runtime::acquire: this process holds rank {} of the NCCL world [{}]; an "
                      "NCCL world has one rank per process (requested rank {})",
                      [&] {
                        for (size_t q = 0; q < reg.ranks.size(); ++q)
                          if (!reg.ranks[q].expired()) return static_cast<int>(q);
                        return -1;
                      }(), world_str(reg.world), b.rank);
    shared = reg.shared.lock();
  } else {
    reg.world = b;
    reg.ranks.assign(b.world_size, {});
  }
  auto state = std::make_unique<detail::RuntimeState>(transport.create(b, shared),
                                                      transport.parts(b));
  reg.shared = shared;
  auto rt = std::shared_ptr<Runtime>(new Runtime(b, std::move(state)));
  reg.ranks[b.rank] = rt;
  return rt;
}

uint32_t Runtime::parts() const { return state_->parts(); }

const Workspace& Runtime::reserve_workspace(const WorkspaceShape& shape) {
  const bool on_device = device().type == DeviceType::kCUDA;
  MOE_EP_CHECK_CODE(!on_device || is_nccl_source(bootstrap_.comm), ErrorCode::kUnsupported,
                    "Runtime::reserve_workspace: a single-process runtime on {} has no symmetric "
                    "workspace (the world-size-1 CUDA layer keeps its own scratch); acquire an "
                    "NCCL runtime (comm = nccl-comm, unique-id-file or tcp-store)", device().str());
  MOE_EP_CHECK(shape.world_size == world_size(),
               "Runtime::reserve_workspace: shape.world_size = {} differs from the runtime's "
               "world_size = {}", shape.world_size, world_size());
  // Validates the shape.
  const int64_t bytes = on_device ? device_workspace_layout(shape).total_bytes
                                  : workspace_layout(shape).total_bytes;
  detail::RuntimeState& st = *state_;
  std::lock_guard<std::mutex> lock(st.mutex());
  if (st.workspace()) {
    const std::string misfit = on_device ? device_workspace_misfit(st.workspace()->shape(), shape)
                                         : workspace_misfit(st.workspace()->shape(), shape);
    MOE_EP_CHECK_CODE(misfit.empty(), ErrorCode::kRuntime, "rank {}: the workspace does not fit: {}",
                      rank(), misfit);
    return *st.workspace();
  }
  detail::Transport& t = st.transport();
  t.allocate_window(bytes);
  std::vector<std::byte*> bases(world_size());
  for (int q = 0; q < world_size(); ++q) bases[q] = t.peer_window(q);
  if (on_device)
    st.workspace().emplace(device_workspace_layout(shape), std::move(bases), rank());
  else
    st.workspace().emplace(workspace_layout(shape), std::move(bases), rank());
  return *st.workspace();
}

const Workspace* Runtime::workspace() const {
  std::lock_guard<std::mutex> lock(state_->mutex());
  return state_->workspace() ? &*state_->workspace() : nullptr;
}

void Runtime::barrier(std::string_view phase) { state_->transport().barrier(phase); }

void Runtime::abort(std::string_view reason) noexcept {
  if (world_size() > 1) state_->transport().abort(reason);
}

}  // namespace moe_ep
