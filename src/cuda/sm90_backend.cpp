// Registers the SM90 backend: both recipes on compute capability 9.0. The layer it makes depends
// on the runtime's transport: world size 1 here, other transports through their registered
// factories (cuda_layers.h). Also the standalone shared expert, the one-GPU simulated EP group
// and the listing of the visible GPUs.
#include <map>
#include <mutex>
#include <string>

#include <fmt/format.h>

#include "core/check.h"
#include "core/registry.h"
#include "cuda/cuda_layers.h"
#include "cuda/device_info.h"
#include "cuda/sm90_routing_stage.h"
#include "cuda/ep/sim_group.h"
#include "cuda/sm90_shared_expert.h"

namespace moe_ep::cuda {
namespace {

using detail::find_transport;
using detail::TransportEntry;

constexpr Recipe kRecipes[] = {Recipe::kMxfp4, Recipe::kNvfp4};

struct Factories {
  std::mutex mutex;
  std::map<std::string, LayerFactory, std::less<>> by_transport;
};

Factories& factories() {
  static Factories f;
  return f;
}

// By the registered transport of the runtime's communicator source ("single-process",
// "simulated", "nccl"): the world-size-1 layer unless a factory is registered for it.
std::unique_ptr<Layer::Impl> create_layer(const LayerRequest& request) {
  const Bootstrap& b = request.runtime->bootstrap();
  const TransportEntry* transport = find_transport(b.comm, b.device.type, nullptr);
  MOE_EP_ASSERT(transport != nullptr);  // Runtime::acquire found it
  if (LayerFactory f = find_layer_factory(transport->name)) return f(request);
  return make_cuda_layer(request);
}

std::vector<DeviceProperties> list_cuda_devices(std::string* status) {
  std::vector<DeviceProperties> out;
  for (const CudaDeviceInfo& d : list_devices(status))
    out.push_back({Device::cuda(d.index), d.name, d.compute_capability, d.memory_bytes, d.sm_count});
  return out;
}

}  // namespace

void register_layer_factory(std::string_view transport, LayerFactory factory) {
  Factories& f = factories();
  std::lock_guard<std::mutex> lock(f.mutex);
  f.by_transport[std::string(transport)] = factory;
}

LayerFactory find_layer_factory(std::string_view transport) {
  Factories& f = factories();
  std::lock_guard<std::mutex> lock(f.mutex);
  const auto it = f.by_transport.find(transport);
  return it == f.by_transport.end() ? nullptr : it->second;
}

}  // namespace moe_ep::cuda

namespace moe_ep::detail {

void register_cuda_sm90_backend() {
  BackendEntry e;
  e.info = {"cuda-sm90", "Hopper (H100/H200): decode, mma.sync and FP8 wgmma grouped GEMMs",
            DeviceType::kCUDA, 90, 90, cuda::kRecipes};
  e.compute_capability = &cuda::read_compute_capability;
  e.create = &cuda::create_layer;
  e.create_routing_stage = &cuda::create_routing_stage;
  e.list_devices = &cuda::list_cuda_devices;
  e.create_shared_expert = &cuda::make_sm90_shared_expert;
  e.create_simulated_group = &cuda::ep::make_sim_group;
  register_backend(e);
  cuda::register_layer_factory("simulated", &cuda::ep::make_sim_gpu_layer);
}

}  // namespace moe_ep::detail
