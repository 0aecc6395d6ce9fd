// Registers the CPU backend (every recipe, any CPU) and the in-process transports: a world of one
// rank (CommSource::kSingleProcess, on any device) and simulated ranks on the CPU
// (CommSource::kSimulated, one thread per rank sharing host memory).
#include <chrono>

#include "core/check.h"
#include "core/registry.h"
#include "cpu/cpu_layers.h"
#include "cpu/sim_transport.h"

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

std::shared_ptr<detail::Transport> create_sim_transport(const Bootstrap& b, std::shared_ptr<void>& world) {
  if (!world) world = std::make_shared<SimWorld>(b.world_size);
  return std::make_shared<SimTransport>(std::static_pointer_cast<SimWorld>(world), b.rank,
                                        std::chrono::milliseconds(b.timeout_ms));
}

// A single-process runtime on a GPU has no symmetric workspace: its layers keep their scratch.
uint32_t sim_parts(const Bootstrap& b) {
  return b.device.type == DeviceType::kCPU
             ? kRuntimeSymmetricWorkspace | kRuntimePeerTransport | kRuntimeDeviceErrorFlag
             : 0u;
}

constexpr CommSource kSingleSources[] = {CommSource::kSingleProcess};
constexpr CommSource kSimSources[] = {CommSource::kSimulated};
constexpr DeviceType kAnyDevice[] = {DeviceType::kCPU, DeviceType::kCUDA};
constexpr DeviceType kCpuOnly[] = {DeviceType::kCPU};

}  // namespace
}  // namespace moe_ep::cpu

namespace moe_ep::detail {

void register_cpu_backend() {
  using namespace moe_ep::cpu;
  detail::BackendEntry e;
  e.info = {"cpu", "the reference backend: exact to SPEC.md, multithreaded, any CPU",
            DeviceType::kCPU, 0, 0, kRecipes};
  e.create = &create_cpu_layer;
  detail::register_backend(e);
  detail::register_transport({"single-process", kSingleSources, kAnyDevice, &sim_parts,
                              &create_sim_transport, nullptr});
  detail::register_transport({"simulated", kSimSources, kCpuOnly, &sim_parts,
                              &create_sim_transport, nullptr});
}

}  // namespace moe_ep::detail
