// The CUDA layer across NCCL ranks (one process per GPU): this rank's quantize -> dispatch
// (device puts into the owners' receive buffers, "dispatch" barrier) -> the local experts (the
// SM90 expert engine) -> combine (puts back into the sources' combine rows, "combine" barrier)
// -> reduce, all on the caller's stream with no host synchronization (CUDA-graph capturable).
// Layout and protocol: moe_ep/workspace.h ("device workspace"); kernels: cuda/kernels/ep_*.cuh
// with the NCCL LSA policy inside one NVLink domain, GIN beyond it (cuda/nccl/nccl_peers.cuh).
#include <exception>

#include <fmt/format.h>

#include "core/check.h"
#include "core/layer_impl.h"
#include "core/runtime_state.h"
#include "cuda/device_info.h"
#include "cuda/ep/ep_rank_engine.h"
#include "cuda/errors.h"
#include "cuda/nccl/nccl_ep_launch.h"
#include "cuda/nccl/nccl_transport.h"

namespace moe_ep {
namespace {

using cuda::ep::EpHostLaunch;
using cuda::ep::EpStep;
using cuda::ep::NcclPeerKind;

class CudaEpLayer final : public Layer::Impl {
 public:
  explicit CudaEpLayer(const LayerRequest& req) {
    Runtime& rt = *req.runtime;
    detail::RuntimeState& state = rt.state();
    transport_ = dynamic_cast<cuda::nccl::NcclTransport*>(&state.transport());
    MOE_EP_CHECK_CODE(transport_ != nullptr, ErrorCode::kInternal,
                      "the CUDA EP layer needs the NCCL transport; the runtime has '{}'",
                      state.transport().name());
    device_ = rt.device();
    rank_ = rt.rank();
    timeout_ms_ = rt.bootstrap().timeout_ms;
    layer_index_ = state.next_layer_index();
    MOE_EP_CUDA_CHECK(cudaSetDevice(device_.index));
    sm_count_ = cuda::device_info(device_.index).sm_count;

    // Collective: the workspace window first (every rank reserves the same shape), then the
    // local engine; a rank whose engine fails tells the others at the "create layer" barrier.
    const MoeDesc& d = req.desc;
    const Workspace& ws = rt.reserve_workspace({rt.world_size(), d.fleet.num_experts,
                                                d.fleet.max_tokens_per_rank, d.fleet.hidden_size,
                                                d.intermediate_size, d.top_k});
    std::string error;
    std::exception_ptr local;
    try {
      kind_ = transport_->lsa_covers_world() ? NcclPeerKind::kLsa : NcclPeerKind::kGin;
      MOE_EP_CHECK_CODE(kind_ == NcclPeerKind::kLsa || d.quantize_input,
                        ErrorCode::kUnsupported,
                        "desc.quantize_input = false across GIN (ranks beyond one NVLink "
                        "domain) is not supported: GIN puts read from the send regions of the "
                        "workspace");
      if (layer_index_ == 0) cuda::ep::EpRankEngine::init_window(ws.device_layout(), ws.base(rank_));
      engine_ = std::make_unique<cuda::ep::EpRankEngine>(device_, rt.world_size(), rank_, d,
                                                         req.overrides, req.weights, ws.device_layout(),
                                                         ws.base(rank_), timeout_ms_);
    } catch (const Error& e) {
      local = std::current_exception();
      error = e.message();
    }
    try {
      transport_->barrier(fmt::format("create layer {}", layer_index_), error);
    } catch (...) {
      if (local) std::rethrow_exception(local);
      throw;
    }
    info.notes = fmt::format(
        "rank {} of {} NCCL ranks owns experts [{}, {}); {} peers; device workspace {} bytes "
        "shared by every layer of the rank ({}); {}\n{}",
        rank_, rt.world_size(), rank_ * engine_->geometry().num_local_experts,
        (rank_ + 1) * engine_->geometry().num_local_experts,
        kind_ == NcclPeerKind::kLsa ? "LSA (NVLink)" : "GIN", ws.bytes(), transport_->describe(),
        fmt::format("local experts: the SM90 expert engine over {} slot rows", engine_->slot_rows()),
        engine_->local_experts().notes());
    info.config = engine_->selected();
  }

  void forward(const ForwardArgs& args) override {
    MOE_EP_CUDA_CHECK(cudaSetDevice(device_.index));
    auto stream = static_cast<cudaStream_t>(args.stream);
    last_stream_ = stream;
    EpHostLaunch launch;
    launch.geo = engine_->geometry();
    launch.num_ranks = 1;
    launch.ranks[0] = engine_->prepare(args, stream);
    launch.ranks[0].rank = rank_;
    run_steps(launch, stream);
  }

  // Layer::forward rejected this rank's arguments: take part with no tokens, so the other ranks
  // finish their forward (their rows still need this rank's experts) instead of timing out.
  void fail_forward(const std::string&) override {
    try {
      MOE_EP_CUDA_CHECK(cudaSetDevice(device_.index));
      EpHostLaunch launch;
      launch.geo = engine_->geometry();
      launch.num_ranks = 1;
      launch.ranks[0].window = engine_->window();
      launch.ranks[0].rank = rank_;
      launch.ranks[0].num_tokens = 0;
      run_steps(launch, last_stream_);
    } catch (...) {
      // Must not throw: the caller rethrows this rank's own error.
    }
  }

  // Synchronizes the device.
  uint32_t read_error_flags(bool clear) override {
    const cuda::ep::EpSync sync = engine_->read_sync();
    const std::string timeout = cuda::ep::describe_timeout(
        sync, rank_, timeout_ms_,
        kind_ == NcclPeerKind::kLsa ? "NCCL LSA barrier" : "NCCL GIN signal barrier");
    MOE_EP_CHECK_CODE(timeout.empty(), ErrorCode::kTimeout, "layer {}: {}", layer_index_, timeout);
    uint32_t flags = (sync.error_flags & cuda::ep::kEpErrorIdOutOfRange) ? kErrorExpertIdOutOfRange : 0u;
    flags |= engine_->local_experts().read_error_flags(clear);
    if (clear && sync.error_flags) engine_->clear_errors();
    return flags;
  }

 private:
  void run_steps(EpHostLaunch& launch, cudaStream_t stream) {
    const int64_t T = launch.ranks[0].num_tokens;
    auto step = [&](EpStep st) {
      launch.blocks_per_rank = cuda::ep::ep_blocks_per_rank(st, launch.geo, T, 1, sm_count_);
      MOE_EP_CUDA_CHECK(cuda::ep::launch_ep_step_nccl(st, launch, kind_, transport_->dev_comm(),
                                                      transport_->window(), stream));
    };
    step(EpStep::kDispatch);
    engine_->run_local_experts(stream);
    step(EpStep::kCombine);
    engine_->wait_shared_expert(launch.ranks[0], stream);
    if (T > 0) step(EpStep::kReduce);
  }

  cuda::nccl::NcclTransport* transport_ = nullptr;
  std::unique_ptr<cuda::ep::EpRankEngine> engine_;
  NcclPeerKind kind_ = NcclPeerKind::kLsa;
  Device device_;
  int rank_ = 0, sm_count_ = 0;
  int64_t timeout_ms_ = 0, layer_index_ = 0;
  cudaStream_t last_stream_ = nullptr;
};

}  // namespace

namespace cuda::nccl {
std::unique_ptr<Layer::Impl> make_nccl_ep_layer(const LayerRequest& request) {
  return std::make_unique<CudaEpLayer>(request);
}
}  // namespace cuda::nccl

}  // namespace moe_ep
