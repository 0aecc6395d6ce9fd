// One scale per 128 elements of Q8 rows (sm90_q8_regroup.h). Eight threads per group of 128
// codes (one warp holds four groups whole): thread c of a group moves 16-byte chunk c, which lies
// in k32 block c / 2; thread 0 writes the group's four scale bytes.
#include "cuda/kernels/sm90_q8_regroup.h"

#include "cuda/tile/e4m3_rescale.cuh"

namespace moe_ep::cuda {
namespace {

__global__ void __launch_bounds__(256) sm90_q8_regroup_kernel(const Q8RegroupParams p) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t group = i / 8, groups_per_row = p.cols / 128;
  const int c = static_cast<int>(i % 8);
  const bool active = group < p.rows * groups_per_row && (!p.row_count || group / groups_per_row < *p.row_count);
  uint32_t word = 0;
  uint4 codes = make_uint4(0, 0, 0, 0);
  if (active) {
    // Byte loads: a caller's scale rows need not be 4-byte aligned.
    for (int b = 0; b < 4; ++b) word |= static_cast<uint32_t>(p.scales[group * 4 + b]) << (8 * b);
    codes = reinterpret_cast<const uint4*>(p.q + group * 128)[c];
  }
  // In place, thread 0 of a group overwrites the scale bytes the other seven read: all of them
  // have read before any writes (the group's threads are in one warp).
  __syncwarp();
  if (!active) return;
  const int top = e8m0_word_max(word);
  const int d = top - static_cast<int>((word >> (8 * (c / 2))) & 0xFF);
  if (d > 0)
    reinterpret_cast<uint4*>(p.q_out + group * 128)[c] = e4m3x16_times_pow2_neg(codes, d);
  else if (p.q_out != p.q)
    reinterpret_cast<uint4*>(p.q_out + group * 128)[c] = codes;
  if (c == 0)
    for (int b = 0; b < 4; ++b) p.scales_out[group * 4 + b] = static_cast<uint8_t>(top);
}

}  // namespace

cudaError_t launch_sm90_q8_regroup_128(const Q8RegroupParams& p, cudaStream_t stream) {
  if (p.rows < 0 || p.cols <= 0 || p.cols % 128 != 0 || !p.q || !p.scales || !p.q_out || !p.scales_out)
    return cudaErrorInvalidValue;
  const int64_t threads = p.rows * (p.cols / 128) * 8;
  if (threads == 0) return cudaSuccess;
  sm90_q8_regroup_kernel<<<static_cast<unsigned>((threads + 255) / 256), 256, 0, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace moe_ep::cuda
