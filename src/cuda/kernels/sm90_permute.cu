#include "cuda/kernels/sm90_permute.h"

#include <algorithm>

#include "cuda/kernels/sm90_kernel_config.cuh"
#include "cuda/kernels/sm90_permute_block.cuh"

namespace moe_ep::cuda {
namespace {

template <class Id>
__global__ void __launch_bounds__(kPermuteThreads) sm90_permute_kernel(const __grid_constant__ PermuteParams p) {
  extern __shared__ int32_t smem[];
  permute_block<Id>(p, smem);
}

template <class Id>
__global__ void __launch_bounds__(kRouteChunkThreads)
    sm90_route_chunk_count_kernel(const __grid_constant__ PermuteParams p, int chunk_slots) {
  extern __shared__ int32_t smem[];
  route_chunk_count_block<Id>(p, chunk_slots, smem);
}

template <class Id>
__global__ void __launch_bounds__(kRouteChunkThreads)
    sm90_route_chunk_scatter_kernel(const __grid_constant__ PermuteParams p, int chunk_slots) {
  extern __shared__ int32_t smem[];
  route_chunk_scatter_block<Id>(p, chunk_slots, smem);
}

size_t chunk_scatter_shared_bytes(int num_experts) {
  return sizeof(int32_t) * static_cast<size_t>(num_experts) * (3 + kRouteChunkWarps);
}

template <class Id>
cudaError_t configure_for(int num_experts) {
  cudaError_t e = raise_dynamic_shared_limit(sm90_permute_kernel<Id>, static_cast<int>(sm90_permute_shared_bytes(num_experts)));
  if (e == cudaSuccess)
    e = raise_dynamic_shared_limit(sm90_route_chunk_count_kernel<Id>, static_cast<int>(sizeof(int32_t) * num_experts));
  if (e == cudaSuccess)
    e = raise_dynamic_shared_limit(sm90_route_chunk_scatter_kernel<Id>, static_cast<int>(chunk_scatter_shared_bytes(num_experts)));
  return e;
}

template <class Id>
cudaError_t launch_for(const PermuteParams& p, cudaStream_t stream) {
  const int64_t slots = static_cast<int64_t>(p.num_tokens) * p.top_k;
  const int chunks = p.chunk_rows != nullptr ? sm90_route_chunks(slots) : 0;
  if (chunks == 0)
    return launch_dependent(sm90_permute_kernel<Id>, 1, kPermuteThreads, sm90_permute_shared_bytes(p.num_experts),
                            stream, p);
  const int chunk_slots = sm90_route_chunk_slots(slots);
  if (const cudaError_t e = launch_dependent(sm90_route_chunk_count_kernel<Id>, chunks, kRouteChunkThreads,
                                             sizeof(int32_t) * p.num_experts, stream, p, chunk_slots);
      e != cudaSuccess)
    return e;
  return launch_dependent(sm90_route_chunk_scatter_kernel<Id>, chunks, kRouteChunkThreads,
                          chunk_scatter_shared_bytes(p.num_experts), stream, p, chunk_slots);
}

}  // namespace

int sm90_route_chunk_slots(int64_t num_slots) {
  const int64_t even = (num_slots + kRouteMaxChunks - 1) / kRouteMaxChunks;
  return static_cast<int>(std::max<int64_t>(kRouteChunkSlots, (even + 255) / 256 * 256));
}

int sm90_route_chunks(int64_t num_slots) {
  if (num_slots <= kRouteOneBlockMaxSlots) return 0;
  const int64_t chunk = sm90_route_chunk_slots(num_slots);
  return static_cast<int>((num_slots + chunk - 1) / chunk);
}

int sm90_route_chunks_bound(int64_t max_slots) {
  if (max_slots <= kRouteOneBlockMaxSlots) return 0;
  return static_cast<int>(std::min<int64_t>(kRouteMaxChunks, (max_slots + kRouteChunkSlots - 1) / kRouteChunkSlots));
}

size_t sm90_permute_shared_bytes(int num_experts) {
  return sizeof(int32_t) * static_cast<size_t>(num_experts) * (2 + kPermuteWarps);
}

cudaError_t configure_sm90_permute(int num_experts) {
  const cudaError_t e = configure_for<int32_t>(num_experts);
  return e != cudaSuccess ? e : configure_for<int64_t>(num_experts);
}

cudaError_t launch_sm90_permute(const PermuteParams& p, cudaStream_t stream) {
  return p.ids_are_int64 ? launch_for<int64_t>(p, stream) : launch_for<int32_t>(p, stream);
}

}  // namespace moe_ep::cuda
