// The routing stage on the CPU: route_deepseek_v4 into topk_ids, then Eplb::remap in place (or
// the remap of the caller's logical ids alone). Bad data throws, naming the index.
#include "cpu/cpu_routing_stage.h"

#include <optional>

#include "core/routing_stage_impl.h"

namespace moe_ep::cpu {
namespace {

class CpuRoutingStage final : public RoutingStage::Impl {
 public:
  explicit CpuRoutingStage(const RoutingStageOptions& o) {
    if (o.placement) eplb_.emplace(*o.placement);
  }

  void route(const RoutingArgs& a) override {
    if (options.router) {
      route_deepseek_v4(*options.router, router_args(a));
      if (eplb_) eplb_->remap(a.topk_ids, a.topk_ids);
    } else {
      eplb_->remap(a.logical_ids, a.topk_ids);
    }
  }

  void set_placement(const EplbPlacement& p) override {
    // Counters and the recording flag belong to the stage, not to one placement.
    const bool recording = eplb_->recording();
    const std::vector<int64_t> counts = eplb_->counter_values();
    eplb_.emplace(p);
    eplb_->set_recording(recording);
    for (size_t i = 0; i < counts.size(); ++i) eplb_->counters()[i] = static_cast<int32_t>(counts[i]);
  }
  void set_recording(bool on) override { eplb_->set_recording(on); }
  std::vector<int64_t> counter_values() const override { return eplb_->counter_values(); }
  void reset_counters() override { eplb_->reset_counters(); }
  uint32_t read_error_flags(bool) override { return 0; }  // bad input throws instead

 private:
  std::optional<Eplb> eplb_;
};

}  // namespace

std::unique_ptr<RoutingStage::Impl> create_cpu_routing_stage(const RoutingStageOptions& options) {
  return std::make_unique<CpuRoutingStage>(options);
}

}  // namespace moe_ep::cpu
