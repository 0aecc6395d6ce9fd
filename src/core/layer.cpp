#include "moe_ep/layer.h"

#include "check.h"
#include "layer_impl.h"

namespace moe_ep {

void Layer::Impl::forward_rows(const ForwardArgs&, std::span<const int64_t>) {
  MOE_EP_FAIL(ErrorCode::kUnsupported, "forward_rows is supported on CPU layers only; this layer "
              "runs on {}", info.device.str());
}

Layer::Layer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Layer::~Layer() = default;

std::unique_ptr<Layer> Layer::create(std::shared_ptr<Runtime> runtime, const FleetParams& fleet,
                                     const KernelConfig& config, const WeightPack& weights) {
  MOE_EP_CHECK_CODE(runtime != nullptr, ErrorCode::kRuntime,
                    "Layer::create: runtime is null (released?); acquire a Runtime first");
  validate_config(fleet, config, runtime->world_size());
  LayerRequest req;
  req.runtime = std::move(runtime);
  req.fleet = fleet;
  req.config = config;
  req.family = &find_family(config.family);
  req.weights = weights;
  std::string reason;
  req.implementation = find_implementation(*req.family, req.runtime->device(), 0, &reason);
  MOE_EP_CHECK_CODE(req.implementation != nullptr, ErrorCode::kUnsupported, "{}", reason);
  return std::unique_ptr<Layer>(new Layer(make_cpu_layer(req)));
}

void Layer::forward(const ForwardArgs& args) { impl_->forward(args); }
void Layer::forward_rows(const ForwardArgs& args, std::span<const int64_t> rows) {
  impl_->forward_rows(args, rows);
}
uint32_t Layer::read_error_flags(bool clear) { return impl_->read_error_flags(clear); }
void Layer::check_error_flags() {
  const uint32_t flags = read_error_flags(true);
  MOE_EP_CHECK_CODE(flags == 0, ErrorCode::kDevice,
                    "device error flags 0x{:x} raised (bit 0: a topk id outside [-1, num_experts) "
                    "was treated as skipped)", flags);
}
const LayerInfo& Layer::info() const { return impl_->info; }
const FleetParams& Layer::fleet() const { return impl_->fleet; }
const KernelConfig& Layer::config() const { return impl_->config; }
Runtime& Layer::runtime() const { return *impl_->runtime; }

}  // namespace moe_ep
