// The shared expert on the GPU (moe_ep/shared_expert.h's precision recipe, bf16 weights):
//   kernel 1: gu = bf16(x . W13^T), gate = min(gu[:I], c), up = clamp(gu[I:], -c, c),
//             h = bf16(silu(gate) * up)                     one warp per intermediate index i
//   kernel 2: o = bf16(h . W2^T); out = o, or y = bf16(y + o) (accumulate)   one warp per 2 rows
// Each dot product runs in the CPU's order: 16 lanes hold the 16 interleaved partial sums
// (term i into partial i % 16, in increasing i), folded pairwise by shuffles (p[j] += p[j+8],
// +4, +2, +1); bf16 x bf16 products are exact in fp32, so the sums are the CPU's bit for bit.
// SiLU uses expf (2 ulp), where the CPU uses std::exp: h may differ in a last bf16 bit.
// Every kTok tokens of a block share the weight loads.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

namespace moe_ep::cuda {

struct SharedExpertParams {
  const uint16_t* x = nullptr;    // bf16 [T, H]
  const uint16_t* w13 = nullptr;  // bf16 [2I, H]
  const uint16_t* w2 = nullptr;   // bf16 [H, I]
  uint16_t* h = nullptr;          // bf16 [T, I] scratch
  uint16_t* y = nullptr;          // bf16 [T, H]: out, or accumulated into
  int32_t num_tokens = 0, hidden = 0, intermediate = 0;
  float clamp = 0.0f;             // +inf when absent
  int32_t accumulate = 0;
};

cudaError_t launch_sm90_shared_expert(const SharedExpertParams& params, cudaStream_t stream);

}  // namespace moe_ep::cuda
