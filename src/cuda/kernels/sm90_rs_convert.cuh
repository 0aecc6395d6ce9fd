// The activation conversions of the 16-bit register-operand GEMMs (sm90_rs16_mainloop.cuh):
// quantized rows of k values -> 16-bit rows [rows, k] in the order along k that the kernel's A
// fragments take. One thread per (row, scale block): Block::convert turns block b (its codes and
// its scale) into the block's kValues 16-bit values, already at their positions (a block's
// positions are its own, permuted), stored as 16-byte words. Rows from *row_count on (when
// given) are neither read nor written.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

namespace moe_ep::cuda {

// N 16-bit values (N a multiple of 8) to 16-byte aligned out, as N / 8 16-byte stores.
template <int N>
__device__ __forceinline__ void store_rs_values(const uint16_t (&v)[N], uint16_t* out) {
  uint4* dst = reinterpret_cast<uint4*>(out);
#pragma unroll
  for (int q = 0; q < N / 8; ++q) {
    uint32_t w[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) w[i] = static_cast<uint32_t>(v[8 * q + 2 * i]) | (static_cast<uint32_t>(v[8 * q + 2 * i + 1]) << 16);
    dst[q] = make_uint4(w[0], w[1], w[2], w[3]);
  }
}

template <class Block>
__global__ void __launch_bounds__(256) sm90_rs_convert_kernel(const uint8_t* __restrict__ codes,
                                                              const uint8_t* __restrict__ scales, int64_t blocks,
                                                              const int32_t* row_count, int blocks_per_row,
                                                              uint16_t* __restrict__ out) {
  const int64_t b = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (b >= blocks || (row_count && b / blocks_per_row >= *row_count)) return;
  uint16_t v[Block::kValues];
  Block::convert(codes, scales, b, v);
  store_rs_values(v, out + b * Block::kValues);
}

template <class Block>
cudaError_t launch_rs_convert(const uint8_t* codes, const uint8_t* scales, int64_t rows, const int32_t* row_count,
                              int k, uint16_t* out, cudaStream_t stream) {
  if (k % 128 != 0) return cudaErrorInvalidValue;
  const int64_t blocks = rows * (k / Block::kValues);
  if (blocks == 0) return cudaSuccess;
  sm90_rs_convert_kernel<Block><<<static_cast<unsigned>((blocks + 255) / 256), 256, 0, stream>>>(
      codes, scales, blocks, row_count, k / Block::kValues, out);
  return cudaGetLastError();
}

}  // namespace moe_ep::cuda
