// The CPU layer for world size 1: quantize x -> build (row, expert, weight) entries from
// topk_ids -> expert outputs -> combine y[t] = bf16(sum over valid k, in slot order, of o_k)
// [-> y[t] = bf16(y[t] + shared expert o[t])].
#include <cmath>
#include <cstdlib>
#include <limits>
#include <numeric>
#include <vector>

#include "core/check.h"
#include "core/layer_impl.h"
#include "cpu/cpu_layers.h"
#include "core/weight_prep.h"
#include "cpu/ep_expert_weights.h"
#include "cpu/expert_compute.h"
#include "cpu/layer_shared_expert.h"
#include "core/thread_pool.h"
#include "moe_ep/formats.h"
#include "moe_ep/quant.h"

namespace moe_ep {
namespace {

using cpu::ExpertEntry;
using cpu::QuantizedRows;

// Upper bound on the per-batch buffers (h in fp32 and o in bf16 per entry, quantized x);
// longer inputs are processed in batches of tokens. KernelOverrides::cpu_batch_tokens pins the
// batch length (a knob for tests of the batching).
constexpr int64_t kBatchBytes = int64_t{256} << 20;

// Owned quantized activations of a batch of tokens (when the layer quantizes x).
struct QuantizedBatch {
  std::vector<uint8_t> codes, scales;
  std::vector<float> global;
  QuantizedRows view(int64_t num_rows) const {
    return {num_rows, codes.data(), scales.data(), global.empty() ? nullptr : global.data()};
  }
};

class CpuLayer final : public Layer::Impl {
 public:
  explicit CpuLayer(const LayerRequest& req)
      : desc_(req.desc), pool_(shared_thread_pool(resolve_num_threads(req.overrides.num_threads))) {
    MOE_EP_CHECK_CODE(req.runtime->world_size() == 1, ErrorCode::kUnsupported,
                      "the CPU layer runs with world_size 1 only so far; got world_size = {}",
                      req.runtime->world_size());
    MOE_EP_CHECK(req.overrides.cpu_batch_tokens >= 0,
                 "overrides.cpu_batch_tokens = {} is invalid; expected >= 1 (or 0: from a {} MiB "
                 "budget)", req.overrides.cpu_batch_tokens, kBatchBytes >> 20);
    const ExpertShape shape{req.desc.fleet.num_experts, req.desc.fleet.hidden_size,
                            req.desc.intermediate_size};
    const ParallelFor parallel = parallel_for_of(*pool_);
    weights_ = prepare_host_weights(req.desc.recipe, req.weights, shape, parallel);
    info.notes = weights_.notes;
    if (weights_.format == WeightFormat::kMXFP4) {
      info.notes += '\n';
      info.notes += describe_fp8_window(
          analyze_fp8_window(weights_, parallel),
          "the CPU reference converts no weights to FP8: it decodes e2m1 * 2^k to fp32, exact "
          "for every row");
    }
    shared_ = cpu::make_layer_shared_expert(req, info);
    batch_override_ = req.overrides.cpu_batch_tokens;
    problem_.weights = &weights_;
    problem_.activation_clamp = req.desc.activation_clamp.value_or(
        std::numeric_limits<float>::infinity());
    info.config.add("threads", std::to_string(pool_->num_threads()));
    info.config.add("batch_tokens", batch_override_ > 0 ? std::to_string(batch_override_)
                                                        : fmt::format("{} (256 MiB budget)", batch_tokens()));
  }

  void forward(const ForwardArgs& args) override {
    std::vector<int64_t> rows(num_tokens(args));
    std::iota(rows.begin(), rows.end(), int64_t{0});
    run(args, rows);
  }

  void forward_rows(const ForwardArgs& args, std::span<const int64_t> rows) override {
    run(args, rows);
  }

  void replace_expert_weights(int64_t local_expert, const WeightPack& one_expert) override {
    cpu::replace_host_expert(desc_.recipe, weights_, local_expert, one_expert,
                             parallel_for_of(*pool_));
  }

  // Host topk ids are checked in Layer::forward before any computation; nothing is deferred.
  uint32_t read_error_flags(bool) override { return 0; }

 private:
  int64_t num_tokens(const ForwardArgs& args) const {
    return desc_.quantize_input ? args.x.shape[0] : args.a.shape[0];
  }

  int64_t batch_tokens() const {
    if (batch_override_ > 0) return batch_override_;
    const int64_t H = desc_.fleet.hidden_size, I = desc_.intermediate_size, K = desc_.top_k;
    const int64_t per_token = K * (I * 4 + H * 2) + H * 2 + 16;
    return std::max<int64_t>(1, kBatchBytes / per_token);
  }

  int64_t topk_id(const TensorView& ids, int64_t t, int64_t k) const {
    const int64_t i = t * desc_.top_k + k;
    return ids.dtype == DType::kI32 ? ids.ptr<const int32_t>()[i] : ids.ptr<const int64_t>()[i];
  }

  // Quantizes x rows rows[0..n) into batch (row i of the batch = token rows[i]).
  void quantize_x(const TensorView& x, std::span<const int64_t> rows, QuantizedBatch& batch) {
    const int64_t H = desc_.fleet.hidden_size, n = static_cast<int64_t>(rows.size());
    const RecipeTraits& recipe = desc_.traits();
    const int64_t code_bytes = recipe.code_bytes(H), scale_count = recipe.scale_count(H);
    batch.codes.resize(n * code_bytes);
    batch.scales.resize(n * scale_count);
    batch.global.resize(recipe.global_scales ? n : 0);
    pool_->parallel_for(n, [&](int64_t i) {
      thread_local std::vector<float> v;
      v.resize(H);
      const uint16_t* src = x.ptr<const uint16_t>() + rows[i] * H;
      for (int64_t j = 0; j < H; ++j) v[j] = bf16_to_float(src[j]);
      quantize_activation_row(recipe.recipe, v.data(), H, batch.codes.data() + i * code_bytes,
                              batch.scales.data() + i * scale_count,
                              recipe.global_scales ? batch.global.data() + i : nullptr);
    });
  }

  void run(const ForwardArgs& args, std::span<const int64_t> rows) {
    const int64_t H = desc_.fleet.hidden_size, K = desc_.top_k;
    const int64_t step = batch_tokens();
    QuantizedBatch batch;
    std::vector<ExpertEntry> entries;
    std::vector<int64_t> slot_entry;  // [batch tokens, K]: entry index or -1
    std::vector<uint16_t> outputs;
    for (size_t b0 = 0; b0 < rows.size(); b0 += step) {
      const auto batch_rows = rows.subspan(b0, std::min<size_t>(step, rows.size() - b0));
      const int64_t n = static_cast<int64_t>(batch_rows.size());
      QuantizedRows act;
      if (desc_.quantize_input) {
        quantize_x(args.x, batch_rows, batch);
        act = batch.view(n);
      } else {
        act = {args.a.shape[0], args.a.ptr<const uint8_t>(), args.a_scale.ptr<const uint8_t>(),
               args.a_global.defined() ? args.a_global.ptr<const float>() : nullptr};
      }

      entries.clear();
      slot_entry.assign(n * K, -1);
      const auto* weights = args.topk_weights.ptr<const float>();
      for (int64_t i = 0; i < n; ++i) {
        const int64_t t = batch_rows[i];
        for (int64_t k = 0; k < K; ++k) {
          const int64_t id = topk_id(args.topk_ids, t, k);
          if (id < 0) continue;
          slot_entry[i * K + k] = static_cast<int64_t>(entries.size());
          entries.push_back({desc_.quantize_input ? i : t, id, weights[t * K + k]});
        }
      }
      outputs.resize(entries.size() * H);
      cpu::compute_expert_outputs(problem_, act, entries, outputs.data(), *pool_);

      // Combine in slot order k = 0..K-1; a token without a valid slot gets zeros (plus the
      // shared expert's output).
      pool_->parallel_for(n, [&](int64_t i) {
        thread_local std::vector<uint16_t> shared_o;
        if (shared_) cpu::shared_expert_row(*shared_, args, batch_rows[i], shared_o);  // x[t] before y[t]
        uint16_t* y_row = args.y.ptr<uint16_t>() + batch_rows[i] * H;
        for (int64_t j = 0; j < H; ++j) {
          float sum = 0.0f;
          for (int64_t k = 0; k < K; ++k) {
            const int64_t entry = slot_entry[i * K + k];
            if (entry >= 0) sum += bf16_to_float(outputs[entry * H + j]);
          }
          y_row[j] = float_to_bf16(sum);
        }
        if (shared_) cpu::add_to_row(y_row, shared_o);
      });
    }
  }

  MoeDesc desc_;
  std::shared_ptr<ThreadPool> pool_;
  HostExpertWeights weights_;
  cpu::ExpertProblem problem_;
  std::unique_ptr<const SharedExpert> shared_;  // null without a shared expert
  int64_t batch_override_ = 0;
};

}  // namespace

std::unique_ptr<Layer::Impl> cpu::make_cpu_layer(const LayerRequest& request) {
  return std::make_unique<CpuLayer>(request);
}

}  // namespace moe_ep
