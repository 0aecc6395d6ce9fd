// MXFP4 x Q8 grouped GEMM on FP8 wgmma with the weights as the register operand (sm_90a), for
// folded mxfp4 weights (w_scale = shifts, w_col_scale = the fold's column factors):
//   D^T[n, m] = sum_kb 2^(sa[m, kb] - 127) * sum_{k in kb} W'[n, k] * A[m, k]
// with the weight rows n on the wgmma M side and the tokens m on N. W' = e2m1 * 2^(d - 8) is
// exact in e4m3 (tile/fp4_codec.h); the consumers decode it from the packed words in registers
// right before the wgmma that reads it, so no warp converts weights into shared memory. The
// activations are the Q8 rows as they are (e4m3 in shared memory). Each k32 product starts from
// zero (scale-d = 0) and is added to the fp32 accumulator times the token's activation scale: the
// products and the promotion of the FP8 wgmma kernel (sm90_mxfp4_wgmma_mainloop.cuh), on the
// transposed tile. The epilogues multiply by the column factor (sm90_rs_epilogues.cuh).
//
// Block of 5 warpgroups (640 threads), one block per SM, persistent over the (m tile, n tile) list
// of the routing kernel (m tiles of kBlockM = 64 tokens, n tiles of kBlockN = 256 weight rows):
//   WG 0      producer: per k step, cp.async of the tile's token rows (a_row_index gathers;
//             zero-filled past the tile's rows), their E8M0 scale words, the n tile's 32 weight
//             micro-tiles and kBlockN shift words; kLookahead steps later each thread converts its
//             token's scale word to four fp32 factors, fences and arrives on the full barrier.
//   WG 1 .. 4 consumers: weight rows 64 c .. 64 c + 63 of the n tile each, one partial set each
//             (a quarter of the consumers' registers): one m64 n64 k32 wgmma in flight per
//             consumer; after wait_group 0 retires block j, the consumer promotes it and issues
//             block j + 1 (decoded meanwhile into the other fragment set) into the same set, while
//             the other three keep the tensor cores busy. (ptxas follows wgmma
//             registers only through wait_group 0: reading a set retired by wait_group 1 while
//             another wgmma is in flight serializes every wgmma (C7514). Closed groups of 2 or 4
//             wgmmas in flight, which avoid that, are slower.)
//
// Shared memory (base aligned to 1024 bytes):
//   stage s < kStages, kStageBytes (a multiple of 1024) apart:
//     A   kBlockM token rows x 128 B, K-major with the 128-byte swizzle of ptx/wgmma.cuh
//     W   kBlockN / 8 micro-tiles x 512 B: weight rows 8u .. 8u + 7 of the n tile, this k step
//     D   kBlockN shift words (the 4 k32 blocks of one weight row)
//     SA  kBlockM E8M0 words (the 4 k32 blocks of one token), as copied
//     SF  4 x kBlockM fp32: 2^(sa - 127) of k32 block kb at [kb][rs_fp8_scale_slot(token)]
//   amax   [kConsumers][kBlockM][4 warps] fp32 (GEMM 1 epilogue: Q8 amax per token)
//   table  16 x 8 B: e4m3 magnitude bytes of codes 0..7 for shift d (15 unused)
//   full[kStages], empty[kStages]  mbarriers (full: 128 producer arrivals; empty: one per
//                                  consumer warp)
#pragma once

#include <cstdint>
#include <type_traits>

#include "cuda/kernels/sm90_grouped_gemm.h"
#include "cuda/kernels/sm90_persistent_tiles.cuh"
#include "cuda/kernels/sm90_rs_fragment.cuh"
#include "cuda/kernels/sm90_rs_ring.cuh"
#include "cuda/ptx/cp_async.cuh"
#include "cuda/ptx/mbarrier.cuh"
#include "cuda/ptx/wgmma.cuh"
#include "cuda/tile/fp4_codec.h"
#include "cuda/tile/quant_device.cuh"

namespace moe_ep::cuda {

template <class Cfg, class Epilogue, class Params>
__device__ __forceinline__ void run_rs_fp8_grouped_gemm(const Params& p, uint8_t* smem_raw);

// How a kernel runs an expert's last tile of at most kNarrowRows token rows:
//   kFull        as any other (64 rows of tensor work, promotions and epilogue);
//   kNarrowLast  on m64 n(kNarrowRows) k32 wgmmas over its rows only, in a second pass after the
//                block's other tiles (for_each_block_tile): with both widths in one walk over the
//                tiles, the 64-row k steps spill registers.
// kNarrowLast is the rs-fp8-tails form (policy/sm90_forms.cpp).
enum class RsFp8Tails { kFull, kNarrowLast };

template <RsFp8Tails kTails_ = RsFp8Tails::kFull>
struct RsFp8TileConfig {
  // The kernel body (sm90_rs_kernel.cuh) and its launch check: folded weights only.
  template <class Epilogue, class Params>
  static __device__ __forceinline__ void run(const Params& p, uint8_t* smem) {
    run_rs_fp8_grouped_gemm<RsFp8TileConfig, Epilogue>(p, smem);
  }
  static bool operands_ok(const GroupedGemmOperands& op) { return op.w_col_scale != nullptr; }
  static constexpr int kBlockM = 64;  // token rows (the wgmma N side)
  static constexpr int kConsumers = 4;
  static constexpr int kBlockN = 64 * kConsumers;  // weight rows (64 per consumer)
  static constexpr int kBlockK = 128;
  static constexpr int kAcc = kBlockM / 2;  // fp32 accumulators per consumer thread (m64 n kBlockM)
  static constexpr float kAccScale = 1.0f;  // the accumulator is already in the fold's units
  static constexpr int kStages = 8;
  static constexpr int kLookahead = 3;  // k steps in flight (kStages - 2 measured no faster)
  static constexpr RsFp8Tails kTails = kTails_;
  static constexpr int kNarrowRows = 48;
  static constexpr int kLastPassRows = kTails_ == RsFp8Tails::kNarrowLast ? kNarrowRows : 0;
  static constexpr int kThreads = 128 * (1 + kConsumers);
  static constexpr int kProducerRegs = 56;
  static constexpr int kConsumerRegs = 104;
  // setmaxnreg moves registers within the block's allocation: kThreads x the launch's share of
  // the register file (whole multiples of 8): 640 x 96.
  static constexpr int kLaunchRegs = 65536 / kThreads / 8 * 8;
  static_assert(128 * kProducerRegs + 128 * kConsumers * kConsumerRegs <= kThreads * kLaunchRegs, "register file");
  // The producer signals full(i) after issuing step i + kLookahead, which needs step
  // i + kLookahead - kStages released; a consumer waits for step i before it releases step
  // i - 1, so the ring needs kStages >= kLookahead + 2.
  static_assert(kStages >= kLookahead + 2, "the stage ring would deadlock");
  static constexpr int kABytes = kBlockM * 128;
  using TokenRows = RsTokenRows<kBlockM / 16, 1, kABytes>;  // the producer's: 8 threads per token row
  using WeightCopy = RingWeightCopy<kBlockN, 4>;  // the producer's cp.async of W and D
  static constexpr int kWBytes = WeightCopy::kWBytes;
  static constexpr int kDBytes = WeightCopy::kDBytes;
  static constexpr int kSaBytes = kBlockM * 4;
  static constexpr int kSfBytes = 4 * kBlockM * 4;
  static constexpr int kOffW = kABytes, kOffD = kOffW + kWBytes, kOffSa = kOffD + kDBytes,
                       kOffSf = kOffSa + kSaBytes;
  static constexpr int kStageBytes = (kOffSf + kSfBytes + 1023) / 1024 * 1024;
  static_assert(kABytes % 1024 == 0 && kOffSf % 16 == 0, "wgmma tiles 1024-aligned, SF float4-aligned");
  using Layout = RsRingLayout<kStages, kStageBytes, kConsumers, kBlockM, 16 * 8>;  // + the decode table
  static constexpr int kSharedBytes = Layout::kSharedBytes;
};

// Where token column c of a tile keeps its scale factors in SF: the four columns a consumer thread
// (t = lane % 4) multiplies for n8 chunks 2p and 2p + 1 (8 i + 2 t + {0, 1}, i = 2p, 2p + 1) are
// one float4, so a promotion reads one 16-byte word per pair of chunks.
__host__ __device__ constexpr int rs_fp8_scale_slot(int c) {
  const int i = c / 8, t = (c % 8) / 2, e = c % 2;
  return (i / 2) * 16 + 4 * t + 2 * (i % 2) + e;
}

template <class Cfg>
struct RsFp8Smem : RsRingSmem<Cfg> {
  __device__ __forceinline__ uint8_t* w(int s) const { return this->a(s) + Cfg::kOffW; }
  __device__ __forceinline__ const uint32_t* d(int s) const {
    return reinterpret_cast<const uint32_t*>(this->a(s) + Cfg::kOffD);
  }
  __device__ __forceinline__ uint8_t* sa(int s) const { return this->a(s) + Cfg::kOffSa; }
  __device__ __forceinline__ float* sf(int s) const { return reinterpret_cast<float*>(this->a(s) + Cfg::kOffSf); }
  __device__ __forceinline__ uint2* table() const { return reinterpret_cast<uint2*>(this->own()); }
};

// ---- producer warpgroup ----------------------------------------------------------------------
// Its state is padded to 64 bytes, and its walk over the ring stays in the kernel body rather than
// in run_rs_producer: either change makes ptxas assign the tails form's accumulator registers
// otherwise (the same instructions, renamed), and the form keeps the machine code it was measured
// with.
template <class Cfg>
struct alignas(64) RsFp8Producer {
  typename Cfg::TokenRows rows;      // the tile's token rows
  const uint8_t* sa_src;             // token tid's scale words (tid < kBlockM), null past the tile
  typename Cfg::WeightCopy weights;  // the micro-tiles and shift words

  __device__ __forceinline__ void begin_tile(const GroupedGemmOperands& op, const TileCoord& t, int k_steps,
                                             int tid) {
    rows.begin_tile(op, t, tid);
    const int row = t.row_begin + tid;
    sa_src = tid < t.num_rows && tid < Cfg::kBlockM
                 ? op.a_scale + static_cast<int64_t>(op.a_row_index ? op.a_row_index[row] : row) * op.a_scale_row_bytes
                 : nullptr;
    weights.begin_tile(op, t, k_steps, tid);
  }

  __device__ __forceinline__ void issue(const GroupedGemmOperands& op, const RsFp8Smem<Cfg>& sm, int ks,
                                        int k_steps, int s, int tid) const {
    rows.issue(op, ptx::smem_addr(sm.a(s)), ks, tid);
    weights.issue(op, ptx::smem_addr(sm.w(s)), ptx::smem_addr(sm.d(s)), ks, k_steps, tid);
    if (tid < Cfg::kBlockM)
      ptx::cp_async_4(ptx::smem_addr(sm.sa(s)) + tid * 4, sa_src ? sa_src + ks * 4 : op.a_scale, sa_src ? 4 : 0);
  }

  // After this thread's copies of stage s landed: its token's four factors 2^(sa - 127).
  static __device__ __forceinline__ void landed(const RsFp8Smem<Cfg>& sm, int s, int tid) {
    if (tid >= Cfg::kBlockM) return;
    const uint32_t word = reinterpret_cast<const uint32_t*>(sm.sa(s))[tid];
    float* sf = sm.sf(s) + rs_fp8_scale_slot(tid);
#pragma unroll
    for (int kb = 0; kb < 4; ++kb) sf[kb * Cfg::kBlockM] = e8m0_to_float_device((word >> (8 * kb)) & 0xFF);
  }
};

// ---- the kernel body -------------------------------------------------------------------------
// Epilogue::apply<Cfg>(ep, op, tile, fragment, smem, acc): writes the valid columns of a consumer's
// 64 x kBlockM transposed sub-tile.
template <class Cfg, class Epilogue, class Params>
__device__ __forceinline__ void run_rs_fp8_grouped_gemm(const Params& p, uint8_t* smem_raw) {
  const RsFp8Smem<Cfg> sm{{align_smem_1024(smem_raw)}};
  const int tid = threadIdx.x;
  if (tid < 16)
    sm.table()[tid] = tid < kFoldedShifts ? make_uint2(folded_table_word(tid, 0), folded_table_word(tid, 4))
                                          : make_uint2(0u, 0u);
  const GroupedGemmOperands& op = p.op;
  const RsBlockWork work = rs_block_start<Cfg>(sm, op, p.schedule);
  if (tid < 128) {  // run_rs_producer, inline (see RsFp8Producer)
    ptx::setmaxnreg_dec<Cfg::kProducerRegs>();
    RsFp8Producer<Cfg> prod;
    const int k_steps = work.k_steps;
    run_ring_producer<Cfg>(
        sm, p.schedule, work.n_tiles, k_steps, [&](const TileCoord& t) { prod.begin_tile(op, t, k_steps, tid); },
        [&](int ks, int s) { prod.issue(op, sm, ks, k_steps, s, tid); },
        [&](int s) { RsFp8Producer<Cfg>::landed(sm, s, tid); });
    return;
  }
  const RsConsumerThread ct = rs_consumer_thread<Cfg>();
  const int k_steps = work.k_steps, lane = ct.lane, t = ct.t, micro = ct.micro, d_row = ct.d_row;
  constexpr int S = Cfg::kStages;
  const uint64_t desc0 = ptx::wgmma_desc_k_major_sw128(ptx::smem_addr(sm.a(0)));
  auto desc = [&](int s, int kb) { return desc0 + s * (Cfg::kStageBytes >> 4) + 2 * kb; };  // 16-byte units
  // One tile's mainloop and epilogue on kA accumulators per thread: m64 n(2 kA) k32 wgmmas over
  // the tile's first 2 kA token rows.
  int item = 0;
  auto run_tile = [&](const TileCoord& tc, auto acc_constant) {
    constexpr int kA = decltype(acc_constant)::value;
    const RsFragment f{tc.n_tile * Cfg::kBlockN + d_row, t, ct.warp, ct.wg};
    float acc[kA];
#pragma unroll
    for (int i = 0; i < kA; ++i) acc[i] = 0.0f;
    float part[kA];  // the k32 block in flight
    uint32_t frag[2][4];
    uint4 w_g, w_g8;  // this k step's packed words of rows g and g + 8
    uint32_t d_g, d_g8;
    // Waits for k step ks of this tile and takes its weight words.
    auto load_step = [&](int ks) {
      const int s = (item + ks) % S;
      ptx::mbarrier_wait_parity(sm.full(s), ((item + ks) / S) & 1);
      w_g = *reinterpret_cast<const uint4*>(sm.w(s) + micro * kWeightMicroTileBytes + lane * 16);
      w_g8 = *reinterpret_cast<const uint4*>(sm.w(s) + (micro + 1) * kWeightMicroTileBytes + lane * 16);
      d_g = sm.d(s)[d_row];
      d_g8 = sm.d(s)[d_row + 8];
    };
    // The A fragment of k32 block kb of the loaded step (tile/fp4_codec.h word kb of each row).
    auto decode = [&](int kb, uint32_t(&out)[4]) {
      const uint32_t word_g = kb == 0 ? w_g.x : kb == 1 ? w_g.y : kb == 2 ? w_g.z : w_g.w;
      const uint32_t word_g8 = kb == 0 ? w_g8.x : kb == 1 ? w_g8.y : kb == 2 ? w_g8.z : w_g8.w;
      const uint2 tab_g = sm.table()[(d_g >> (8 * kb)) & 0xF];
      const uint2 tab_g8 = sm.table()[(d_g8 >> (8 * kb)) & 0xF];
      decode_fp4_word_with(word_g, tab_g.x, tab_g.y, out[0], out[2]);
      decode_fp4_word_with(word_g8, tab_g8.x, tab_g8.y, out[1], out[3]);
    };
    auto issue = [&](float(&d)[kA], const uint32_t(&a)[4], int s, int kb) {
      ptx::wgmma_fence();
      ptx::wgmma_k32_e4m3_rs_zero_d(d, a, desc(s, kb));
      ptx::wgmma_commit_group();
    };
    // acc += d * 2^sa of its tokens (k32 block kb of stage s).
    auto promote = [&](const float(&d)[kA], int s, int kb) {
      const float* sf = sm.sf(s) + kb * Cfg::kBlockM + 4 * t;
#pragma unroll
      for (int ip = 0; ip < kA / 8; ++ip) {  // n8 chunks 2 ip, 2 ip + 1
        const float4 sc = *reinterpret_cast<const float4*>(sf + ip * 16);
        const float s8[8] = {sc.x, sc.y, sc.x, sc.y, sc.z, sc.w, sc.z, sc.w};
#pragma unroll
        for (int c = 0; c < 8; ++c) acc[8 * ip + c] = fmaf(d[8 * ip + c], s8[c], acc[8 * ip + c]);
      }
    };
    // K32 block kb of step ks (slot s) is in flight (decoded from fragment set kb % 2): decode the
    // next block into the other fragment set, retire this one, promote it and issue the next into
    // the same partial set. The tile's last block (kFinal) only retires and promotes.
    // load_next (block 3 only): takes the next step's weight words.
    auto block = [&](auto final_constant, auto kb_constant, int ks, int s, auto&& load_next) {
      constexpr bool kFinal = decltype(final_constant)::value;
      constexpr int kb = decltype(kb_constant)::value, kb_next = (kb + 1) % 4, next = 1 - kb % 2;
      if constexpr (!kFinal) {
        if constexpr (kb == 3) load_next();
        decode(kb_next, frag[next]);
      }
      ptx::wgmma_wait_group<0>();
      ptx::fence_operands(part);
      promote(part, s, kb);
      if constexpr (!kFinal) issue(part, frag[next], kb == 3 ? (item + ks + 1) % S : s, kb_next);
    };
    using Next = std::false_type;
    using Final = std::true_type;
    auto release = [&](int s) {  // the step's last block has retired and been promoted
      __syncwarp();
      if (lane == 0) ptx::mbarrier_arrive(sm.empty(s));
    };

    using B0 = std::integral_constant<int, 0>;
    using B1 = std::integral_constant<int, 1>;
    using B2 = std::integral_constant<int, 2>;
    using B3 = std::integral_constant<int, 3>;
    load_step(0);
    decode(0, frag[0]);
    issue(part, frag[0], item % S, 0);
    for (int ks = 0; ks + 1 < k_steps; ++ks) {
      const int s = (item + ks) % S;
      block(Next{}, B0{}, ks, s, nullptr);
      block(Next{}, B1{}, ks, s, nullptr);
      block(Next{}, B2{}, ks, s, nullptr);
      block(Next{}, B3{}, ks, s, [&] { load_step(ks + 1); });
      release(s);
    }
    const int ks = k_steps - 1, s = (item + ks) % S;
    block(Next{}, B0{}, ks, s, nullptr);
    block(Next{}, B1{}, ks, s, nullptr);
    block(Next{}, B2{}, ks, s, nullptr);
    block(Final{}, B3{}, ks, s, nullptr);
    release(s);
    Epilogue::template apply<Cfg>(p.epilogue, op, tc, f, sm, acc);
  };
  if constexpr (Cfg::kTails == RsFp8Tails::kNarrowLast) {
    for_each_block_tile<Cfg>(p.schedule, work.n_tiles, [&](const TileCoord& tc, auto last_pass) {
      if constexpr (decltype(last_pass)::value)
        run_tile(tc, std::integral_constant<int, Cfg::kNarrowRows / 2>{});
      else
        run_tile(tc, std::integral_constant<int, Cfg::kAcc>{});
      item += k_steps;
    });
  } else {
    for (int tile = blockIdx.x; tile < work.num_tiles; tile += gridDim.x) {
      const TileCoord tc = tile_coord<Cfg::kBlockM>(p.schedule, tile, work.n_tiles);
      run_tile(tc, std::integral_constant<int, Cfg::kAcc>{});
      item += k_steps;
    }
  }
}

}  // namespace moe_ep::cuda
