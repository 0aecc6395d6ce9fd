// Small-batch (decode) NVFP4 x NVFP4 grouped GEMM: f16 mma.sync m16n8k16 with the operands
// swapped, as Mxfp4DecodeMainloop does for mxfp4. The weights are the m16 side, straight from
// the micro-tile layout into registers: word kb of lane 4g + t of micro-tile 2w (2w + 1) holds
// elements 4t..4t+3 of k16 blocks 2kb (low half) and 2kb + 1 (high half) of feature g (g + 8).
// In the k order of Nvfp4Mainloop (lane t's k pair 0 = elements 4t, 4t+1 and pair 1 = 4t+2,
// 4t+3, the same permutation for both operands) those are a0 / a2 (a1 / a3) of each block. The
// tile's rows (tokens) are the n side: b0 / b1 of token g are its elements 4t..4t+3.
//   acc[n, r] += mma_k16(w[n, j] * sw[n, j], a[r, j] * sa[r, j])      (global scales: epilogue)
// Every operand is f16(e4m3(e2m1)) * f16(e4m3 block scale), exact in f16, and the k16 blocks
// are accumulated in Nvfp4Mainloop's order, so the outputs are those of the 64 x 128 kernels
// with 16-row instead of 64-row tiles and the weights read once per m tile, into registers.
//
// kSplit = 2 (for one or two tokens a tile, where a warp's serial walk over K bounds the GEMM):
// the block's 8 warps are 4 row groups x 2 halves of K (64 weight rows a block); after the main
// loop the second half's warps hand their sums to the first's through shared memory (the A rows'
// region, read by then), which add them (first half + second half: the same order every run) and
// alone run the epilogue. Not bitwise the 64 x 128 kernels: two fp32 sums added.
//
// Block: kDecodeThreads (8 warps) = kDecodeBlockN weight rows (16 per warp) x one m tile of
// kDecodeBlockM rows (sm90_decode_tile.cuh). Weights stream from global memory kDecodePrefetch k steps
// ahead of the MMAs (read once, L1 bypassed); the tile's A rows and scales are copied into
// shared memory once, before the main loop (packed FP4 is small: 16 x K/2 bytes).
//
// Shared memory (nvfp4_decode_shared_bytes(K)):
//   A    16 rows at stride nvfp4_decode_a_stride(K) (64 mod 128: the 16-byte loads of rows g and
//        g + 1 in one quarter warp hit different banks). The 64 bytes of k step s of a row are
//        in lane order (rearranged at load): bytes 16t..16t+15 are lane t's words i = 0..3, word
//        i = elements 4t..4t+3 of k16 block 2i (low half) and 2i + 1 (high half), standard
//        nibble order (decode_fp4x8_standard).
//   SA   16 rows x K/16 e4m3 block scales as given, stride nvfp4_decode_sa_stride(K) (8 mod 128:
//        the 8-byte loads of 4 rows in one half warp hit different banks).
//   SRC  the tile's 16 source rows (int32, -1 past the tile).
// Rows past the tile are zeros in the n8 halves the block computes (only rows 0..7 when the tile
// has at most 8 rows).
#pragma once

#include <cstdint>
#include <type_traits>

#include "cuda/kernels/sm90_decode_tile.cuh"
#include "cuda/kernels/sm90_grouped_gemm_tile.cuh"
#include "cuda/ptx/convert.cuh"
#include "cuda/ptx/cp_async.cuh"
#include "cuda/ptx/ld_global.cuh"
#include "cuda/ptx/mma.cuh"
#include "cuda/tile/fp4_codec.h"
#include "cuda/tile/nvfp4_f16_codec.h"

namespace moe_ep::cuda {

constexpr int nvfp4_decode_round128(int bytes) { return (bytes + 127) / 128 * 128; }
constexpr int nvfp4_decode_a_stride(int k) { return nvfp4_decode_round128(k / 2) + 64; }
constexpr int nvfp4_decode_sa_stride(int k) { return nvfp4_decode_round128(k / 16) + 8; }
constexpr int nvfp4_decode_sa_offset(int k) { return kDecodeBlockM * nvfp4_decode_a_stride(k); }
constexpr int nvfp4_decode_src_offset(int k) {
  return nvfp4_decode_sa_offset(k) + kDecodeBlockM * nvfp4_decode_sa_stride(k);
}
constexpr int nvfp4_decode_shared_bytes(int k) { return nvfp4_decode_src_offset(k) + kDecodeBlockM * 4; }

template <int kSplit = 1>
struct Nvfp4DecodeMainloop {
  static constexpr int kPrefetch = kDecodePrefetch;  // k steps of weights in registers ahead of the MMAs
  static_assert(kSplit == 1 || kSplit == 2, "K in one or two parts");
  static constexpr int kGroups = kDecodeWarps / kSplit;  // 16-row groups of a block
  static constexpr int kBlockRows = 16 * kGroups;
  // The warp's K part.
  static __device__ __forceinline__ int part() { return kSplit == 1 ? 0 : static_cast<int>(threadIdx.x / 32) / kGroups; }
  // Whether a layer of K = k can split: whole k steps per part, and the region of A (16 rows of
  // K / 2 + 64 bytes) holds the second half's sums (8 floats a thread of kGroups warps).
  static constexpr bool splits(int k) {
    return kSplit == 1 || (k % (kSplit * kGemmBlockK) == 0 && nvfp4_decode_sa_offset(k) >= 32 * kGroups * 8 * 4);
  }
  static constexpr int kStepABytes = 64;     // one row's packed FP4 of a 128-wide k step
  static constexpr int kStepScales = 8;      // one row's e4m3 block scales of a k step

  // The tile's rows of A and of its scales into shared memory (the weights' first k steps are
  // already in flight). Thread i owns the (row, k step) items i, i + 256, ...: it copies each raw
  // with cp.async (all of them in flight at once; zeros past the tile), waits for its own copies,
  // then rearranges each item's four 16-byte words into lane order in place (lane t's word i
  // comes from word i, so no other thread's data is read). The caller's barrier publishes them.
  static __device__ __forceinline__ void load_a(const GroupedGemmOperands& op, const DecodeTile& t, uint8_t* smem,
                                                bool two_halves) {
    const int k = op.k, k_steps = k / kGemmBlockK;
    int32_t* source = reinterpret_cast<int32_t*>(smem + nvfp4_decode_src_offset(k));
    if (threadIdx.x < kDecodeBlockM)
      source[threadIdx.x] = static_cast<int>(threadIdx.x) < t.num_rows ? a_source_row(op, t.row_begin + threadIdx.x) : -1;
    __syncthreads();
    const int items = (two_halves ? kDecodeBlockM : kDecodeBlockM / 2) * k_steps;
    const int a_stride = nvfp4_decode_a_stride(k), sa_stride = nvfp4_decode_sa_stride(k);
    const uint32_t base = ptx::smem_addr(smem);
    for (int item = threadIdx.x; item < items; item += kDecodeThreads) {
      const int r = item / k_steps, s = item % k_steps, src = source[r];
      const uint32_t n = src >= 0 ? 16u : 0u;
      const uint8_t* a = src >= 0 ? op.a + static_cast<int64_t>(src) * op.a_row_bytes + s * kStepABytes : op.a;
#pragma unroll
      for (int q = 0; q < 4; ++q) ptx::cp_async_16(base + r * a_stride + s * kStepABytes + 16 * q, a + (n ? 16 * q : 0), n);
      const uint8_t* sa = src >= 0 ? op.a_scale + static_cast<int64_t>(src) * op.a_scale_row_bytes + s * kStepScales
                                   : op.a_scale;
      ptx::cp_async_8(base + nvfp4_decode_sa_offset(k) + r * sa_stride + s * kStepScales, sa, n / 2);
    }
    ptx::cp_async_commit();
    ptx::cp_async_wait<0>();
    for (int item = threadIdx.x; item < items; item += kDecodeThreads) {
      uint4* words = reinterpret_cast<uint4*>(smem + (item / k_steps) * a_stride + (item % k_steps) * kStepABytes);
      const uint4 in[4] = {words[0], words[1], words[2], words[3]};
      const uint32_t w[16] = {in[0].x, in[0].y, in[0].z, in[0].w, in[1].x, in[1].y, in[1].z, in[1].w,
                              in[2].x, in[2].y, in[2].z, in[2].w, in[3].x, in[3].y, in[3].z, in[3].w};
#pragma unroll
      for (int lt = 0; lt < 4; ++lt)
        words[lt] = make_uint4(nvfp4_lane_word(w, lt, 0), nvfp4_lane_word(w, lt, 1), nvfp4_lane_word(w, lt, 2),
                               nvfp4_lane_word(w, lt, 3));
    }
  }

  static __device__ __forceinline__ void run(const GroupedGemmOperands& op, const DecodeTile& t, uint8_t* smem,
                                             DecodeAccumulators& acc) {
    const int lane = threadIdx.x % 32, g = lane / 4, tq = lane % 4;
    const int k = op.k, k_steps = k / kGemmBlockK;
    const bool two_halves = t.num_rows > 8;  // block-uniform
    const int steps = k_steps / kSplit, first_step = part() * steps;  // this warp's k steps
    zero_accumulators(acc);

    // This warp's weights and the 8 scale bytes of its rows per k step, kPrefetch k steps ahead.
    DecodeWeightStream<uint2, kPrefetch, kGroups> ws(op, t, k_steps, first_step, steps);

    load_a(op, t, smem, two_halves);
    __syncthreads();

    // This lane's words of token g (half 1: token g + 8) and its scales, at k step 0.
    const int a_stride = nvfp4_decode_a_stride(k), sa_stride = nvfp4_decode_sa_stride(k);
    const uint8_t* a_lane = smem + g * a_stride + tq * 16;
    const uint8_t* sa_lane = smem + nvfp4_decode_sa_offset(k) + g * sa_stride;
    // The main loop for one and for two n8 halves (no per-MMA branch on the tile's row count),
    // over the warp's k steps (j of them done; k step first_step + j).
    auto main_loop = [&](auto two) {
      for (int j0 = 0; j0 < steps; j0 += kPrefetch) {
#pragma unroll
        for (int s = 0; s < kPrefetch; ++s) {
          const int j = j0 + s, ks = first_step + j;
          if (j >= steps) break;
          step<decltype(two)::value>(a_lane + ks * kStepABytes, sa_lane + ks * kStepScales, a_stride, sa_stride,
                                     ws.w[s][0], ws.w[s][1], ws.s[s][0], ws.s[s][1], acc);
          if (j + kPrefetch < steps) ws.fetch(s);
        }
        ws.advance();
      }
    };
    if (two_halves)
      main_loop(std::true_type{});
    else
      main_loop(std::false_type{});
    // The halves' hand-over in the A rows' region (load_a's copies all landed before the loop).
    if constexpr (kSplit == 2) add_second_k_half<kGroups>(reinterpret_cast<float*>(smem), acc);
  }

  // One 128-wide k step: 4 pairs of k16 blocks x (1 or 2) n8 halves. a: the step's lane words
  // of token g (half 1 at + 8 rows); sa: the step's scales of token g.
  template <bool kTwoHalves>
  static __device__ __forceinline__ void step(const uint8_t* a, const uint8_t* sa, int a_stride, int sa_stride,
                                              const uint4& w0, const uint4& w1, const uint2& sw0,
                                              const uint2& sw1, DecodeAccumulators& acc) {
    uint4 xa[2];
    uint2 xs[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      if (h == 1 && !kTwoHalves) break;
      xa[h] = *reinterpret_cast<const uint4*>(a + 8 * h * a_stride);
      xs[h] = *reinterpret_cast<const uint2*>(sa + 8 * h * sa_stride);
    }
#pragma unroll
    for (int kb = 0; kb < 4; ++kb) {  // k16 blocks 2kb, 2kb + 1
      const uint32_t word0 = kb == 0 ? w0.x : kb == 1 ? w0.y : kb == 2 ? w0.z : w0.w;
      const uint32_t word1 = kb == 0 ? w1.x : kb == 1 ? w1.y : kb == 2 ? w1.z : w1.w;
      uint32_t e4[2][2];  // [row g, g + 8][block 2kb, 2kb + 1]
      decode_fp4_word(word0, e4[0][0], e4[0][1]);
      decode_fp4_word(word1, e4[1][0], e4[1][1]);
      const uint32_t s_g = nvfp4_scale_pair(sw0, kb), s_g8 = nvfp4_scale_pair(sw1, kb);
      uint32_t x4[2][2], s_x[2];  // [half][block]
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        if (h == 1 && !kTwoHalves) break;
        decode_fp4x8_standard(kb == 0 ? xa[h].x : kb == 1 ? xa[h].y : kb == 2 ? xa[h].z : xa[h].w, x4[h][0], x4[h][1]);
        s_x[h] = nvfp4_scale_pair(xs[h], kb);
      }
#pragma unroll
      for (int sub = 0; sub < 2; ++sub) {
        uint32_t af[4];  // a0 = row g pair 0, a1 = row g + 8 pair 0, a2 = row g pair 1, a3 = row g + 8 pair 1
        if (sub == 0) {
          nvfp4_scaled_pairs<false>(e4[0][0], s_g, af[0], af[2]);
          nvfp4_scaled_pairs<false>(e4[1][0], s_g8, af[1], af[3]);
        } else {
          nvfp4_scaled_pairs<true>(e4[0][1], s_g, af[0], af[2]);
          nvfp4_scaled_pairs<true>(e4[1][1], s_g8, af[1], af[3]);
        }
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          if (h == 1 && !kTwoHalves) break;
          uint32_t b0, b1;
          if (sub == 0)
            nvfp4_scaled_pairs<false>(x4[h][0], s_x[h], b0, b1);
          else
            nvfp4_scaled_pairs<true>(x4[h][1], s_x[h], b0, b1);
          ptx::mma_m16n8k16_f16(acc[h], af, b0, b1, acc[h]);
        }
      }
    }
  }
};

}  // namespace moe_ep::cuda
