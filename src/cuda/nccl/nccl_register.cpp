// Registers the NCCL transport (one process per GPU: a caller's communicator, a unique-id file
// or a TCP store) and the CUDA layer that runs over it.
#include "core/registry.h"
#include "cuda/cuda_layers.h"
#include "cuda/nccl/nccl_api.h"
#include "cuda/nccl/nccl_transport.h"

namespace moe_ep::cuda::nccl {

std::unique_ptr<Layer::Impl> make_nccl_ep_layer(const LayerRequest& request);  // nccl_ep_layer.cpp

namespace {

constexpr CommSource kSources[] = {CommSource::kNcclComm, CommSource::kUniqueIdFile, CommSource::kTcpStore};
constexpr DeviceType kDevices[] = {DeviceType::kCUDA};

std::shared_ptr<detail::Transport> create_transport(const Bootstrap& b, std::shared_ptr<void>&) {
  return std::make_shared<NcclTransport>(b);
}

uint32_t parts(const Bootstrap&) {
  return kRuntimeSymmetricWorkspace | kRuntimePeerTransport | kRuntimeDeviceErrorFlag;
}

}  // namespace
}  // namespace moe_ep::cuda::nccl

namespace moe_ep::detail {

void register_nccl_transport() {
  using namespace moe_ep::cuda::nccl;
  register_transport({"nccl", kSources, kDevices, &parts, &create_transport, &nccl_status});
  cuda::register_layer_factory("nccl", &make_nccl_ep_layer);
}

}  // namespace moe_ep::detail
