// The EP kernels instantiated for the NCCL LSA and GIN peer policies.
#include "cuda/nccl/nccl_ep_launch.h"
#include "cuda/nccl/nccl_peers.cuh"

namespace moe_ep::cuda::ep {

cudaError_t launch_ep_step_nccl(EpStep step, const EpHostLaunch& launch, NcclPeerKind kind,
                                const ncclDevComm& comm, ncclWindow_t window, cudaStream_t stream) {
  if (kind == NcclPeerKind::kLsa) {
    EpLaunch<LsaPeers> p{launch, {comm, window}};
    return launch_ep_step(step, p, stream);
  }
  EpLaunch<GinPeers> p{launch, {comm, window}};
  return launch_ep_step(step, p, stream);
}

}  // namespace moe_ep::cuda::ep
