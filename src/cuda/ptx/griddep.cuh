// Programmatic dependent launch (sm_90): a grid launched with launch_dependent (below) may start
// while the grid before it on the stream is still running.
//   grid_dependency_wait(): blocks until every prerequisite grid has completed and its memory
//     writes are visible. A dependent kernel calls it in every block before it reads anything
//     an earlier kernel wrote, writes anything an earlier kernel reads, or exits; so a grid
//     completes only after the grid before it, and stream order holds transitively.
//   launch_dependents(): lets the next grid be scheduled once every block of this grid has
//     called it (or exited); it orders no memory.
//   The one read allowed before the wait: data of a grid two launches back, where every block of
//   the grid between calls launch_dependents only after its own wait (that grid has then
//   completed); read it through L2 (__ldcg). The one-token layer's down kernel reads the routing
//   ids so.
// Both are no-ops in a grid launched without the attribute.
#pragma once

#include <cuda_runtime.h>

namespace moe_ep::cuda {
namespace ptx {

__device__ __forceinline__ void grid_dependency_wait() { asm volatile("griddepcontrol.wait;\n" ::: "memory"); }

__device__ __forceinline__ void launch_dependents() { asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory"); }

}  // namespace ptx

// Launches `kernel` with programmatic stream serialization allowed (the kernel must call
// ptx::grid_dependency_wait as described above). Captured into a CUDA graph as a programmatic
// edge.
template <class... Params, class... Args>
cudaError_t launch_dependent(void (*kernel)(Params...), dim3 grid, dim3 block, size_t shared_bytes,
                             cudaStream_t stream, const Args&... args) {
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = shared_bytes;
  config.stream = stream;
  config.attrs = attr;
  config.numAttrs = 1;
  return cudaLaunchKernelEx(&config, kernel, args...);
}

}  // namespace moe_ep::cuda
