// The one-GPU expert-parallel simulation as an ordinary layer: Bootstrap{comm = simulated,
// device = cuda:N} on R threads of one process, each rank calling Layer::create / forward like
// on the CPU. Every rank owns its device workspace and its local experts (the SM90 expert
// engine); the ranks of one layer share a group, and one forward runs as
//
//   each rank: quantize its x on its stream, record `ready`           (rank's stream)
//   barrier "prepare" (host, bounded by timeout_ms, carries a rank's failure to the others)
//   rank 0:    wait for every rank's `ready`, then dispatch over all ranks, every rank's local
//              experts, combine, reduce (one launch per EP step, blockIdx.y = rank), record `done`
//   barrier "launched"; the other ranks make their streams wait for `done`
//
// so the kernels are those of the NCCL path with the simulation's peer policy, the device work
// stays asynchronous, and the ranks meet on the host. Eager only: a CUDA graph cannot span the
// ranks' threads (the single-threaded SimEpGroup, cuda/ep/sim_group.h, is what `moe_ep bench
// --simulate-ranks-on-one-gpu` captures).
#include <algorithm>
#include <map>
#include <mutex>

#include <cuda_runtime.h>
#include <fmt/format.h>

#include "core/check.h"
#include "core/fault_points.h"
#include "core/layer_impl.h"
#include "core/runtime_state.h"
#include "core/sim_transport.h"
#include "cuda/cuda_layers.h"
#include "cuda/device_buffer.h"
#include "cuda/device_info.h"
#include "cuda/ep/ep_launch.h"
#include "cuda/ep/ep_rank_engine.h"
#include "cuda/errors.h"

namespace moe_ep::cuda::ep {
namespace {

// What the R ranks of one layer share. Rank r writes only its own entries; rank 0 reads all of
// them between the two barriers of a forward.
struct SimGroup {
  explicit SimGroup(int R) : windows(R), engines(R), args(R), ready(R, nullptr) {}
  ~SimGroup() {
    for (cudaEvent_t e : ready)
      if (e) MOE_EP_CUDA_IGNORE(cudaEventDestroy(e));
    if (done) MOE_EP_CUDA_IGNORE(cudaEventDestroy(done));
  }
  DeviceWorkspaceLayout layout;
  std::vector<DeviceBuffer> windows;
  std::vector<std::unique_ptr<EpRankEngine>> engines;
  std::vector<EpRankArgs> args;
  std::vector<cudaEvent_t> ready;
  cudaEvent_t done = nullptr;
  SimPeerWindows peers;
  int sm_count = 0;
};

// The group of layer `index` of a simulated world, made by the first rank to create it.
std::shared_ptr<SimGroup> group_for(const void* world, int64_t index, int R) {
  static std::mutex mutex;
  static std::map<std::pair<const void*, int64_t>, std::weak_ptr<SimGroup>> groups;
  std::lock_guard<std::mutex> lock(mutex);
  auto& slot = groups[{world, index}];
  if (auto g = slot.lock()) return g;
  auto g = std::make_shared<SimGroup>(R);
  slot = g;
  return g;
}

class SimGpuLayer final : public Layer::Impl {
 public:
  explicit SimGpuLayer(const LayerRequest& req) {
    Runtime& rt = *req.runtime;
    detail::RuntimeState& state = rt.state();
    transport_ = dynamic_cast<detail::SimTransport*>(&state.transport());
    MOE_EP_CHECK_CODE(transport_ != nullptr, ErrorCode::kInternal,
                      "the simulated GPU layer needs the simulated transport; the runtime has '{}'",
                      state.transport().name());
    R_ = rt.world_size();
    rank_ = rt.rank();
    device_ = rt.device();
    timeout_ms_ = rt.bootstrap().timeout_ms;
    layer_index_ = state.next_layer_index();
    const std::string tag = fmt::format("create layer {}", layer_index_);
    MOE_EP_CHECK_CODE(R_ <= kMaxLaunchRanks, ErrorCode::kUnsupported,
                      "Bootstrap.world_size = {}: simulated ranks on one GPU run up to {} ranks", R_,
                      kMaxLaunchRanks);
    group_ = group_for(transport_->world().get(), layer_index_, R_);
    const MoeDesc& d = req.desc;
    std::string error;
    std::exception_ptr local;
    try {
      MOE_EP_CUDA_CHECK(cudaSetDevice(device_.index));
      SimGroup& g = *group_;
      g.layout = device_workspace_layout({R_, d.fleet.num_experts, d.fleet.max_tokens_per_rank,
                                          d.fleet.hidden_size, d.intermediate_size, d.top_k});
      g.windows[rank_] = DeviceBuffer(static_cast<size_t>(g.layout.total_bytes));
      EpRankEngine::init_window(g.layout, g.windows[rank_].get<std::byte>());
      g.engines[rank_] = std::make_unique<EpRankEngine>(device_, R_, rank_, d, req.overrides, req.weights,
                                                        g.layout, g.windows[rank_].get<std::byte>(), timeout_ms_);
      MOE_EP_CUDA_CHECK(cudaEventCreateWithFlags(&g.ready[rank_], cudaEventDisableTiming));
      if (rank_ == 0) {
        MOE_EP_CUDA_CHECK(cudaEventCreateWithFlags(&g.done, cudaEventDisableTiming));
        g.sm_count = device_info(device_.index).sm_count;
      }
    } catch (const Error& e) {
      local = std::current_exception();
      error = e.message();
    }
    try {
      transport_->barrier(tag, error);  // after it every rank's window and engine exist
    } catch (...) {
      if (local) std::rethrow_exception(local);
      throw;
    }
    if (rank_ == 0)
      for (int q = 0; q < R_; ++q) group_->peers.windows[q] = group_->windows[q].get<std::byte>();
    transport_->barrier(tag + " peers");
    EpRankEngine& mine = *group_->engines[rank_];
    info.config = mine.selected();
    info.notes = fmt::format(
        "rank {} of {} simulated ranks on {} owns experts [{}, {}); device workspace {} bytes ({}); "
        "local experts: the SM90 expert engine over {} slot rows\n{}",
        rank_, R_, device_.str(), rank_ * mine.geometry().num_local_experts,
        (rank_ + 1) * mine.geometry().num_local_experts, group_->layout.total_bytes,
        group_->layout.shape.str(), mine.slot_rows(), mine.local_experts().notes());
  }

  void forward(const ForwardArgs& args) override {
    const std::string tag = fmt::format("layer {} forward {}", layer_index_, forward_index_++);
    SimGroup& g = *group_;
    auto stream = static_cast<cudaStream_t>(args.stream);
    std::string error;
    std::exception_ptr local;  // this rank's own failure, rethrown to it after the meeting
    try {
      MOE_EP_CUDA_CHECK(cudaSetDevice(device_.index));
      // The previous forward's group launch (on rank 0's stream) reads this rank's send rows
      // and writes its y: nothing of this forward may start before it ends.
      MOE_EP_CUDA_CHECK(cudaStreamWaitEvent(stream, g.done, 0));
      g.args[rank_] = g.engines[rank_]->prepare(args, stream);
      g.args[rank_].rank = rank_;
      MOE_EP_CUDA_CHECK(cudaEventRecord(g.ready[rank_], stream));
      detail::fault_point(rank_, "dispatch");
    } catch (const Error& e) {
      error = e.message();
      local = std::current_exception();
    } catch (const std::exception& e) {
      error = e.what();
      local = std::current_exception();
    }
    try {
      meet("prepare of " + tag, error);
    } catch (...) {
      if (local) std::rethrow_exception(local);
      throw;
    }
    if (rank_ == 0) {
      try {
        launch_group(stream);
      } catch (const Error& e) {
        error = e.message();
      }
    }
    detail::fault_point(rank_, "combine");
    meet("launch of " + tag, error);
    if (rank_ != 0) MOE_EP_CUDA_CHECK(cudaStreamWaitEvent(stream, g.done, 0));
  }

  // Layer::forward rejected this rank's arguments: the others fail at the first barrier too.
  void fail_forward(const std::string& message) override {
    const std::string tag = fmt::format("layer {} forward {}", layer_index_, forward_index_++);
    try {
      meet("prepare of " + tag, message);
    } catch (...) {
      // Expected: every rank throws; the caller rethrows this rank's own error.
    }
  }

  // Synchronizes the device.
  uint32_t read_error_flags(bool clear) override {
    EpRankEngine& e = *group_->engines[rank_];
    const EpSync sync = e.read_sync();
    const std::string timeout = describe_timeout(sync, rank_, timeout_ms_, "simulated-rank device barrier");
    MOE_EP_CHECK_CODE(timeout.empty(), ErrorCode::kTimeout, "layer {}: {}", layer_index_, timeout);
    uint32_t flags = (sync.error_flags & kEpErrorIdOutOfRange) ? kErrorExpertIdOutOfRange : 0u;
    flags |= e.local_experts().read_error_flags(clear);
    if (clear && sync.error_flags) e.clear_errors();
    return flags;
  }

 private:
  void meet(const std::string& phase, const std::string& error) { transport_->barrier(phase, error); }

  void launch_group(cudaStream_t stream) {
    SimGroup& g = *group_;
    EpHostLaunch launch;
    launch.geo = g.engines[0]->geometry();
    launch.num_ranks = R_;
    int64_t max_t = 0;
    for (int q = 0; q < R_; ++q) {
      launch.ranks[q] = g.args[q];
      max_t = std::max<int64_t>(max_t, g.args[q].num_tokens);
      if (q != 0) MOE_EP_CUDA_CHECK(cudaStreamWaitEvent(stream, g.ready[q], 0));
    }
    auto step = [&](EpStep st) {
      launch.blocks_per_rank = ep_blocks_per_rank(st, launch.geo, max_t, R_, g.sm_count);
      MOE_EP_CUDA_CHECK(launch_ep_step_sim(st, launch, g.peers, stream));
    };
    step(EpStep::kDispatch);
    for (int q = 0; q < R_; ++q) g.engines[q]->run_local_experts(stream);
    step(EpStep::kCombine);
    for (int q = 0; q < R_; ++q) g.engines[q]->wait_shared_expert(launch.ranks[q], stream);
    step(EpStep::kReduce);
    MOE_EP_CUDA_CHECK(cudaEventRecord(g.done, stream));
  }

  detail::SimTransport* transport_ = nullptr;
  std::shared_ptr<SimGroup> group_;
  Device device_;
  int R_ = 1, rank_ = 0;
  int64_t timeout_ms_ = 0, layer_index_ = 0, forward_index_ = 0;
};

}  // namespace

std::unique_ptr<Layer::Impl> make_sim_gpu_layer(const LayerRequest& request) {
  return std::make_unique<SimGpuLayer>(request);
}

}  // namespace moe_ep::cuda::ep
