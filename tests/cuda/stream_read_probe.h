// A plain streaming read of device memory, the practical read floor that the weight-streaming
// kernels' timings are set against (same timing method, same bytes, L2 flushed alike).
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda_runtime.h>

namespace moe_ep::cuda::test {

// Reads `bytes` (a multiple of 16) at `src` (16-byte aligned) once: 16-byte loads cached in L2
// alone (ld.global.cg, normal eviction priority, so a read of a buffer larger than L2 evicts what
// was there), 8 in flight per thread, 4 blocks of 512 threads per SM. `sink` is written only if
// the reads' XOR hits a fixed word, so the loads stay.
cudaError_t launch_stream_read(const void* src, size_t bytes, uint32_t* sink, cudaStream_t stream);

}  // namespace moe_ep::cuda::test
