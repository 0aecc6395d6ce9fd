// The EP kernels instantiated for the one-GPU simulation policy.
#include "cuda/ep/ep_launch.h"
#include "cuda/ep/sim_peers.cuh"

namespace moe_ep::cuda::ep {

cudaError_t launch_ep_step_sim(EpStep step, const EpHostLaunch& launch, const SimPeerWindows& peers,
                               cudaStream_t stream) {
  EpLaunch<SimPeers> p;
  p.host = launch;
  for (int r = 0; r < kMaxLaunchRanks; ++r) p.peers.windows[r] = peers.windows[r];
  return launch_ep_step(step, p, stream);
}

}  // namespace moe_ep::cuda::ep
