#include "moe_ep/simulated_group.h"

#include "check.h"
#include "core/registry.h"

namespace moe_ep {

void validate_simulated_group(const SimulatedGroupOptions& o, size_t num_weight_packs) {
  MOE_EP_CHECK(o.world_size >= 1, "world_size = {} is invalid for a simulated group; expected >= 1",
               o.world_size);
  MOE_EP_CHECK(num_weight_packs == static_cast<size_t>(o.world_size),
               "weights has {} entries; expected one per rank (world_size = {})", num_weight_packs,
               o.world_size);
  MOE_EP_CHECK(o.timeout_ms >= 1, "timeout_ms = {} is invalid; expected >= 1", o.timeout_ms);
  validate_desc(o.desc, o.world_size);
}

std::unique_ptr<SimulatedEpGroup> SimulatedEpGroup::create(const SimulatedGroupOptions& options,
                                                           std::span<const WeightPack> weights) {
  validate_simulated_group(options, weights.size());
  const detail::BackendEntry& backend = detail::backend_for(options.device, "a simulated EP group");
  MOE_EP_CHECK_CODE(backend.create_simulated_group != nullptr, ErrorCode::kUnsupported,
                    "a simulated EP group on {}: backend '{}' has none; ranks on threads of their "
                    "own simulate expert parallelism on any device: Runtime::acquire(Bootstrap"
                    "{{.world_size = R, .rank = r, .comm = CommSource::kSimulated}}) and a Layer per "
                    "rank", options.device.str(), backend.info.name);
  return std::unique_ptr<SimulatedEpGroup>(
      new SimulatedEpGroup(backend.create_simulated_group(options, weights)));
}

SimulatedEpGroup::SimulatedEpGroup(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
SimulatedEpGroup::~SimulatedEpGroup() = default;

int SimulatedEpGroup::world_size() const { return impl_->world_size(); }
const DeviceWorkspaceLayout& SimulatedEpGroup::layout() const { return impl_->layout(); }
std::string SimulatedEpGroup::notes() const { return impl_->notes(); }

void SimulatedEpGroup::forward(std::span<const ForwardArgs> args, void* stream) {
  impl_->forward(args, stream);
}

EpStepTimes SimulatedEpGroup::forward_timed(std::span<const ForwardArgs> args, void* stream) {
  return impl_->forward_timed(args, stream);
}

void SimulatedEpGroup::set_absent_ranks(uint32_t mask) { impl_->set_absent_ranks(mask); }
uint32_t SimulatedEpGroup::read_error_flags(bool clear) { return impl_->read_error_flags(clear); }

}  // namespace moe_ep
