// The CPU layer across R simulated ranks: dispatch -> local experts -> combine over the
// runtime's symmetric workspace, following the protocol drawn in moe_ep/workspace.h.
//
// y is bitwise equal to the single-rank CPU layer for every R: each rank quantizes its own rows
// with the same quantizer, the owner of an expert computes o_k with the same per-expert code
// (cpu::compute_expert_outputs is independent of entry order and thread count), every o_k
// travels back unchanged as bf16, and the source rank sums them in slot order k = 0..K-1 (then
// adds its own tokens' shared expert output, when the layer has one).
#include <cstring>
#include <exception>
#include <limits>
#include <vector>

#include <fmt/format.h>

#include "core/check.h"
#include "core/fault_points.h"
#include "core/layer_impl.h"
#include "cpu/cpu_layers.h"
#include "cpu/layer_shared_expert.h"
#include "core/runtime_state.h"
#include "core/weight_prep.h"
#include "cpu/ep_expert_weights.h"
#include "cpu/expert_compute.h"
#include "core/thread_pool.h"
#include "moe_ep/formats.h"
#include "moe_ep/quant.h"

namespace moe_ep {
namespace {

using cpu::ExpertEntry;
using cpu::QuantizedRows;
using Region = WorkspaceRegionId;

// Where an expert slot's o_k goes back to: rank `src`, row `t`, slot `k`.
struct ReturnAddress {
  int32_t src;
  int32_t k;
  int64_t t;
};

class CpuEpLayer final : public Layer::Impl {
 public:
  explicit CpuEpLayer(const LayerRequest& req);

  void forward(const ForwardArgs& args) override;
  void forward_rows(const ForwardArgs&, std::span<const int64_t>) override {
    MOE_EP_FAIL(ErrorCode::kUnsupported,
                "forward_rows is a single-rank check path; this layer runs on {} simulated ranks "
                "(use a single-process runtime for the reference)", R_);
  }
  uint32_t read_error_flags(bool) override { return 0; }  // host ids are checked before forward
  void fail_forward(const std::string& message) override;
  void replace_expert_weights(int64_t local_expert, const WeightPack& one_expert) override {
    cpu::replace_host_expert(desc_.recipe, weights_, local_expert, one_expert, parallel_for_of(*pool_));
  }

 private:
  template <class T>
  T* region(int rank, Region id) const {
    return reinterpret_cast<T*>(workspace_->region(rank, id));
  }
  int64_t topk_id(const TensorView& ids, int64_t i) const {
    return ids.dtype == DType::kI32 ? ids.ptr<const int32_t>()[i] : ids.ptr<const int64_t>()[i];
  }
  int64_t num_tokens(const ForwardArgs& args) const {
    return desc_.quantize_input ? args.x.shape[0] : args.a.shape[0];
  }

  void dispatch(const ForwardArgs& args, int64_t T);
  void compute_and_return();
  void reduce(const ForwardArgs& args, int64_t T);
  // Ends a protocol step: the barrier carries this rank's failure to the others. On failure
  // every rank throws (this rank its own error); after a failed dispatch the received counts
  // are zeroed and the ranks meet once more, so the workspace is clean for the next forward.
  void finish_step(const std::string& phase, std::exception_ptr local, const std::string& message,
                   bool after_dispatch);

  MoeDesc desc_;
  std::shared_ptr<ThreadPool> pool_;
  detail::Transport* transport_ = nullptr;
  const Workspace* workspace_ = nullptr;
  HostExpertWeights weights_;
  cpu::ExpertProblem problem_;
  std::unique_ptr<const SharedExpert> shared_;  // every rank its own copy; null without one
  int R_ = 1, rank_ = 0;
  int64_t E_loc_ = 0, T_max_ = 0, H_ = 0, K_ = 0;
  bool global_scales_ = false;  // the recipe's activations carry a per-row global scale
  int64_t code_bytes_ = 0, scale_bytes_ = 0;  // one quantized activation row
  int64_t layer_index_ = 0, forward_index_ = 0;

  // Reused between forwards (they grow to the largest T seen, then stay).
  std::vector<uint8_t> codes_, scales_;
  std::vector<float> global_;
  std::vector<std::vector<int64_t>> send_rows_;  // [R]: source rows sent to rank d, in order
  std::vector<ExpertEntry> entries_;             // expert-major
  std::vector<ReturnAddress> returns_;           // per entry
  std::vector<int64_t> expert_fill_;
};

CpuEpLayer::CpuEpLayer(const LayerRequest& req)
    : desc_(req.desc), pool_(shared_thread_pool(resolve_num_threads(req.overrides.num_threads))) {
  Runtime& rt = *req.runtime;
  detail::RuntimeState& state = rt.state();
  transport_ = &state.transport();
  R_ = rt.world_size();
  rank_ = rt.rank();
  E_loc_ = desc_.fleet.num_experts / R_;
  T_max_ = desc_.fleet.max_tokens_per_rank;
  H_ = desc_.fleet.hidden_size;
  K_ = desc_.top_k;
  const RecipeTraits& recipe = desc_.traits();
  global_scales_ = recipe.global_scales;
  code_bytes_ = recipe.code_bytes(H_);
  scale_bytes_ = recipe.scale_count(H_);
  layer_index_ = state.next_layer_index();
  send_rows_.resize(R_);

  // Layer::create is collective: a rank whose weights fail to convert tells the others (and
  // one whose weights failed the checks in Layer::create does too: core/collective_create.cpp).
  std::string error;
  std::exception_ptr local;
  try {
    constexpr uint32_t kNeeds = kRuntimeSymmetricWorkspace | kRuntimePeerTransport;
    MOE_EP_CHECK_CODE((rt.parts() & kNeeds) == kNeeds, ErrorCode::kUnsupported,
                      "the CPU expert-parallel layer needs runtime parts 0x{:x}; the runtime on {} "
                      "provides 0x{:x}", kNeeds, rt.device().str(), rt.parts());
    weights_ = prepare_host_weights(desc_.recipe, req.weights, {E_loc_, H_, desc_.intermediate_size},
                                    parallel_for_of(*pool_));
    shared_ = cpu::make_layer_shared_expert(req, info);
  } catch (const Error& e) {
    local = std::current_exception();
    error = e.message();
  } catch (const std::exception& e) {  // std::bad_alloc of the weight copy, above all
    local = std::current_exception();
    error = e.what();
  }
  try {
    transport_->barrier(fmt::format("create layer {}", layer_index_), error);
  } catch (...) {
    if (local) std::rethrow_exception(local);
    throw;
  }
  workspace_ = &rt.reserve_workspace({R_, desc_.fleet.num_experts, T_max_, H_,
                                      desc_.intermediate_size, K_});
  info.notes = weights_.notes;
  info.notes += fmt::format("{}rank {} of {} simulated ranks owns experts [{}, {}); workspace {} "
                            "bytes shared by every layer of the rank",
                            info.notes.empty() ? "" : "\n", rank_, R_, rank_ * E_loc_,
                            (rank_ + 1) * E_loc_, workspace_->bytes());
  problem_.weights = &weights_;
  problem_.activation_clamp =
      desc_.activation_clamp.value_or(std::numeric_limits<float>::infinity());
  info.config.add("threads", std::to_string(pool_->num_threads()));
}

void CpuEpLayer::finish_step(const std::string& phase, std::exception_ptr local,
                             const std::string& message, bool after_dispatch) {
  try {
    transport_->barrier(phase, message);
  } catch (...) {
    if (after_dispatch) {
      std::memset(region<int32_t>(rank_, Region::kRecvCounts), 0, sizeof(int32_t) * R_);
      try {
        transport_->barrier(phase + " (abort)");
      } catch (...) {
        // The world is broken (a timeout): the first error is the one to report.
      }
    }
    if (local) std::rethrow_exception(local);
    throw;
  }
}

void CpuEpLayer::fail_forward(const std::string& message) {
  const std::string tag = fmt::format("layer {} forward {}", layer_index_, forward_index_++);
  try {
    finish_step("dispatch of " + tag, nullptr, message, true);
  } catch (...) {
    // Expected: the step fails on every rank; the caller rethrows this rank's own error.
  }
}

void CpuEpLayer::forward(const ForwardArgs& args) {
  const int64_t T = num_tokens(args);
  const std::string tag = fmt::format("layer {} forward {}", layer_index_, forward_index_++);
  auto step = [&](const std::string& phase, bool after_dispatch, auto&& body) {
    std::exception_ptr local;
    std::string message;
    try {
      body();
    } catch (const Error& e) {
      local = std::current_exception();
      message = e.message();
    } catch (const std::exception& e) {
      local = std::current_exception();
      message = e.what();
    }
    finish_step(phase + " of " + tag, local, message, after_dispatch);
  };
  step("dispatch", true, [&] { dispatch(args, T); });
  step("combine", false, [&] {
    detail::fault_point(rank_, "combine");
    compute_and_return();
  });
  reduce(args, T);
}

// Step 1: quantize this rank's rows once, then write each row to every rank that owns one of
// its experts (rank-major slot [rank_ * T_max, ...) of the receiver), then the row counts.
void CpuEpLayer::dispatch(const ForwardArgs& args, int64_t T) {
  const uint8_t *codes, *scales;
  const float* global = nullptr;
  if (desc_.quantize_input) {
    codes_.resize(T * code_bytes_);
    scales_.resize(T * scale_bytes_);
    global_.resize(global_scales_ ? T : 0);
    pool_->parallel_for(T, [&](int64_t t) {
      thread_local std::vector<float> v;
      v.resize(H_);
      const uint16_t* src = args.x.ptr<const uint16_t>() + t * H_;
      for (int64_t j = 0; j < H_; ++j) v[j] = bf16_to_float(src[j]);
      quantize_activation_row(desc_.recipe, v.data(), H_, codes_.data() + t * code_bytes_,
                              scales_.data() + t * scale_bytes_,
                              global_scales_ ? global_.data() + t : nullptr);
    });
    codes = codes_.data();
    scales = scales_.data();
    global = global_scales_ ? global_.data() : nullptr;
  } else {
    codes = args.a.ptr<const uint8_t>();
    scales = args.a_scale.ptr<const uint8_t>();
    global = global_scales_ ? args.a_global.ptr<const float>() : nullptr;
  }

  for (auto& rows : send_rows_) rows.clear();
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t k = 0; k < K_; ++k) {
      const int64_t id = topk_id(args.topk_ids, t * K_ + k);
      if (id < 0) continue;
      auto& rows = send_rows_[id / E_loc_];
      if (rows.empty() || rows.back() != t) rows.push_back(t);
    }
  }

  const auto* weights = args.topk_weights.ptr<const float>();
  for (int d = 0; d < R_; ++d) {
    const std::vector<int64_t>& rows = send_rows_[d];
    const int64_t base = rank_ * T_max_;
    auto* token = region<int32_t>(d, Region::kRecvToken) + base;
    auto* slot_expert = region<int32_t>(d, Region::kRecvSlotExpert) + base * K_;
    auto* slot_weight = region<float>(d, Region::kRecvSlotWeight) + base * K_;
    auto* dst_codes = region<uint8_t>(d, Region::kRecvCodes) + base * code_bytes_;
    auto* dst_scales = region<uint8_t>(d, Region::kRecvScales) + base * scale_bytes_;
    auto* dst_global = region<float>(d, Region::kRecvGlobal) + base;
    const int64_t first_expert = d * E_loc_;
    pool_->parallel_for(static_cast<int64_t>(rows.size()), [&](int64_t i) {
      const int64_t t = rows[i];
      token[i] = static_cast<int32_t>(t);
      for (int64_t k = 0; k < K_; ++k) {
        const int64_t id = topk_id(args.topk_ids, t * K_ + k);
        const bool here = id >= first_expert && id < first_expert + E_loc_;
        slot_expert[i * K_ + k] = here ? static_cast<int32_t>(id - first_expert) : -1;
        slot_weight[i * K_ + k] = weights[t * K_ + k];
      }
      std::memcpy(dst_codes + i * code_bytes_, codes + t * code_bytes_, code_bytes_);
      std::memcpy(dst_scales + i * scale_bytes_, scales + t * scale_bytes_, scale_bytes_);
      if (global_scales_) dst_global[i] = global[t];
    });
    region<int32_t>(d, Region::kRecvCounts)[rank_] = static_cast<int32_t>(rows.size());
    if (d == 0) detail::fault_point(rank_, "dispatch");
  }
}

// Step 2: read and zero the counts, order the received slots expert-major (counting them per
// local expert in expert_counts, zeroed again after use), run the experts into expert_out and
// write each o_k into the source rank's combine[t, k].
void CpuEpLayer::compute_and_return() {
  auto* counts = region<int32_t>(rank_, Region::kRecvCounts);
  std::vector<int64_t> received(counts, counts + R_);
  std::memset(counts, 0, sizeof(int32_t) * R_);
  for (int src = 0; src < R_; ++src)
    MOE_EP_CHECK_CODE(received[src] >= 0 && received[src] <= T_max_, ErrorCode::kInternal,
                      "rank {} received a count of {} rows from rank {}; expected 0..{}", rank_,
                      received[src], src, T_max_);

  const auto* slot_expert = region<const int32_t>(rank_, Region::kRecvSlotExpert);
  const auto* slot_weight = region<const float>(rank_, Region::kRecvSlotWeight);
  const auto* token = region<const int32_t>(rank_, Region::kRecvToken);
  auto* expert_counts = region<int32_t>(rank_, Region::kExpertCounts);
  int64_t num_entries = 0;
  for (int src = 0; src < R_; ++src)
    for (int64_t i = 0; i < received[src]; ++i)
      for (int64_t k = 0; k < K_; ++k) {
        const int32_t e = slot_expert[(src * T_max_ + i) * K_ + k];
        if (e < 0) continue;
        MOE_EP_ASSERT(e < E_loc_);
        ++expert_counts[e];
        ++num_entries;
      }
  expert_fill_.assign(E_loc_, 0);
  for (int64_t e = 1; e < E_loc_; ++e) expert_fill_[e] = expert_fill_[e - 1] + expert_counts[e - 1];
  std::memset(expert_counts, 0, sizeof(int32_t) * E_loc_);

  entries_.resize(num_entries);
  returns_.resize(num_entries);
  for (int src = 0; src < R_; ++src)
    for (int64_t i = 0; i < received[src]; ++i) {
      const int64_t row = src * T_max_ + i;
      for (int64_t k = 0; k < K_; ++k) {
        const int32_t e = slot_expert[row * K_ + k];
        if (e < 0) continue;
        const int64_t n = expert_fill_[e]++;
        entries_[n] = {row, e, slot_weight[row * K_ + k]};
        returns_[n] = {src, static_cast<int32_t>(k), token[row]};
      }
    }

  const QuantizedRows rows{R_ * T_max_, region<const uint8_t>(rank_, Region::kRecvCodes),
                           region<const uint8_t>(rank_, Region::kRecvScales),
                           global_scales_ ? region<const float>(rank_, Region::kRecvGlobal) : nullptr};
  auto* out = region<uint16_t>(rank_, Region::kExpertOut);
  cpu::compute_expert_outputs(problem_, rows, entries_, out, *pool_);

  pool_->parallel_for(num_entries, [&](int64_t n) {
    const ReturnAddress& to = returns_[n];
    uint16_t* dst = region<uint16_t>(to.src, Region::kCombine) + (to.t * K_ + to.k) * H_;
    std::memcpy(dst, out + n * H_, sizeof(uint16_t) * H_);
  });
}

// Step 3: y[t] = bf16(sum over valid k, in slot order, of o_k); no valid slot gives zeros.
void CpuEpLayer::reduce(const ForwardArgs& args, int64_t T) {
  const auto* combine = region<const uint16_t>(rank_, Region::kCombine);
  pool_->parallel_for(T, [&](int64_t t) {
    thread_local std::vector<float> sum;
    thread_local std::vector<uint16_t> shared_o;
    if (shared_) cpu::shared_expert_row(*shared_, args, t, shared_o);  // x[t] before y[t]
    sum.assign(H_, 0.0f);
    for (int64_t k = 0; k < K_; ++k) {
      if (topk_id(args.topk_ids, t * K_ + k) < 0) continue;
      const uint16_t* o = combine + (t * K_ + k) * H_;
      for (int64_t j = 0; j < H_; ++j) sum[j] += bf16_to_float(o[j]);
    }
    uint16_t* y = args.y.ptr<uint16_t>() + t * H_;
    for (int64_t j = 0; j < H_; ++j) y[j] = float_to_bf16(sum[j]);
    if (shared_) cpu::add_to_row(y, shared_o);
  });
}

}  // namespace

std::unique_ptr<Layer::Impl> cpu::make_cpu_ep_layer(const LayerRequest& request) {
  return std::make_unique<CpuEpLayer>(request);
}

}  // namespace moe_ep
