// The CUDA backend's routing stage (moe_ep/routing_stage.h): the public stage's validated
// tensors bound to Sm90Router's one kernel, with DeviceEplb's placement and counters.
#include "cuda/sm90_routing_stage.h"

#include "core/routing_stage_impl.h"
#include "cuda/sm90_routing.h"

namespace moe_ep::cuda {
namespace {

class Sm90RoutingStage final : public RoutingStage::Impl {
 public:
  explicit Sm90RoutingStage(const RoutingStageOptions& o)
      : router_(o.router ? &*o.router : nullptr, o.num_logical, o.top_k, o.device.index) {
    if (o.placement) eplb_ = std::make_unique<DeviceEplb>(*o.placement, o.device.index, o.max_replicas);
  }

  void route(const RoutingArgs& a) override {
    RouteBinding b;
    b.layer_idx = a.layer_idx;
    b.num_tokens = options.router ? a.logits.shape[0] : a.logical_ids.shape[0];
    b.logits = a.logits.data;
    b.logits_bf16 = a.logits.dtype == DType::kBF16;
    b.bias = static_cast<const float*>(a.bias.data);
    b.token_ids = a.token_ids.data;
    b.token_ids_int64 = a.token_ids.dtype == DType::kI64;
    b.hash_table = static_cast<const int32_t*>(a.hash_table.data);
    b.vocab = a.hash_table.defined() ? a.hash_table.shape[0] : 0;
    b.logical_ids = a.logical_ids.data;
    b.logical_ids_int64 = a.logical_ids.dtype == DType::kI64;
    b.topk_ids = a.topk_ids.data;
    b.topk_ids_int64 = a.topk_ids.dtype == DType::kI64;
    b.topk_weights = static_cast<float*>(a.topk_weights.data);
    router_.route(b, eplb_.get(), a.stream);
  }

  void set_placement(const EplbPlacement& p) override { eplb_->set_placement(p); }
  void set_recording(bool on) override { eplb_->set_recording(on); }
  std::vector<int64_t> counter_values() const override { return eplb_->counter_values(); }
  void reset_counters() override { eplb_->reset_counters(); }
  uint32_t read_error_flags(bool clear) override { return router_.read_error_flags(clear); }

 private:
  Sm90Router router_;
  std::unique_ptr<DeviceEplb> eplb_;
};

}  // namespace

// The device's compute capability is checked by the registry (backend_for: SM90 only).
std::unique_ptr<RoutingStage::Impl> create_routing_stage(const RoutingStageOptions& options) {
  return std::make_unique<Sm90RoutingStage>(options);
}

}  // namespace moe_ep::cuda
