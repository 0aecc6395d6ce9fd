#include "cuda/ep/ep_rank_engine.h"

#include <fmt/format.h>

#include "core/check.h"
#include "cuda/errors.h"
#include "cuda/kernels/sm90_nvfp4_quantize.h"
#include "cuda/kernels/sm90_q8_quantize.h"
#include "moe_ep/formats.h"
#include "moe_ep/quant.h"

namespace moe_ep::cuda::ep {

using Region = DeviceWorkspaceRegionId;

EpRankEngine::EpRankEngine(Device device, int world_size, int rank, const MoeDesc& desc,
                           const KernelOverrides& overrides, const WeightPack& local_weights,
                           const DeviceWorkspaceLayout& layout, std::byte* window, int64_t timeout_ms)
    : device_(device), desc_(desc), window_(window) {
  const FleetParams& fleet = desc.fleet;
  const WorkspaceShape need{world_size, fleet.num_experts, fleet.max_tokens_per_rank,
                            fleet.hidden_size, desc.intermediate_size, desc.top_k};
  const std::string misfit = device_workspace_misfit(layout.shape, need);
  MOE_EP_CHECK_CODE(misfit.empty(), ErrorCode::kRuntime, "rank {}: the device workspace does not fit: {}",
                    rank, misfit);
  MOE_EP_CHECK_CODE(world_size <= (1 << 20), ErrorCode::kUnsupported, "world_size = {} is too large",
                    world_size);
  const RecipeTraits& recipe = desc.traits();
  const int64_t H = fleet.hidden_size, K = desc.top_k;
  geo_.world_size = world_size;
  geo_.num_experts = static_cast<int32_t>(fleet.num_experts);
  geo_.num_local_experts = static_cast<int32_t>(fleet.num_experts / world_size);
  geo_.top_k = static_cast<int32_t>(K);
  geo_.hidden = static_cast<int32_t>(H);
  geo_.slots_per_source = static_cast<int32_t>(fleet.max_tokens_per_rank * K);
  geo_.code_bytes = static_cast<int32_t>(recipe.code_bytes(H));
  geo_.scale_bytes = static_cast<int32_t>(recipe.scale_count(H));
  geo_.has_global = recipe.global_scales ? 1 : 0;
  geo_.timeout_ns = static_cast<uint64_t>(timeout_ms) * 1000000ull;
  for (int i = 0; i < kNumDeviceWorkspaceRegions; ++i) geo_.offset[i] = layout.regions[i].offset;
  slot_rows_ = static_cast<int64_t>(world_size) * geo_.slots_per_source;

  // The local experts: every received slot row is one row of top_k = 1, already quantized.
  MoeDesc local = desc;
  local.fleet = {geo_.num_local_experts, slot_rows_, H};
  local.top_k = 1;
  local.quantize_input = false;
  local.shared_intermediate_size = 0;  // the rank's own tokens pass the shared expert, not its rows
  local_ = std::make_unique<Sm90ExpertEngine>(local, overrides, local_weights, device.index);
  if (const int64_t Is = desc.shared_intermediate_size; Is > 0) {
    const int64_t T = fleet.max_tokens_per_rank;
    shared_ = std::make_unique<Sm90SharedExpert>(H, Is, desc.activation_clamp, local_weights.shared_w13,
                                                 local_weights.shared_w2, T, device.index, /*own_scratch=*/false);
    side_ = std::make_unique<SideStream>(device.index);
    shared_h_ = DeviceBuffer(static_cast<size_t>(T * Is * 2));
    shared_o_ = DeviceBuffer(static_cast<size_t>(T * H * 2));
  }
}

EpRankEngine::~EpRankEngine() = default;

EpRankArgs EpRankEngine::prepare(const ForwardArgs& args, cudaStream_t stream) {
  EpRankArgs r;
  r.window = window_;
  r.rank = 0;  // set by the caller (the engine does not know which slot of a launch it is)
  const int64_t T = desc_.quantize_input ? args.x.shape[0] : args.a.shape[0];
  r.num_tokens = static_cast<int32_t>(T);
  r.topk_ids = args.topk_ids.data;
  r.ids_are_int64 = args.topk_ids.dtype == DType::kI64;
  r.topk_weights = args.topk_weights.ptr<const float>();
  r.y = args.y.ptr<uint16_t>();
  shared_done_ = nullptr;
  if (shared_ && T > 0) {
    shared_->forward(args.x.ptr<const uint16_t>(), shared_o_.get<uint16_t>(), shared_h_.get<uint16_t>(), T,
                     side_->fork(stream));
    shared_done_ = side_->join();
    r.y_add = shared_o_.get<uint16_t>();
  }
  const bool global = desc_.traits().global_scales;
  if (!desc_.quantize_input) {
    r.src_codes = args.a.ptr<const uint8_t>();
    r.src_scales = args.a_scale.ptr<const uint8_t>();
    r.src_global = global ? args.a_global.ptr<const float>() : nullptr;
    r.src_in_window = 0;
    return r;
  }
  auto* codes = reinterpret_cast<uint8_t*>(window_ + geo_.at(Region::kSendCodes));
  auto* scales = reinterpret_cast<uint8_t*>(window_ + geo_.at(Region::kSendScales));
  auto* global_scale = reinterpret_cast<float*>(window_ + geo_.at(Region::kSendGlobal));
  r.src_codes = codes;
  r.src_scales = scales;
  r.src_global = global ? global_scale : nullptr;
  r.src_in_window = 1;
  if (T == 0) return r;
  if (desc_.traits().fp4_activations) {
    Nvfp4QuantizeParams q;
    q.in = args.x.data;
    q.in_is_bf16 = 1;
    q.cols = geo_.hidden;
    q.max_rows = static_cast<int32_t>(T);
    q.packed = codes;
    q.scales = scales;
    q.global = global_scale;
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
  Sm90Binding b;
  b.num_tokens = slot_rows_;
  b.a = reinterpret_cast<const uint8_t*>(window_ + geo_.at(Region::kRecvCodes));
  b.a_scale = reinterpret_cast<const uint8_t*>(window_ + geo_.at(Region::kRecvScales));
  if (geo_.has_global) b.a_global = reinterpret_cast<const float*>(window_ + geo_.at(Region::kRecvGlobal));
  b.topk_ids = window_ + geo_.at(Region::kRecvExpert);
  b.ids_int64 = false;
  b.topk_weights = reinterpret_cast<const float*>(window_ + geo_.at(Region::kRecvWeight));
  b.y = reinterpret_cast<uint16_t*>(window_ + geo_.at(Region::kExpertOut));
  MOE_EP_CUDA_CHECK(cudaSetDevice(device_.index));
  local_->run(b, stream);
}

void EpRankEngine::wait_shared_expert(const EpRankArgs& args, cudaStream_t stream) {
  if (args.y_add == nullptr || shared_done_ == nullptr) return;
  MOE_EP_CUDA_CHECK(cudaStreamWaitEvent(stream, shared_done_, 0));
  shared_done_ = nullptr;
}

SelectedConfig EpRankEngine::selected() const {
  SelectedConfig out = local_->selected();
  if (shared_)
    out.add("shared_expert", fmt::format("bf16, Is = {}, over the rank's own tokens on a second stream beside "
                                         "dispatch, local experts and combine; added to y in the reduce",
                                         shared_->intermediate_size()));
  return out;
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
