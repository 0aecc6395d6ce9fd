#include "cuda/ep/ep_rank_engine.h"

#include <fmt/format.h>

#include "core/check.h"
#include "core/device_transport.h"
#include "cuda/errors.h"
#include "cuda/kernels/sm90_nvfp4_quantize.h"
#include "cuda/kernels/sm90_q8_quantize.h"
#include "moe_ep/formats.h"
#include "moe_ep/quant.h"

namespace moe_ep::cuda::ep {

using Region = DeviceWorkspaceRegionId;

EpRankEngine::EpRankEngine(Device device, int world_size, int rank, const FleetParams& fleet,
                           const KernelConfig& config, const WeightPack& local_weights,
                           const DeviceWorkspaceLayout& layout, std::byte* window, int64_t timeout_ms)
    : device_(device), config_(config), window_(window) {
  const WorkspaceShape need{world_size, fleet.num_experts, fleet.max_tokens_per_rank,
                            fleet.hidden_size, config.intermediate_size, config.top_k};
  const std::string misfit = device_workspace_misfit(layout.shape, need);
  MOE_EP_CHECK_CODE(misfit.empty(), ErrorCode::kRuntime, "rank {}: the device workspace does not fit: {}",
                    rank, misfit);
  MOE_EP_CHECK_CODE(world_size <= (1 << 20), ErrorCode::kUnsupported, "world_size = {} is too large",
                    world_size);
  nvfp4_ = config.family == "nvfp4";
  const int64_t H = fleet.hidden_size, K = config.top_k;
  geo_.world_size = world_size;
  geo_.num_experts = static_cast<int32_t>(fleet.num_experts);
  geo_.num_local_experts = static_cast<int32_t>(fleet.num_experts / world_size);
  geo_.top_k = static_cast<int32_t>(K);
  geo_.hidden = static_cast<int32_t>(H);
  geo_.slots_per_source = static_cast<int32_t>(fleet.max_tokens_per_rank * K);
  geo_.code_bytes = static_cast<int32_t>(nvfp4_ ? H / 2 : H);
  geo_.scale_bytes = static_cast<int32_t>(nvfp4_ ? H / kNvBlock : H / kMxBlock);
  geo_.has_global = nvfp4_ ? 1 : 0;
  geo_.timeout_ns = static_cast<uint64_t>(timeout_ms) * 1000000ull;
  for (int i = 0; i < kNumDeviceWorkspaceRegions; ++i) geo_.offset[i] = layout.regions[i].offset;
  slot_rows_ = static_cast<int64_t>(world_size) * geo_.slots_per_source;

  // The local experts: a world-size-1 layer on this GPU outside the process's NCCL world.
  local_runtime_ = detail::make_local_runtime(device);
  FleetParams local_fleet{geo_.num_local_experts, slot_rows_, H};
  KernelConfig local_config = config;
  local_config.top_k = 1;
  local_config.quantize_input = false;
  local_ = Layer::create(local_runtime_, local_fleet, local_config, local_weights);
}

EpRankEngine::~EpRankEngine() = default;

EpRankArgs EpRankEngine::prepare(const ForwardArgs& args, cudaStream_t stream) {
  EpRankArgs r;
  r.window = window_;
  r.rank = 0;  // set by the caller (the engine does not know which slot of a launch it is)
  const int64_t T = config_.quantize_input ? args.x.shape[0] : args.a.shape[0];
  r.num_tokens = static_cast<int32_t>(T);
  r.topk_ids = args.topk_ids.data;
  r.ids_are_int64 = args.topk_ids.dtype == DType::kI64;
  r.topk_weights = args.topk_weights.ptr<const float>();
  r.y = args.y.ptr<uint16_t>();
  if (!config_.quantize_input) {
    r.src_codes = args.a.ptr<const uint8_t>();
    r.src_scales = args.a_scale.ptr<const uint8_t>();
    r.src_global = nvfp4_ ? args.a_global.ptr<const float>() : nullptr;
    r.src_in_window = 0;
    return r;
  }
  auto* codes = reinterpret_cast<uint8_t*>(window_ + geo_.at(Region::kSendCodes));
  auto* scales = reinterpret_cast<uint8_t*>(window_ + geo_.at(Region::kSendScales));
  auto* global = reinterpret_cast<float*>(window_ + geo_.at(Region::kSendGlobal));
  r.src_codes = codes;
  r.src_scales = scales;
  r.src_global = nvfp4_ ? global : nullptr;
  r.src_in_window = 1;
  if (T == 0) return r;
  if (nvfp4_) {
    Nvfp4QuantizeParams q;
    q.in = args.x.data;
    q.in_is_bf16 = 1;
    q.cols = geo_.hidden;
    q.max_rows = static_cast<int32_t>(T);
    q.packed = codes;
    q.scales = scales;
    q.global = global;
    MOE_EP_CUDA_CHECK(launch_sm90_nvfp4_quantize(q, stream));
  } else {
    Q8QuantizeParams q;
    q.x = args.x.ptr<const uint16_t>();
    q.rows = T;
    q.cols = geo_.hidden;
    q.q = codes;
    q.scales = scales;
    MOE_EP_CUDA_CHECK(launch_sm90_q8_quantize(q, stream));
  }
  return r;
}

void EpRankEngine::run_local_experts(cudaStream_t stream) {
  const Device d = device_;
  const int64_t S = slot_rows_;
  ForwardArgs a;
  a.a = TensorView::contiguous(window_ + geo_.at(Region::kRecvCodes), DType::kU8, {S, geo_.code_bytes}, d);
  a.a_scale = TensorView::contiguous(window_ + geo_.at(Region::kRecvScales), DType::kU8,
                                     {S, geo_.scale_bytes}, d);
  if (nvfp4_)
    a.a_global = TensorView::contiguous(window_ + geo_.at(Region::kRecvGlobal), DType::kF32, {S}, d);
  a.topk_ids = TensorView::contiguous(window_ + geo_.at(Region::kRecvExpert), DType::kI32, {S, 1}, d);
  a.topk_weights = TensorView::contiguous(window_ + geo_.at(Region::kRecvWeight), DType::kF32, {S, 1}, d);
  a.y = TensorView::contiguous(window_ + geo_.at(Region::kExpertOut), DType::kBF16, {S, geo_.hidden}, d);
  a.stream = stream;
  local_->forward(a);
}

EpSync EpRankEngine::read_sync() const {
  MOE_EP_CUDA_CHECK(cudaSetDevice(device_.index));
  MOE_EP_CUDA_CHECK(cudaDeviceSynchronize());
  EpSync s;
  MOE_EP_CUDA_CHECK(cudaMemcpy(&s, window_ + geo_.at(Region::kSync), sizeof(s), cudaMemcpyDeviceToHost));
  return s;
}

void EpRankEngine::clear_errors() {
  MOE_EP_CUDA_CHECK(cudaSetDevice(device_.index));
  MOE_EP_CUDA_CHECK(cudaDeviceSynchronize());
  // error_flags, timeout_phase, timeout_peer, timeout_epoch: words 2..5 of EpSync.
  MOE_EP_CUDA_CHECK(cudaMemset(window_ + geo_.at(Region::kSync) + offsetof(EpSync, error_flags), 0,
                               offsetof(EpSync, broken) - offsetof(EpSync, error_flags)));
  MOE_EP_CUDA_CHECK(cudaDeviceSynchronize());
}

void EpRankEngine::init_window(const DeviceWorkspaceLayout& layout, std::byte* window) {
  MOE_EP_CUDA_CHECK(cudaMemset(window, 0, layout.total_bytes));
  const WorkspaceRegion& expert = layout[Region::kRecvExpert];
  MOE_EP_CUDA_CHECK(cudaMemset(window + expert.offset, 0xFF, expert.bytes));
  MOE_EP_CUDA_CHECK(cudaDeviceSynchronize());
}

std::string describe_timeout(const EpSync& s, int rank, int64_t timeout_ms, const char* barrier_kind) {
  if (!(s.error_flags & kEpErrorPeerTimeout)) return "";
  return fmt::format("rank {} timed out in phase {} (barrier {}) waiting for rank {}: the {} wait "
                     "gave up after timeout_ms = {}; the world is broken (release it)",
                     rank, phase_name(s.timeout_phase), s.timeout_epoch, s.timeout_peer,
                     barrier_kind, timeout_ms);
}

}  // namespace moe_ep::cuda::ep
