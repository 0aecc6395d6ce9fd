// The seam between the runtime (src/core) and the NCCL transport (src/cuda/nccl), in the manner
// of make_cuda_layer: core declares, the NCCL sources define when the build has NCCL
// (MOE_EP_WITH_NCCL), and runtime.cpp refuses NCCL communicator sources otherwise.
#pragma once

#include <memory>
#include <string>

#include "core/transport.h"
#include "moe_ep/runtime.h"

namespace moe_ep::detail {

#ifdef MOE_EP_WITH_NCCL
// Bootstraps the communicator of `bootstrap` (kNcclComm, kUniqueIdFile or kTcpStore) on its CUDA
// device, bounded by timeout_ms; throws kTimeout / kDevice / kUnsupported naming the rank and
// the phase (a missing or too old libnccl is kUnsupported with the version found).
std::shared_ptr<Transport> make_nccl_transport(const Bootstrap& bootstrap);
#endif

// "nccl <version> (<library path>)" when NCCL can be used here, else why not (for `moe_ep info`
// and for messages). Never throws.
std::string nccl_status();

// A world-size-1 runtime on `device` outside the process's one world: the local expert engine of
// an expert-parallel CUDA rank is a world-size-1 layer built on it. It owns no communicator.
std::shared_ptr<Runtime> make_local_runtime(Device device);

}  // namespace moe_ep::detail
