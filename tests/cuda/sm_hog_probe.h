// A kernel that holds SMs for a while: `blocks` blocks of 1024 threads, each taking `shared_bytes`
// of shared memory, spin for `nanoseconds` of the globaltimer and exit. Tests run it on another
// stream to take SMs from a kernel that needs its blocks spread over many of them.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

namespace moe_ep::cuda::test {

cudaError_t launch_sm_hog(int blocks, int shared_bytes, uint64_t nanoseconds, cudaStream_t stream);

}  // namespace moe_ep::cuda::test
