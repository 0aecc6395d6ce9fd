// Small-batch (decode) mxfp4 x Q8 grouped GEMM on FP8 wgmma: the decode kernels' block, weight
// stream, tiles, scales and epilogues (sm90_mxfp4_decode_mainloop.cuh), with each k32 block of a
// warpgroup's 64 weight rows on one m64 n8 k32 (tiles of <= 8 rows) or m64 n16 k32 e4m3 wgmma
// instead of two f16 HMMAs per warp on unpacked operands:
//   acc[n, r] += wgmma_k32(w[n, kb], a[r, kb]) * 2^sa[r, kb]   (unfolded: * 2^sw[n, kb] too)
// The weights are the register A operand, decoded to e4m3 straight from the streamed words: a
// warp's two micro-tiles are the A fragment rows 16 (w % 4) .. + 15 of its warpgroup, the rows
// the decode kernel gives that warp, so the accumulators are DecodeAccumulators in the same
// places (ptx/wgmma.cuh's fragment of m64n16 is the m16n8 C layout per n8 chunk). The tile's
// rows of A are the wgmma's B operand from the shared-memory ring in the wgmma layout.
//
// Instruction budget of a k32 block: the table lookup and the e2m1 -> e4m3 decode of two words,
// one wgmma with its fence, commit and wait, and the promotion; no e4m3 -> f16 conversion of
// either operand. The FP8 tensor cores' k32 sum is not fp32-exact (as rs-fp8's), so the form is
// not exact: exact_accumulation keeps the mma.sync decode.
//
// Per k step a warpgroup decodes block j + 1 (into the other fragment set) while block j's wgmma
// runs, then retires j (wait_group 0), promotes it and issues j + 1; block 0 of the next k step
// is decoded during block 3 (it needs the weight words only), and issued after the chunk barrier
// that orders its A rows.
//
// Shared memory (shared_bytes(K)): the decode layout (decode_shared_bytes) from a 1024-byte
// aligned base, whose A chunks hold per k step 16 rows x 128 bytes as two 8-row atoms of the
// 128-byte swizzle (DecodeWgmmaALayout).
#pragma once

#include <cstdint>

#include "cuda/kernels/sm90_mxfp4_decode_mainloop.cuh"
#include "cuda/ptx/wgmma.cuh"

namespace moe_ep::cuda {

// A chunk's k step s: tile rows r at s * kDecodeWgmmaStepBytes + r * 128 (atoms of 8 rows 1024
// bytes apart), 16-byte column c of the step at (c ^ r) % 8 (ptx/wgmma.cuh's K-major layout).
inline constexpr int kDecodeWgmmaStepBytes = kDecodeBlockM * kGemmBlockK;  // 2 KB
static_assert(kAChunkSteps * kDecodeWgmmaStepBytes == kAChunkBytes, "a chunk holds the same bytes in either layout");

struct DecodeWgmmaALayout {
  static __device__ __forceinline__ uint32_t offset(int r, int c) {
    return (c >> 3) * kDecodeWgmmaStepBytes + r * 128 + (((c ^ r) & 7) << 4);
  }
};

template <bool kFolded, int kSplit = 1>
struct Mxfp4DecodeFp8Mainloop {
  using Rows = Mxfp4DecodeMainloop<kFolded, kSplit, DecodeWgmmaALayout>;  // load_a and the K parts
  static constexpr int kParts = kSplit;
  // The decode's ring of 2 k steps on 3 blocks per SM: a ring of 4 on 2 blocks (<= 128 registers)
  // streams slower, the warps then too few to cover the decode and the wgmma round trips.
  static constexpr int kMinBlocks = Rows::kMinBlocks;
  static constexpr int kPrefetch = Rows::kPrefetch;
  static_assert(kAChunkSteps % kPrefetch == 0, "a chunk holds whole rounds of the weight ring");
  // Block 0 of step ks + 1 is decoded from its ring slot before step ks's slot is refilled.
  static_assert(kPrefetch >= 2, "the next step's words must be in another slot");
  static constexpr int kGroups = Rows::kGroups;
  static constexpr int kBlockRows = Rows::kBlockRows;
  static_assert(kGroups % 4 == 0, "whole warpgroups per K part");
  using Stream = DecodeWeightStream<uint32_t, kPrefetch, kGroups>;

  static __device__ __forceinline__ int part() { return Rows::part(); }
  // The decode layout plus the slack that aligns its base to the swizzle's 1024 bytes.
  static constexpr int shared_bytes(int k) { return decode_shared_bytes(k, kSplit) + 1024; }
  static __device__ __forceinline__ uint8_t* smem_base(uint8_t* smem) {
    return smem + ((1024 - (ptx::smem_addr(smem) & 1023)) & 1023);
  }

  static __device__ __forceinline__ void run(const GroupedGemmOperands& op, const DecodeTile& t, uint8_t* smem,
                                             DecodeTables& tables, DecodeAccumulators& acc) {
    const int k_steps = op.k / kGemmBlockK;
    const int chunks = Rows::part_chunks(k_steps), first_step = part() * chunks * kAChunkSteps;
    const int steps = kSplit == 1 ? k_steps : chunks * kAChunkSteps;  // this warp's k steps
    zero_accumulators(acc);
    Stream ws(op, t, k_steps, first_step, steps);
    if constexpr (kFolded) init_decode_tables(tables);
    Rows::load_a(op, t, smem);
    // The fp32 scales of tokens 2t, 2t + 1 from the warp's first k step.
    const float* saf = reinterpret_cast<const float*>(smem + decode_saf_offset(kSplit)) + 2 * (threadIdx.x % 4) +
                       first_step * 4 * kDecodeBlockM;
    if (t.num_rows > 8)  // block-uniform
      loop<8>(op, smem, saf, chunks, steps, k_steps, tables, ws, acc);
    else
      loop<4>(op, smem, saf, chunks, steps, k_steps, tables, ws, acc);
    if constexpr (kSplit == 2) {  // the halves' hand-over in the (now unused) A rings
      ptx::cp_async_wait<0>();      // no copy into the rings is left in flight
      add_second_k_half<kGroups>(reinterpret_cast<float*>(smem), acc);
    }
  }

  // The main loop on m64 n(2 kN) k32 wgmmas: kN = 4 (one n8 half) or 8 (both).
  template <int kN>
  static __device__ __forceinline__ void loop(const GroupedGemmOperands& op, uint8_t* smem, const float* saf,
                                              int chunks, int steps, int k_steps, const DecodeTables& tables,
                                              Stream& ws, DecodeAccumulators& acc) {
    constexpr bool kTwoHalves = kN == 8;
    const int32_t* source = reinterpret_cast<const int32_t*>(smem + decode_epilogue_offset(op.k, kSplit));
    const uint32_t a_base = ptx::smem_addr(smem);
    // The warp's K part through a shuffle, so the compiler sees the descriptors warp-uniform.
    const int ring_part = __shfl_sync(0xFFFFFFFFu, part(), 0);
    const uint64_t desc0 = ptx::wgmma_desc_k_major_sw128(a_base + ring_part * kARing * kAChunkBytes);
    uint32_t frag[2][4];  // the A fragments of two k32 blocks (j % 2)
    float sw[2][2];       // unfolded: their rows' E8M0 factors
    float part_sum[kN];   // the k32 block in flight
    decode_weight_fragment<kFolded>(0, ws.w[0][0], ws.w[0][1], ws.s[0][0], ws.s[0][1], tables, frag[0], sw[0][0],
                                    sw[0][1]);
    auto issue = [&](const uint32_t(&a)[4], uint64_t desc) {
      ptx::wgmma_fence();
      ptx::wgmma_k32_e4m3_rs_zero_d(part_sum, a, desc);
      ptx::wgmma_commit_group();
    };
    // The mma.sync decode's promotion, n8 half h from part_sum[4h].
    auto promote = [&](const float* sa_kb, const float(&s)[2]) {
#pragma unroll
      for (int h = 0; h < kN / 4; ++h)
        promote_k32<kFolded>(acc[h], part_sum + 4 * h, *reinterpret_cast<const float2*>(sa_kb + 8 * h), s[0], s[1]);
    };
    for (int c = 0; c < chunks; ++c) {
      // Every warpgroup has retired its wgmmas of chunk c - 1 (each k step ends in wait_group 0).
      Rows::template begin_chunk<true>(op, source, a_base, c, chunks, k_steps, kTwoHalves);
      const uint32_t slot_off = (c % kARing) * kAChunkBytes;
#pragma unroll
      for (int s = 0; s < kAChunkSteps; ++s) {
        const int ks = c * kAChunkSteps + s;  // of the warp's steps
        if (ks >= steps) break;
        const uint64_t desc = ptx::wgmma_desc_advance(desc0, (slot_off + s * kDecodeWgmmaStepBytes) >> 4);
        const float* sa_step = saf + ks * 4 * kDecodeBlockM;
        const int kSlot = s % kPrefetch, kNextSlot = (s + 1) % kPrefetch;  // constants once unrolled
        issue(frag[0], desc);
#pragma unroll
        for (int kb = 0; kb < 4; ++kb) {
          const int cur = kb % 2, next = 1 - cur;
          if (kb < 3)
            decode_weight_fragment<kFolded>(kb + 1, ws.w[kSlot][0], ws.w[kSlot][1], ws.s[kSlot][0], ws.s[kSlot][1],
                                            tables, frag[next], sw[next][0], sw[next][1]);
          else if (ks + 1 < steps)  // block 0 of the next step, into set 0 (block 2's, retired)
            decode_weight_fragment<kFolded>(0, ws.w[kNextSlot][0], ws.w[kNextSlot][1], ws.s[kNextSlot][0],
                                            ws.s[kNextSlot][1], tables, frag[0], sw[0][0], sw[0][1]);
          ptx::wgmma_wait_group<0>();
          ptx::fence_operands(part_sum);
          promote(sa_step + kb * kDecodeBlockM, sw[cur]);
          if (kb < 3) issue(frag[next], ptx::wgmma_desc_advance(desc, 2 * (kb + 1)));  // 32 bytes a k32 block
        }
        if (ks + kPrefetch < steps) ws.fetch(kSlot);
        if (kSlot == kPrefetch - 1) ws.advance();
      }
    }
  }
};

}  // namespace moe_ep::cuda
