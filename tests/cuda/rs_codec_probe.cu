#include "rs_codec_probe.h"

#include "cuda/tile/fp4_bf16_codec.h"

namespace moe_ep::cuda::test {
namespace {

__global__ void rs_fragment_probe_kernel(const uint32_t* words_g, const uint32_t* words_g8, const uint32_t* d_g,
                                         const uint32_t* d_g8, const int32_t* steps, int n, uint32_t* out) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  uint32_t a[4];
  const uint32_t fg = rs_fold_factor(d_g[i]), fg8 = rs_fold_factor(d_g8[i]);
  if (steps[i] == 0) rs_a_fragment<0>(words_g[i], words_g8[i], fg, fg8, a);
  else rs_a_fragment<1>(words_g[i], words_g8[i], fg, fg8, a);
  for (int r = 0; r < 4; ++r) out[4 * i + r] = a[r];
}

}  // namespace

cudaError_t run_rs_fragment_probe(const uint32_t* words_g, const uint32_t* words_g8, const uint32_t* d_g,
                                  const uint32_t* d_g8, const int32_t* steps, int n, uint32_t* out) {
  if (n <= 0) return cudaSuccess;
  rs_fragment_probe_kernel<<<(n + 255) / 256, 256>>>(words_g, words_g8, d_g, d_g8, steps, n, out);
  cudaError_t err = cudaGetLastError();
  return err == cudaSuccess ? cudaDeviceSynchronize() : err;
}

}  // namespace moe_ep::cuda::test
