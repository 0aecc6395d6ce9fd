#include "cuda/ep/sim_group.h"

#include <algorithm>

#include <cuda_runtime.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/check.h"
#include "cuda/device_buffer.h"
#include "cuda/device_info.h"
#include "cuda/ep/ep_launch.h"
#include "cuda/ep/ep_rank_engine.h"
#include "cuda/errors.h"

namespace moe_ep::cuda::ep {

struct SimEpGroup::State {
  SimGroupOptions options;
  DeviceWorkspaceLayout layout;
  std::vector<DeviceBuffer> windows;  // [R]
  std::vector<std::unique_ptr<EpRankEngine>> ranks;
  SimPeerWindows peers;
  EpGeometry geo;
  int sm_count = 0;
  uint32_t absent = 0;
  std::string notes;
  cudaEvent_t events[6] = {};
};

namespace {

void check_rank_args(const ForwardArgs& a, int rank, const SimGroupOptions& o) {
  const bool q = o.desc.quantize_input;
  const TensorView& act = q ? a.x : a.a;
  const int64_t H = o.desc.fleet.hidden_size, K = o.desc.top_k;
  MOE_EP_CHECK(act.ndim == 2, "rank {}: {} has shape {}; expected [T, H = {}]", rank, q ? "x" : "a",
               act.shape_str(), H);
  const int64_t T = act.shape[0];
  MOE_EP_CHECK(T >= 0 && T <= o.desc.fleet.max_tokens_per_rank,
               "rank {}: T = {} tokens; expected 0..max_tokens_per_rank = {}", rank, T,
               o.desc.fleet.max_tokens_per_rank);
  auto check = [&](const TensorView& t, const char* name, std::initializer_list<DType> dtypes,
                   std::initializer_list<int64_t> shape) {
    bool dtype_ok = false;
    for (DType d : dtypes) dtype_ok |= t.dtype == d;
    bool shape_ok = t.ndim == static_cast<int>(shape.size());
    int i = 0;
    for (int64_t s : shape) shape_ok = shape_ok && t.shape[i++] == s;
    MOE_EP_CHECK(dtype_ok && shape_ok && t.is_contiguous(),
                 "rank {}: {} is {} {} (contiguous: {}); expected dtype {} shape [{}]", rank, name,
                 dtype_name(t.dtype), t.shape_str(), t.is_contiguous(), dtype_name(*dtypes.begin()),
                 fmt::join(shape, ", "));
    MOE_EP_CHECK(t.device == o.device, "rank {}: {} is on {}; expected {} (the group's device)", rank,
                 name, t.device.str(), o.device.str());
  };
  const RecipeTraits& recipe = o.desc.traits();
  if (q) {
    check(a.x, "x", {DType::kBF16}, {T, H});
  } else {
    check(a.a, "a", {DType::kU8, DType::kE4M3}, {T, recipe.code_bytes(H)});
    check(a.a_scale, "a_scale", {DType::kU8, recipe.scale_dtype}, {T, recipe.scale_count(H)});
    if (recipe.global_scales) check(a.a_global, "a_global", {DType::kF32}, {T});
  }
  check(a.topk_ids, "topk_ids", {DType::kI32, DType::kI64}, {T, K});
  check(a.topk_weights, "topk_weights", {DType::kF32}, {T, K});
  check(a.y, "y", {DType::kBF16}, {T, H});
}

}  // namespace

SimEpGroup::SimEpGroup(const SimGroupOptions& o, std::span<const WeightPack> weights)
    : s_(std::make_unique<State>()) {
  const int R = o.world_size;
  MOE_EP_CHECK(R >= 1 && R <= kMaxLaunchRanks,
               "world_size = {} is invalid for the one-GPU simulation; expected 1..{}", R,
               kMaxLaunchRanks);
  MOE_EP_CHECK(o.device.type == DeviceType::kCUDA,
               "the one-GPU simulation runs on a CUDA device; got device = {}", o.device.str());
  validate_simulated_group(o, weights.size());
  State& s = *s_;
  s.options = o;
  MOE_EP_CUDA_CHECK(cudaSetDevice(o.device.index));
  s.sm_count = device_info(o.device.index).sm_count;
  const MoeDesc& d = o.desc;
  s.layout = device_workspace_layout({R, d.fleet.num_experts, d.fleet.max_tokens_per_rank,
                                      d.fleet.hidden_size, d.intermediate_size, d.top_k});
  for (int r = 0; r < R; ++r) {
    s.windows.emplace_back(static_cast<size_t>(s.layout.total_bytes));
    EpRankEngine::init_window(s.layout, s.windows.back().get<std::byte>());
    s.peers.windows[r] = s.windows.back().get<std::byte>();
  }
  for (int r = 0; r < R; ++r)
    s.ranks.push_back(std::make_unique<EpRankEngine>(o.device, R, r, d, o.overrides, weights[r],
                                                     s.layout, s.peers.windows[r], o.timeout_ms));
  s.geo = s.ranks[0]->geometry();
  for (cudaEvent_t& e : s.events) MOE_EP_CUDA_CHECK(cudaEventCreate(&e));
  s.notes = fmt::format(
      "{} simulated ranks on {}: {} bytes of device workspace per rank ({}), local experts "
      "through the SM90 expert engine over {} slot rows each; {}",
      R, o.device.str(), s.layout.total_bytes, s.layout.shape.str(), s.ranks[0]->slot_rows(),
      s.ranks[0]->local_experts().notes());
}

SimEpGroup::~SimEpGroup() {
  for (cudaEvent_t e : s_->events)
    if (e) MOE_EP_CUDA_IGNORE(cudaEventDestroy(e));
}

int SimEpGroup::world_size() const { return s_->options.world_size; }
const DeviceWorkspaceLayout& SimEpGroup::layout() const { return s_->layout; }
std::string SimEpGroup::notes() const { return s_->notes; }
void SimEpGroup::set_absent_ranks(uint32_t mask) { s_->absent = mask; }

namespace {

// The steps of one forward; `mark(i)` runs before step i (i = 0..4) and after the last (5).
template <class Mark>
void run_forward(SimEpGroup::State& s, std::span<const ForwardArgs> args, cudaStream_t stream, Mark mark) {
  const int R = s.options.world_size;
  MOE_EP_CHECK(static_cast<int>(args.size()) == R, "args has {} entries; expected one per rank ({})",
               args.size(), R);
  for (int r = 0; r < R; ++r) check_rank_args(args[r], r, s.options);
  MOE_EP_CUDA_CHECK(cudaSetDevice(s.options.device.index));
  EpHostLaunch launch;
  launch.geo = s.geo;
  launch.num_ranks = R;
  launch.absent_ranks = s.absent;
  int64_t max_t = 0;
  mark(0);
  for (int r = 0; r < R; ++r) {
    launch.ranks[r] = s.ranks[r]->prepare(args[r], stream);
    launch.ranks[r].rank = r;
    max_t = std::max<int64_t>(max_t, launch.ranks[r].num_tokens);
  }
  auto step = [&](EpStep st) {
    launch.blocks_per_rank = ep_blocks_per_rank(st, s.geo, max_t, R, s.sm_count);
    MOE_EP_CUDA_CHECK(launch_ep_step_sim(st, launch, s.peers, stream));
  };
  mark(1);
  step(EpStep::kDispatch);
  mark(2);
  for (int r = 0; r < R; ++r) s.ranks[r]->run_local_experts(stream);
  mark(3);
  step(EpStep::kCombine);
  mark(4);
  for (int r = 0; r < R; ++r) s.ranks[r]->wait_shared_expert(launch.ranks[r], stream);
  step(EpStep::kReduce);
  mark(5);
}

}  // namespace

void SimEpGroup::forward(std::span<const ForwardArgs> args, void* stream) {
  run_forward(*s_, args, static_cast<cudaStream_t>(stream), [](int) {});
}

SimStepTimes SimEpGroup::forward_timed(std::span<const ForwardArgs> args, void* stream) {
  auto st = static_cast<cudaStream_t>(stream);
  run_forward(*s_, args, st, [&](int i) { MOE_EP_CUDA_CHECK(cudaEventRecord(s_->events[i], st)); });
  MOE_EP_CUDA_CHECK(cudaEventSynchronize(s_->events[5]));
  float ms[5];
  for (int i = 0; i < 5; ++i)
    MOE_EP_CUDA_CHECK(cudaEventElapsedTime(&ms[i], s_->events[i], s_->events[i + 1]));
  return {ms[0] * 1e3, ms[1] * 1e3, ms[2] * 1e3, ms[3] * 1e3, ms[4] * 1e3};
}

std::unique_ptr<SimulatedEpGroup::Impl> make_sim_group(const SimulatedGroupOptions& options,
                                                       std::span<const WeightPack> weights) {
  return std::make_unique<SimEpGroup>(options, weights);
}

uint32_t SimEpGroup::read_error_flags(bool clear) {
  State& s = *s_;
  uint32_t flags = 0;
  for (int r = 0; r < s.options.world_size; ++r) {
    const EpSync sync = s.ranks[r]->read_sync();
    const std::string timeout = describe_timeout(sync, r, s.options.timeout_ms, "one-GPU simulation");
    MOE_EP_CHECK_CODE(timeout.empty(), ErrorCode::kTimeout, "{}", timeout);
    if (sync.error_flags & kEpErrorIdOutOfRange) flags |= kErrorExpertIdOutOfRange;
    flags |= s.ranks[r]->local_experts().read_error_flags(clear);
    if (clear && sync.error_flags) s.ranks[r]->clear_errors();
  }
  return flags;
}

}  // namespace moe_ep::cuda::ep
