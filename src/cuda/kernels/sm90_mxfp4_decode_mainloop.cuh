// Small-batch (decode) mxfp4 x Q8 grouped GEMM: mma.sync m16n8k32 with the operands swapped.
// The weights are the m16 side, straight from the micro-tile layout into registers (a warp's
// two micro-tiles 2w, 2w+1 of the block are exactly the A fragments of 16 output features:
// word kb of lane 4g+t decodes to a0/a2 for row g, the second micro-tile's to a1/a3); the
// tile's rows (tokens) are the n side, two n8 halves of a 16-row m tile:
//   acc[n, r] += mma_k32(w[n, kb], a[r, kb]) * 2^sa[r, kb] * 2^sw[n, kb]   (folded: * 2^sa only)
// The same products and the same per-k32 fp32 promotion as Mxfp4MainloopT, so the outputs are
// bitwise those of the 64 x 128 mma.sync kernels, with 16-row instead of 64-row tiles and the
// weights read once per m tile without a shared-memory round trip.
//
// Block: kDecodeThreads (8 warps) = kDecodeBlockN weight rows (16 per warp) x one m tile of
// kDecodeBlockM rows (routing block_m); block b = m_tile * (N / kDecodeBlockN) + n chunk. With K
// split in two (kSplit = 2): 64 weight rows (4 row groups x 2 halves of K, an A ring per half),
// the sums of the two halves added in a fixed order: not bitwise the kernels above.
// Weights stream from global memory kDecodePrefetch k steps ahead of the MMAs (read once, L1 bypassed);
// the tile's A rows stream through a ring of kARing chunks of kAChunkSteps k steps, kAAhead
// chunks ahead (cp.async), so shared memory does not grow with K and three blocks fit per SM.
//
// Instruction budget of the inner loop (SM90 has no FP8 mma.sync: each m16n8k32 e4m3 is two
// f16 HMMAs on unpacked operands, mma_m16n8k32_e4m3_via_f16): the activation scales are fp32
// in shared memory (one 8-byte load per k32 block and n8 half, no E8M0 conversion in the
// loop), the folded tables sit at a fixed shared address indexed by shift * 8 (one byte permute
// per word), and every shared address of a k step is a per-lane base plus a constant.
//
// Shared memory (decode_shared_bytes(K)):
//   A    kARing chunks x 16 rows x kAChunkSteps * 128 bytes e4m3 (per K part); in a chunk,
//        16-byte column c of row r at ALayout::offset(r, c): here DecodeALayout, r *
//        kAChunkRowBytes + (c & ~7) * 16 + ((c ^ r) & 7) * 16 (XOR inside each 128-byte k step,
//        so the ldmatrix rows of 8 tokens hit 8 bank groups; the FP8 mainloop's DecodeWgmmaALayout
//        keeps each k step's 16 rows together for the wgmma)
//   SAF  K/32 k32 blocks x 16 rows fp32: 2^sa of row r, block kb at (kb * 16 + r) * 4
//        (rows past the tile: 0; rows 8..15 only written for tiles of more than 8 rows)
//   then the epilogue's 8 warps x 16 floats (before the main loop: the tile's 16 source rows)
// Static: the 15 folded decode tables, 8 bytes each (DecodeTables).
#pragma once

#include <cstdint>

#include "cuda/kernels/sm90_decode_tile.cuh"
#include "cuda/kernels/sm90_grouped_gemm.h"
#include "cuda/kernels/sm90_mxfp4_mainloop.cuh"
#include "cuda/ptx/cp_async.cuh"
#include "cuda/ptx/ld_global.cuh"
#include "cuda/ptx/ldmatrix.cuh"
#include "cuda/ptx/mbarrier.cuh"
#include "cuda/ptx/mma.cuh"
#include "cuda/tile/fp4_codec.h"
#include "cuda/tile/quant_device.cuh"

namespace moe_ep::cuda {

inline constexpr int kAChunkSteps = 4;                                // k steps per A chunk
inline constexpr int kAChunkRowBytes = kAChunkSteps * kGemmBlockK;    // 512
inline constexpr int kAChunkBytes = kDecodeBlockM * kAChunkRowBytes;  // 8 KB
inline constexpr int kARing = 3, kAAhead = kARing - 1;

// split: the K parts of a block (Mxfp4DecodeMainloop's kSplit), each with its own A ring.
constexpr int decode_saf_offset(int split = 1) { return split * kARing * kAChunkBytes; }
constexpr int decode_epilogue_offset(int k, int split = 1) {
  return decode_saf_offset(split) + (k / 32) * kDecodeBlockM * 4;
}
constexpr int decode_shared_bytes(int k, int split = 1) {
  return decode_epilogue_offset(k, split) + kDecodeWarps * 16 * 4;
}

// The folded decode tables: entry d = the e4m3 magnitude bytes of codes 0..7 for shift d.
struct DecodeTables {
  uint2 entry[16];
};

// Threads 0..15 of the block fill the tables (entry 15 unused: zeros); a barrier orders them
// before their first read.
__device__ __forceinline__ void init_decode_tables(DecodeTables& tables) {
  if (threadIdx.x < 16)
    tables.entry[threadIdx.x] = threadIdx.x < kFoldedShifts
                                    ? make_uint2(folded_table_word(threadIdx.x, 0), folded_table_word(threadIdx.x, 4))
                                    : make_uint2(0u, 0u);
}

// acc += part * 2^sa of the C fragment's two tokens (sa.x: token 2t, sa.y: 2t + 1); unfolded also
// times its rows' E8M0 factors, in the operand order of Mxfp4MainloopT (sa * sw).
template <bool kFolded>
__device__ __forceinline__ void promote_k32(float (&acc)[4], const float* part, float2 sa, float s_w0, float s_w1) {
  if constexpr (kFolded) {
    acc[0] = fmaf(part[0], sa.x, acc[0]);
    acc[1] = fmaf(part[1], sa.y, acc[1]);
    acc[2] = fmaf(part[2], sa.x, acc[2]);
    acc[3] = fmaf(part[3], sa.y, acc[3]);
  } else {
    acc[0] = fmaf(part[0], sa.x * s_w0, acc[0]);
    acc[1] = fmaf(part[1], sa.y * s_w0, acc[1]);
    acc[2] = fmaf(part[2], sa.x * s_w1, acc[2]);
    acc[3] = fmaf(part[3], sa.y * s_w1, acc[3]);
  }
}

// Where 16-byte column c (0 .. 31: 8 per k step) of tile row r sits in an A chunk.
// DecodeALayout: row-major, each row's kAChunkSteps k steps together, the XOR inside each
// 128-byte k step (ldmatrix rows of 8 tokens hit 8 bank groups).
struct DecodeALayout {
  static __device__ __forceinline__ uint32_t offset(int r, int c) {
    return r * kAChunkRowBytes + (c & ~7) * 16 + ((c ^ r) & 7) * 16;
  }
};

// The copies of the tile's A rows into the ring: thread i copies 16-byte column i % 32 of rows
// i / 32 and i / 32 + 8 (the second only for tiles of more than 8 rows) of every chunk, at
// ALayout::offset. The rows' sources are re-read from shared memory (source[16], -1 past the
// tile) at each chunk, so nothing of the copies stays in registers through the main loop.
// ring_chunk: the chunk's place in its ring (chunk itself, or its index within a K part).
template <class ALayout = DecodeALayout>
__device__ __forceinline__ void decode_copy_a_chunk(const GroupedGemmOperands& op, const int32_t* source,
                                                    uint32_t a_base, int chunk, int k_steps, bool two_rows,
                                                    int ring_chunk) {
  const int col = threadIdx.x % 32, first = chunk * kAChunkSteps;
  if (first + col / 8 >= k_steps) return;  // past K (last, partial chunk)
  const uint32_t slot = a_base + (ring_chunk % kARing) * kAChunkBytes;
#pragma unroll
  for (int j = 0; j < 2; ++j) {
    if (j == 1 && !two_rows) break;
    const int r = threadIdx.x / 32 + 8 * j, src = source[r];
    const uint32_t dst = slot + ALayout::offset(r, col);
    if (src >= 0)
      ptx::cp_async_16(dst, op.a + static_cast<int64_t>(src) * op.a_row_bytes + first * kGemmBlockK + col * 16);
    else
      ptx::cp_async_16(dst, op.a, 0);  // zero-fill
  }
}

// The A fragment of k32 block kb of a warp's 16 weight rows (w0, w1: the k step's words of rows
// g and g + 8; sw0, sw1: their scale words): a0 = row g lo, a1 = row g + 8 lo, a2 = row g hi,
// a3 = row g + 8 hi; and, not folded, the rows' E8M0 factors (folded: 1). Folded: byte kb of
// sw * 8 is the byte offset of the shift's table (shifts are <= 14).
template <bool kFolded>
__device__ __forceinline__ void decode_weight_fragment(int kb, const uint4& w0, const uint4& w1, uint32_t sw0,
                                                       uint32_t sw1, const DecodeTables& tables, uint32_t (&a)[4],
                                                       float& s_w0, float& s_w1) {
  const uint32_t word0 = kb == 0 ? w0.x : kb == 1 ? w0.y : kb == 2 ? w0.z : w0.w;
  const uint32_t word1 = kb == 0 ? w1.x : kb == 1 ? w1.y : kb == 2 ? w1.z : w1.w;
  s_w0 = s_w1 = 1.0f;
  if constexpr (kFolded) {
    const char* table_bytes = reinterpret_cast<const char*>(tables.entry);
    const uint2 t0 = *reinterpret_cast<const uint2*>(table_bytes + __byte_perm(sw0 << 3, 0, 0x4440 + kb));
    const uint2 t1 = *reinterpret_cast<const uint2*>(table_bytes + __byte_perm(sw1 << 3, 0, 0x4440 + kb));
    decode_fp4_word_with(word0, t0.x, t0.y, a[0], a[2]);
    decode_fp4_word_with(word1, t1.x, t1.y, a[1], a[3]);
  } else {
    decode_fp4_word(word0, a[0], a[2]);
    decode_fp4_word(word1, a[1], a[3]);
    s_w0 = e8m0_to_float_device(__byte_perm(sw0, 0, 0x4440 + kb));
    s_w1 = e8m0_to_float_device(__byte_perm(sw1, 0, 0x4440 + kb));
  }
}

// kSplit = 2 (for one or two tokens a tile, where a warp's serial walk over K bounds the GEMM): the
// block's 8 warps are 4 row groups x 2 halves of K; each half has its own A ring, and after the
// main loop the second half's warps hand their sums to the first's through shared memory, which
// add them (acc = first half + second half: the same order every run) and alone run the
// epilogue on the block's 64 rows. K must be whole chunks per half (k_steps % 8 == 0).
// ALayout: where the A chunks keep a tile row's columns (the FP8 wgmma mainloop reuses load_a with
// its own layout, sm90_mxfp4_decode_fp8_mainloop.cuh).
template <bool kFolded, int kSplit = 1, class ALayout = DecodeALayout>
struct Mxfp4DecodeMainloop {
  static constexpr int kParts = kSplit;
  static constexpr int kMinBlocks = kDecodeMinBlocks;  // per SM, the kernel's launch bound
  static constexpr int kPrefetch = kDecodePrefetch;  // k steps of weights in registers ahead of the MMAs
  static_assert(kAChunkSteps % kPrefetch == 0, "a chunk holds whole rounds of the weight ring");
  static_assert(kSplit == 1 || kSplit == 2, "K in one or two parts");
  static constexpr int kGroups = kDecodeWarps / kSplit;  // 16-row groups of a block
  static constexpr int kBlockRows = 16 * kGroups;

  // The warp's K part, and its chunks of A (all of them, or its part's).
  static __device__ __forceinline__ int part() { return kSplit == 1 ? 0 : static_cast<int>(threadIdx.x / 32) / kGroups; }
  static __device__ __forceinline__ int part_chunks(int k_steps) {
    return kSplit == 1 ? (k_steps + kAChunkSteps - 1) / kAChunkSteps : k_steps / kSplit / kAChunkSteps;
  }
  // Chunk c of every part into its ring (part p's chunks start at p * part_chunks; none past a
  // part's last).
  static __device__ __forceinline__ void copy_chunks(const GroupedGemmOperands& op, const int32_t* source,
                                                     uint32_t a_base, int c, int k_steps, bool two_rows) {
    const int chunks = part_chunks(k_steps);
    if (kSplit > 1 && c >= chunks) return;
#pragma unroll
    for (int p = 0; p < kSplit; ++p)
      decode_copy_a_chunk<ALayout>(op, source, a_base + p * kARing * kAChunkBytes, p * chunks + c, k_steps, two_rows,
                                   c);
  }

  // The main loop's barrier before chunk c: chunk c has landed (this thread's copies; kProxyFence:
  // made visible to the wgmma's async proxy; then everyone's), and every warp is done with chunk
  // c - 1, whose slot the copy of chunk c + kAAhead then reuses. The scales load_a converted are
  // ordered by the first of these barriers (the tables by load_a's own barrier).
  template <bool kProxyFence = false>
  static __device__ __forceinline__ void begin_chunk(const GroupedGemmOperands& op, const int32_t* source,
                                                     uint32_t a_base, int c, int chunks, int k_steps, bool two_rows) {
    ptx::cp_async_wait<kAAhead - 1>();
    if constexpr (kProxyFence) ptx::fence_proxy_async_shared();
    __syncthreads();
    if (c + kAAhead < chunks) copy_chunks(op, source, a_base, c + kAAhead, k_steps, two_rows);
    ptx::cp_async_commit();
  }

  // The kernel's shared memory: its size for K = k, and the base the offsets above count from.
  static constexpr int shared_bytes(int k) { return decode_shared_bytes(k, kSplit); }
  static __device__ __forceinline__ uint8_t* smem_base(uint8_t* smem) { return smem; }

  // Source rows, the first kAAhead chunks of A, and the scales as fp32 (plain loads, converted
  // once).
  static __device__ __forceinline__ void load_a(const GroupedGemmOperands& op, const DecodeTile& t,
                                                         uint8_t* smem) {
    const int k = op.k;
    const bool two_rows = t.num_rows > 8;
    // The tile's source rows once, in the epilogue's (not yet used) shared memory.
    int32_t* source = reinterpret_cast<int32_t*>(smem + decode_epilogue_offset(k, kSplit));
    if (threadIdx.x < kDecodeBlockM)
      source[threadIdx.x] = static_cast<int>(threadIdx.x) < t.num_rows ? a_source_row(op, t.row_begin + threadIdx.x) : -1;
    __syncthreads();
    const uint32_t a_base = ptx::smem_addr(smem);
    const int k_steps = k / kGemmBlockK;
#pragma unroll
    for (int c = 0; c < kAAhead; ++c) {
      copy_chunks(op, source, a_base, c, k_steps, two_rows);
      ptx::cp_async_commit();
    }
    // Scales: thread kb converts k32 block kb of every row (8 independent loads in flight per
    // group of 8 rows) and stores them as 16-byte vectors.
    float* saf = reinterpret_cast<float*>(smem + decode_saf_offset(kSplit));
    for (int kb = threadIdx.x; kb < k / 32; kb += kDecodeThreads) {
#pragma unroll
      for (int r0 = 0; r0 < kDecodeBlockM; r0 += 8) {
        if (r0 > 0 && !two_rows) break;
        float v[8];
#pragma unroll
        for (int r = 0; r < 8; ++r) {
          const int src = source[r0 + r];
          v[r] = src >= 0 ? e8m0_to_float_device(op.a_scale[static_cast<int64_t>(src) * op.a_scale_row_bytes + kb]) : 0.0f;
        }
        float4* dst = reinterpret_cast<float4*>(saf + kb * kDecodeBlockM + r0);
        dst[0] = make_float4(v[0], v[1], v[2], v[3]);
        dst[1] = make_float4(v[4], v[5], v[6], v[7]);
      }
    }
  }

  static __device__ __forceinline__ void run(const GroupedGemmOperands& op, const DecodeTile& t, uint8_t* smem,
                                             DecodeTables& tables, DecodeAccumulators& acc) {
    const int lane = threadIdx.x % 32, tq = lane % 4;
    const int k = op.k, k_steps = k / kGemmBlockK;
    const bool two_halves = t.num_rows > 8;  // block-uniform
    const int chunks = part_chunks(k_steps), first_step = part() * chunks * kAChunkSteps;
    const int steps = kSplit == 1 ? k_steps : chunks * kAChunkSteps;  // this warp's k steps
    zero_accumulators(acc);

    // This warp's weights and the shift / scale words of its rows, kPrefetch k steps ahead.
    DecodeWeightStream<uint32_t, kPrefetch, kGroups> ws(op, t, k_steps, first_step, steps);

    if constexpr (kFolded) init_decode_tables(tables);
    load_a(op, t, smem);
    const int32_t* source = reinterpret_cast<const int32_t*>(smem + decode_epilogue_offset(k, kSplit));

    // Per-lane shared addresses in chunk slot 0 of the warp's ring, k step 0: ldmatrix rows of
    // n8 half 0 for k32 pair p (half 1: rows + 8, the same swizzle, 8 * kAChunkRowBytes further)
    // and the fp32 scales of tokens 2t, 2t + 1 (from the warp's first k step).
    const uint32_t a_base = ptx::smem_addr(smem);
    const uint32_t ring = a_base + part() * kARing * kAChunkBytes;
    uint32_t a_lane[2];
#pragma unroll
    for (int p = 0; p < 2; ++p)
      a_lane[p] = ring + (lane & 7) * kAChunkRowBytes + ((((4 * p + (lane >> 3)) ^ lane) & 7) << 4);
    const float* saf = reinterpret_cast<const float*>(smem + decode_saf_offset(kSplit)) + 2 * tq +
                       first_step * 4 * kDecodeBlockM;
    for (int c = 0; c < chunks; ++c) {
      begin_chunk(op, source, a_base, c, chunks, k_steps, two_halves);
      const int slot_off = (c % kARing) * kAChunkBytes;
#pragma unroll
      for (int s = 0; s < kAChunkSteps; ++s) {
        const int ks = c * kAChunkSteps + s;  // of the warp's steps
        if (ks >= steps) break;
        step(a_lane, slot_off + s * kGemmBlockK, saf + ks * 4 * kDecodeBlockM, tables, two_halves,
             ws.w[s % kPrefetch][0], ws.w[s % kPrefetch][1], ws.s[s % kPrefetch][0], ws.s[s % kPrefetch][1], acc);
        if (ks + kPrefetch < steps) ws.fetch(s % kPrefetch);
        if (s % kPrefetch == kPrefetch - 1) ws.advance();
      }
    }
    if constexpr (kSplit == 2) {  // the halves' hand-over in the (now unused) A rings
      ptx::cp_async_wait<0>();      // no copy into the rings is left in flight
      add_second_k_half<kGroups>(reinterpret_cast<float*>(smem), acc);
    }
  }

  // One 128-wide k step: 4 k32 blocks x (1 or 2) n8 halves. a_off: the step's byte offset in
  // every A row; saf: the step's first k32 block's scales for this lane's tokens.
  static __device__ __forceinline__ void step(const uint32_t (&a_lane)[2], int a_off, const float* saf,
                                              const DecodeTables& tables, bool two_halves, const uint4& w0,
                                              const uint4& w1, uint32_t sw0, uint32_t sw1,
                                              DecodeAccumulators& acc) {
    uint32_t b[2][2][4];  // [half][k32 pair] ldmatrix x4: b0/b1 of k blocks 2p and 2p + 1
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      if (h == 1 && !two_halves) break;
#pragma unroll
      for (int p = 0; p < 2; ++p) ptx::ldmatrix_x4(b[h][p], a_lane[p] + 8 * h * kAChunkRowBytes + a_off);
    }
#pragma unroll
    for (int kb = 0; kb < 4; ++kb) {
      uint32_t a[4];
      float s_w0, s_w1;
      decode_weight_fragment<kFolded>(kb, w0, w1, sw0, sw1, tables, a, s_w0, s_w1);
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        if (h == 1 && !two_halves) break;
        float part[4];
        ptx::mma_m16n8k32_e4m3_via_f16(part, a, b[h][kb / 2][2 * (kb % 2)], b[h][kb / 2][2 * (kb % 2) + 1]);
        promote_k32<kFolded>(acc[h], part, *reinterpret_cast<const float2*>(saf + kb * kDecodeBlockM + 8 * h),
                             s_w0, s_w1);
      }
    }
  }
};

}  // namespace moe_ep::cuda
