// Registers the CPU backend: every recipe, any CPU; one rank (CommSource::kSingleProcess) or
// simulated in-process ranks (CommSource::kSimulated, core/sim_transport.h).
#include "core/check.h"
#include "core/registry.h"
#include "cpu/cpu_layers.h"
#include "cpu/cpu_routing_stage.h"

namespace moe_ep::cpu {
namespace {

constexpr Recipe kRecipes[] = {Recipe::kMxfp4, Recipe::kNvfp4};

// The CPU reference has no kernel variants: a pinned GPU choice is refused, not ignored.
std::string gpu_only_overrides(const KernelOverrides& o) {
  KernelOverrides gpu_only = o;
  gpu_only.num_threads = 0;
  gpu_only.cpu_batch_tokens = 0;
  return gpu_only.str();
}

std::unique_ptr<Layer::Impl> create_cpu_layer(const LayerRequest& request) {
  const std::string gpu_only = gpu_only_overrides(request.overrides);
  MOE_EP_CHECK_CODE(gpu_only.empty(), ErrorCode::kUnsupported,
                    "overrides {}: the CPU backend has no kernel variants; it takes num_threads and "
                    "cpu_batch_tokens only", gpu_only);
  return request.runtime->bootstrap().comm == CommSource::kSimulated ? make_cpu_ep_layer(request)
                                                                      : make_cpu_layer(request);
}

}  // namespace
}  // namespace moe_ep::cpu

namespace moe_ep::detail {

void register_cpu_backend() {
  using namespace moe_ep::cpu;
  detail::BackendEntry e;
  e.info = {"cpu", "the reference backend: exact to docs/spec.md, multithreaded, any CPU",
            DeviceType::kCPU, 0, 0, kRecipes};
  e.create = &create_cpu_layer;
  e.create_routing_stage = &create_cpu_routing_stage;
  detail::register_backend(e);
}

}  // namespace moe_ep::detail
