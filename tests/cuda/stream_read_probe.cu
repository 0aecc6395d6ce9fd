#include "stream_read_probe.h"

namespace moe_ep::cuda::test {
namespace {

constexpr int kThreads = 512, kInFlight = 8;

__global__ void __launch_bounds__(kThreads) stream_read_kernel(const uint4* __restrict__ src, int64_t n,
                                                               uint32_t* sink) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kThreads;
  int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  uint32_t acc = 0;
  for (; i + (kInFlight - 1) * stride < n; i += kInFlight * stride) {
    uint4 v[kInFlight];
#pragma unroll
    for (int j = 0; j < kInFlight; ++j) v[j] = __ldcg(src + i + j * stride);
#pragma unroll
    for (int j = 0; j < kInFlight; ++j) acc ^= v[j].x ^ v[j].y ^ v[j].z ^ v[j].w;
  }
  for (; i < n; i += stride) {
    const uint4 v = __ldcg(src + i);
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x9e3779b9u) *sink = acc;
}

}  // namespace

cudaError_t launch_stream_read(const void* src, size_t bytes, uint32_t* sink, cudaStream_t stream) {
  if (bytes % 16 != 0 || reinterpret_cast<uintptr_t>(src) % 16 != 0) return cudaErrorInvalidValue;
  int device = 0, sms = 0;
  cudaError_t e = cudaGetDevice(&device);
  if (e == cudaSuccess) e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  if (e != cudaSuccess) return e;
  stream_read_kernel<<<4 * sms, kThreads, 0, stream>>>(static_cast<const uint4*>(src), static_cast<int64_t>(bytes / 16),
                                                       sink);
  return cudaGetLastError();
}

}  // namespace moe_ep::cuda::test
