// A device run of tile/fp4_bf16_codec.h's fragment decode (tests/cuda/rs_codec_probe.cu), so the
// host-tested decode is also checked on the GPU (mul.rn.bf16x2 of the subnormal 2^-127 of code 1).
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

namespace moe_ep::cuda::test {

// For each i < n: rs_a_fragment<steps[i]>(words_g[i], words_g8[i], rs_fold_factor(d_g[i]),
// rs_fold_factor(d_g8[i])) into out[4 i .. 4 i + 3]. Device pointers; synchronous.
cudaError_t run_rs_fragment_probe(const uint32_t* words_g, const uint32_t* words_g8, const uint32_t* d_g,
                                  const uint32_t* d_g8, const int32_t* steps, int n, uint32_t* out);

}  // namespace moe_ep::cuda::test
