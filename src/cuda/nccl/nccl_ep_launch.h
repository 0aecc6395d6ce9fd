// Host entry points of the EP kernels with the NCCL peer policies (nccl_peers.cuh).
#pragma once

#include <cuda_runtime.h>
#include <nccl.h>
#include <nccl_device.h>

#include "cuda/ep/ep_params.h"

namespace moe_ep::cuda::ep {

enum class NcclPeerKind { kLsa, kGin };

// `launch.num_ranks` is 1 (this process's rank).
cudaError_t launch_ep_step_nccl(EpStep step, const EpHostLaunch& launch, NcclPeerKind kind,
                                const ncclDevComm& comm, ncclWindow_t window, cudaStream_t stream);

}  // namespace moe_ep::cuda::ep
