// Host entry points of the expert-parallel kernels per peer policy (the NCCL policies'
// entry points are in cuda/nccl/nccl_ep_launch.h).
#pragma once

#include <cuda_runtime.h>

#include "cuda/ep/ep_params.h"

namespace moe_ep::cuda::ep {

// The one-GPU simulation: windows[r] is rank r's workspace on this GPU.
struct SimPeerWindows {
  std::byte* windows[kMaxLaunchRanks] = {};
};
cudaError_t launch_ep_step_sim(EpStep step, const EpHostLaunch& launch, const SimPeerWindows& peers,
                               cudaStream_t stream);

}  // namespace moe_ep::cuda::ep
