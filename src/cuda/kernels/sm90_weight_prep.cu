#include "cuda/kernels/sm90_weight_prep.h"

#include "cuda/tile/fp4_codec.h"

namespace moe_ep::cuda {
namespace {

constexpr int kStepK = 128;

__device__ __forceinline__ int64_t source_row(int64_t n, int64_t interleave_half) {
  if (interleave_half == 0) return n;
  const int64_t b = n / 8, i = n % 8;
  return (b % 2 == 0 ? 0 : interleave_half) + (b / 2) * 8 + i;
}

__global__ void mxfp4_row_scan_kernel(Mxfp4RowScanParams p) {
  const int lane = threadIdx.x % 32;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  if (row >= p.rows) return;
  const int32_t blocks = p.k / 32, words = mxfp4_zero_mask_words(p.k);
  const int64_t global_row = p.first_row + row;
  const uint8_t* packed = p.packed + row * (p.k / 2);
  const uint8_t* scales = p.scales + row * blocks;
  int lo = 0xFF, hi = -1;
  for (int32_t b0 = 0; b0 < blocks; b0 += 32) {
    const int32_t b = b0 + lane;
    bool zero = false;
    if (b < blocks) {
      // 16 packed bytes = the block's 32 codes; a code is zero when its magnitude bits are.
      const uint8_t* q = packed + b * 16;
      uint32_t any = 0;
#pragma unroll
      for (int i = 0; i < 16; ++i) any |= q[i];
      zero = (any & 0x77u) == 0;
      const int s = scales[b];
      if (s == 0xFF) atomicMin(p.first_bad, static_cast<unsigned long long>(global_row * blocks + b));
      if (!zero) {
        lo = min(lo, s);
        hi = max(hi, s);
      }
    }
    const uint32_t mask = __ballot_sync(0xFFFFFFFFu, zero);
    if (lane == 0) p.zero_mask[global_row * words + b0 / 32] = mask;
  }
#pragma unroll
  for (int o = 16; o > 0; o /= 2) {
    lo = min(lo, __shfl_xor_sync(0xFFFFFFFFu, lo, o));
    hi = max(hi, __shfl_xor_sync(0xFFFFFFFFu, hi, o));
  }
  if (lane == 0) {
    p.row_lo[global_row] = static_cast<uint8_t>(lo);
    p.row_hi[global_row] = static_cast<uint8_t>(hi < 0 ? 0 : hi);
  }
}

// One block per (expert, 8-row group), 128 threads: thread = lane * 4 + word writes bytes
// [4 * thread, 4 * thread + 4) of each 512-byte tile (sm90_grouped_gemm.h: lane g = row in the
// group, t = k quad; word w holds k = 32w + 4t + i (lo) and 32w + 16 + 4t + i (hi), i = 0..3).
__global__ void weight_tiles_kernel(WeightTileParams p) {
  const int64_t groups = p.n / 8;
  const int64_t e = blockIdx.x / groups, nb = blockIdx.x % groups;
  const int thread = threadIdx.x, lane = thread / 4, word = thread % 4;
  const int g = lane / 4, t = lane % 4;
  const int64_t steps = p.k / kStepK;
  const uint8_t* row = p.packed + (e * p.n + source_row(nb * 8 + g, p.interleave_half)) * (p.k / 2);
  uint8_t* tiles = p.tiles + ((e * groups + nb) * steps) * 512 + thread * 4;
  for (int64_t s = 0; s < steps; ++s) {
    const uint8_t* q = row + s * (kStepK / 2) + 16 * word + 2 * t;
    const uint8_t lo[4] = {static_cast<uint8_t>(q[0] & 0xF), static_cast<uint8_t>(q[0] >> 4),
                           static_cast<uint8_t>(q[1] & 0xF), static_cast<uint8_t>(q[1] >> 4)};
    const uint8_t hi[4] = {static_cast<uint8_t>(q[8] & 0xF), static_cast<uint8_t>(q[8] >> 4),
                           static_cast<uint8_t>(q[9] & 0xF), static_cast<uint8_t>(q[9] >> 4)};
    *reinterpret_cast<uint32_t*>(tiles + s * 512) = encode_fp4_word(lo, hi);
  }
}

// One thread per (expert, k step, kernel row): the step's 128/B scale bytes of that row.
__global__ void weight_scales_kernel(WeightScaleParams p) {
  const int64_t steps = p.k / kStepK, per_step = kStepK / p.block;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= p.experts * steps * p.n) return;
  const int64_t n = i % p.n, s = (i / p.n) % steps, e = i / (p.n * steps);
  const int64_t canonical = e * p.n + source_row(n, p.interleave_half);
  const uint8_t* src = p.scales + canonical * (p.k / p.block) + s * per_step;
  uint8_t* dst = p.out + i * per_step;
  const int words = mxfp4_zero_mask_words(p.k);
  for (int64_t j = 0; j < per_step; ++j) {
    uint8_t v = src[j];
    if (p.row_base != nullptr) {
      const int64_t b = s * per_step + j;
      const bool zero = (p.zero_mask[canonical * words + b / 32] >> (b % 32)) & 1u;
      v = zero ? 0 : static_cast<uint8_t>(v - p.row_base[e * p.n + n]);
    }
    dst[j] = v;
  }
}

int blocks_for(int64_t threads, int per_block) {
  return static_cast<int>((threads + per_block - 1) / per_block);
}

}  // namespace

cudaError_t launch_mxfp4_row_scan(const Mxfp4RowScanParams& p, cudaStream_t stream) {
  if (p.rows == 0) return cudaSuccess;
  constexpr int kRowsPerBlock = 8;
  mxfp4_row_scan_kernel<<<blocks_for(p.rows, kRowsPerBlock), 32 * kRowsPerBlock, 0, stream>>>(p);
  return cudaGetLastError();
}

cudaError_t launch_weight_tiles(const WeightTileParams& p, cudaStream_t stream) {
  if (p.experts == 0) return cudaSuccess;
  weight_tiles_kernel<<<static_cast<unsigned>(p.experts * (p.n / 8)), 128, 0, stream>>>(p);
  return cudaGetLastError();
}

cudaError_t launch_weight_scales(const WeightScaleParams& p, cudaStream_t stream) {
  const int64_t threads = p.experts * (p.k / kStepK) * p.n;
  if (threads == 0) return cudaSuccess;
  weight_scales_kernel<<<blocks_for(threads, 256), 256, 0, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace moe_ep::cuda
