// FP4 x 16-bit grouped GEMM on 16-bit wgmma with the weights as the register operand, four
// consumer warpgroups (sm_90a): the products and the fp32 sum of sm90_rs16_mainloop.cuh (the same
// Weights policies, the same order along k, no promotion), on the stage ring of the four-consumer
// FP8 kernel (sm90_mxfp4_rs_fp8_mainloop.cuh): the producer copies the tile's 16-bit token rows
// and the n tile's weight micro-tiles and scale words into each stage, and each consumer decodes
// its rows' k32 blocks from shared memory right before the k16 wgmmas that read them.
//
// Unlike the FP8 kernel's, a consumer never waits on a wgmma's result inside the tile: every
// k16 wgmma adds into the one accumulator set, so the decode of block j + 1 overlaps the wgmmas of
// block j. The decode costs more issue slots per product than the FP8 kernel's, which the
// 128-token tiles of the pairs form halve per product.
//
// Block of 5 warpgroups (640 threads), one block per SM, persistent over the (m tile, n tile) list
// of the routing kernel (m tiles of kBlockM = 64 or 128 tokens, the latter as pairs of the list's
// 64-row tiles: for_each_block_tile; n tiles of kBlockN = 256 weight rows):
//   WG 0      producer: per k step, cp.async of the tile's token rows (a_row_index gathers;
//             zero-filled past the tile's rows), 256 bytes per row, 8 threads per 128-byte half
//             (rows tid / 8 + 16 j, chunk tid % 8); the n tile's 32 weight micro-tiles (8
//             16-byte chunks per thread) and kBlockN scale words. kLookahead steps later it fences
//             and arrives on the stage's full barrier (run_ring_producer).
//   WG 1 .. 4 consumers: weight rows 64 c .. 64 c + 63 of the n tile each. Per k32 block j of a
//             k step: its two m64 n(kBlockM) k16 wgmmas from fragment set j % 2; wait_group 1
//             retires block j - 1, whose set then takes the decode of block j + 1. A stage is
//             released when its last block has retired (after block 0 of the next step).
//
// Shared memory (base aligned to 1024 bytes):
//   stage s < kStages, kStageBytes (a multiple of 1024) apart:
//     A   2 column blocks (k 0..63, 64..127 of the step in the rs order), each kBlockM rows x
//         128 B, K-major with the 128-byte swizzle of ptx/wgmma.cuh
//     W   kBlockN / 8 micro-tiles x 512 B: weight rows 8u .. 8u + 7 of the n tile, this k step
//     D   kBlockN scale words (Weights::ScaleWord: the k step's block scales of one weight row)
//   amax   [kConsumers][kBlockM][4 warps] fp32 (the epilogues' per-token area)
//   full[kStages], empty[kStages]  mbarriers (full: 128 producer arrivals; empty: one per
//                                  consumer warp)
#pragma once

#include <cstdint>
#include <type_traits>

#include "cuda/kernels/sm90_grouped_gemm.h"
#include "cuda/kernels/sm90_persistent_tiles.cuh"
#include "cuda/kernels/sm90_rs16_mainloop.cuh"
#include "cuda/kernels/sm90_rs_fragment.cuh"
#include "cuda/kernels/sm90_rs_ring.cuh"
#include "cuda/ptx/mbarrier.cuh"
#include "cuda/ptx/wgmma.cuh"

namespace moe_ep::cuda {

template <class Cfg, class Epilogue, class Params>
__device__ __forceinline__ void run_rs16_wide_grouped_gemm(const Params& p, uint8_t* smem_raw);

// A consumer has two fragment sets of one k32 block each; it issues a block's wgmmas from one
// set, waits until only that group is in flight and decodes the next block into the other set.
// (ptxas follows wgmma input registers only with one group in flight: with three sets and
// wait_group 2 it serializes every wgmma, C7513.)
// kBlockM_: token rows of a tile (64, or 128: m64n128k16 wgmmas, 64 accumulators a consumer
// thread, 4 stages of 49 KB; twice the tensor work per decoded weight and per copied weight byte).
// kListBlockM_: the rows of the routing's m tiles it walks (kBlockM_, or 64 under 128-token
// tiles: for_each_block_tile merges pairs, so GEMM 2 can keep the 64-row list).
// kTileWalk_: which of the list's tiles it takes (sm90_persistent_tiles.cuh).
template <class Weights_, int kBlockM_ = 64, int kListBlockM_ = kBlockM_, TileWalk kTileWalk_ = TileWalk::kEvery>
struct Rs16WideTileConfig {
  using Weights = Weights_;
  static constexpr TileWalk kTileWalk = kTileWalk_;
  using ScaleWord = typename Weights::ScaleWord;
  // The kernel body (sm90_rs_kernel.cuh) and its launch check.
  template <class Epilogue, class Params>
  static __device__ __forceinline__ void run(const Params& p, uint8_t* smem) {
    run_rs16_wide_grouped_gemm<Rs16WideTileConfig, Epilogue>(p, smem);
  }
  static bool operands_ok(const GroupedGemmOperands& op) { return Weights::operands_ok(op); }
  static constexpr int kBlockM = kBlockM_;  // token rows (the wgmma N side)
  static_assert(kBlockM == 64 || kBlockM == 128, "m64n64 or m64n128 wgmmas");
  static constexpr int kListBlockM = kListBlockM_;
  static constexpr int kConsumers = 4;
  static constexpr int kBlockN = 64 * kConsumers;  // weight rows (64 per consumer)
  static constexpr int kBlockK = 128;
  static constexpr int kAcc = kBlockM / 2;  // fp32 accumulators per consumer thread (m64 n kBlockM)
  static constexpr float kAccScale = Weights::kAccScale;
  static constexpr int kStages = kBlockM == 64 ? 6 : 4;
  static constexpr int kLookahead = kBlockM == 64 ? 3 : 2;
  static constexpr int kThreads = 128 * (1 + kConsumers);
  // 128-token tiles read a block's weight and scale words from the stage right before its decode
  // instead of holding the step's in registers.
  static constexpr bool kWordsPerBlock = kBlockM == 128;
  // 128-token tiles: the consumers' 64 accumulators need 112 registers (at 104 ptxas serializes
  // the wgmmas, C7512); the producer gives up all but 32 (its row pointers spill to local memory).
  static constexpr int kProducerRegs = kBlockM == 64 ? 56 : 32;
  static constexpr int kConsumerRegs = kBlockM == 64 ? 104 : 112;
  // setmaxnreg moves registers within the block's allocation: 640 threads x 96 at launch.
  static constexpr int kLaunchRegs = 65536 / kThreads / 8 * 8;
  static_assert(128 * kProducerRegs + 128 * kConsumers * kConsumerRegs <= kThreads * kLaunchRegs, "register file");
  // The producer signals full(i) after issuing step i + kLookahead, which needs step
  // i + kLookahead - kStages released; a consumer releases step i - 1 only after it waited for
  // step i, so the ring needs kStages >= kLookahead + 2.
  static_assert(kStages >= kLookahead + 2, "the stage ring would deadlock");
  static constexpr int kColBytes = kBlockM * 128;  // one 64-wide k column block
  static constexpr int kABytes = 2 * kColBytes;
  static_assert(kColBytes % 1024 == 0, "wgmma tiles are 1024-byte aligned");
  using TokenRows = RsTokenRows<kBlockM / 16, 2, kColBytes>;  // the producer's: 8 threads per 128-byte half
  using WeightCopy = RingWeightCopy<kBlockN, static_cast<int>(sizeof(ScaleWord))>;  // the producer's W, D
  static constexpr int kWBytes = WeightCopy::kWBytes;
  static constexpr int kDBytes = WeightCopy::kDBytes;
  static constexpr int kOffW = kABytes, kOffD = kOffW + kWBytes;
  static constexpr int kStageBytes = (kOffD + kDBytes + 1023) / 1024 * 1024;
  using Layout = RsRingLayout<kStages, kStageBytes, kConsumers, kBlockM>;
  static constexpr int kSharedBytes = Layout::kSharedBytes;
};

template <class Cfg>
struct Rs16WideSmem : RsRingSmem<Cfg> {
  __device__ __forceinline__ uint8_t* w(int s) const { return this->a(s) + Cfg::kOffW; }
  __device__ __forceinline__ const typename Cfg::ScaleWord* d(int s) const {
    return reinterpret_cast<const typename Cfg::ScaleWord*>(this->a(s) + Cfg::kOffD);
  }
};

// ---- producer warpgroup ----------------------------------------------------------------------
template <class Cfg>
struct Rs16WideProducer {
  typename Cfg::TokenRows rows;      // the tile's token rows
  typename Cfg::WeightCopy weights;  // the micro-tiles and scale words

  __device__ __forceinline__ void begin_tile(const GroupedGemmOperands& op, const TileCoord& t, int k_steps,
                                             int tid) {
    rows.begin_tile(op, t, tid);
    weights.begin_tile(op, t, k_steps, tid);
  }

  __device__ __forceinline__ void issue(const GroupedGemmOperands& op, const Rs16WideSmem<Cfg>& sm, int ks,
                                        int k_steps, int s, int tid) const {
    rows.issue(op, ptx::smem_addr(sm.a(s)), ks, tid);
    weights.issue(op, ptx::smem_addr(sm.w(s)), ptx::smem_addr(sm.a(s) + Cfg::kOffD), ks, k_steps, tid);
  }
  static __device__ __forceinline__ void landed(const Rs16WideSmem<Cfg>&, int, int) {}
};

// ---- the kernel body -------------------------------------------------------------------------
// Epilogue::apply<Cfg>(ep, op, tile, fragment, smem, acc): writes the valid columns of a consumer's
// 64 x kBlockM transposed sub-tile.
template <class Cfg, class Epilogue, class Params>
__device__ __forceinline__ void run_rs16_wide_grouped_gemm(const Params& p, uint8_t* smem_raw) {
  const Rs16WideSmem<Cfg> sm{{align_smem_1024(smem_raw)}};
  const int tid = threadIdx.x;
  const GroupedGemmOperands& op = p.op;
  const RsBlockWork work = rs_block_start<Cfg>(sm, op, p.schedule);
  if (tid < 128) return run_rs_producer<Cfg, Rs16WideProducer<Cfg>>(sm, op, p.schedule, work, tid);
  const RsConsumerThread ct = rs_consumer_thread<Cfg>();
  const int k_steps = work.k_steps, lane = ct.lane, micro = ct.micro, d_row = ct.d_row;
  constexpr int S = Cfg::kStages;
  const uint64_t desc0 = ptx::wgmma_desc_k_major_sw128(ptx::smem_addr(sm.a(0)));
  int item = 0;  // k steps consumed so far (over all tiles of this block)
  for_each_block_tile<Cfg>(p.schedule, work.n_tiles, [&](const TileCoord& tc, auto) {
    const RsFragment f{tc.n_tile * Cfg::kBlockN + d_row, ct.t, ct.warp, ct.wg};
    float acc[Cfg::kAcc];
#pragma unroll
    for (int i = 0; i < Cfg::kAcc; ++i) acc[i] = 0.0f;
    uint32_t frag[2][2][4];  // [set][k16 step of the block][register]
    uint4 w_g, w_g8;         // this k step's packed words of rows g and g + 8
    typename Cfg::ScaleWord d_g, d_g8;
    [[maybe_unused]] int step_stage = 0;  // kWordsPerBlock: the loaded step's stage
    // Waits for k step ks of this tile and takes its weight words (kWordsPerBlock: its stage).
    auto load_step = [&](int ks) {
      const int s = (item + ks) % S;
      ptx::mbarrier_wait_parity(sm.full(s), ((item + ks) / S) & 1);
      if constexpr (Cfg::kWordsPerBlock) {
        step_stage = s;
      } else {
        w_g = *reinterpret_cast<const uint4*>(sm.w(s) + micro * kWeightMicroTileBytes + lane * 16);
        w_g8 = *reinterpret_cast<const uint4*>(sm.w(s) + (micro + 1) * kWeightMicroTileBytes + lane * 16);
        d_g = sm.d(s)[d_row];
        d_g8 = sm.d(s)[d_row + 8];
      }
    };
    // K32 block kb of the loaded step into fragment set `out`.
    auto decode = [&](auto kb_constant, uint32_t(&out)[2][4]) {
      constexpr int kb = decltype(kb_constant)::value;
      if constexpr (Cfg::kWordsPerBlock) {
        const uint8_t* w = sm.w(step_stage) + micro * kWeightMicroTileBytes + lane * 16 + 4 * kb;
        Cfg::Weights::template decode_block<kb>(*reinterpret_cast<const uint32_t*>(w),
                                                *reinterpret_cast<const uint32_t*>(w + kWeightMicroTileBytes),
                                                sm.d(step_stage)[d_row], sm.d(step_stage)[d_row + 8], out);
        return;
      }
      Cfg::Weights::template decode_block<kb>(rs_word<kb>(w_g), rs_word<kb>(w_g8), d_g, d_g8, out);
    };
    auto release = [&](int ks) {  // every block that read step ks's stage has retired
      __syncwarp();
      if (lane == 0) ptx::mbarrier_arrive(sm.empty((item + ks) % S));
    };
    // K32 block kb of step ks: its 2 k16 wgmmas (k16 step L = 2 kb + i: column block L / 4,
    // slice L % 4) from set kb % 2, then retire the previous block (step ks - 1's last at kb = 0,
    // which releases its stage) and decode block kb + 1 into the other set (the next step's
    // block 0 after the last, when there is one: `more`).
    auto block = [&](auto kb_constant, int ks, bool more) {
      constexpr int kb = decltype(kb_constant)::value, set = kb % 2;
      const uint64_t desc = desc0 + ((item + ks) % S) * (Cfg::kStageBytes >> 4);
      ptx::wgmma_fence();
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        const int L = 2 * kb + i;
        const uint64_t desc_l = desc + (L / 4) * (Cfg::kColBytes >> 4) + 2 * (L % 4);
        if constexpr (Cfg::kBlockM == 64)
          ptx::wgmma_m64n64k16_rs<Cfg::Weights::kF16>(acc, frag[set][i], desc_l);
        else
          ptx::wgmma_m64n128k16_rs<Cfg::Weights::kF16>(acc, frag[set][i], desc_l);
      }
      ptx::wgmma_commit_group();
      ptx::wgmma_wait_group<1>();
#pragma unroll
      for (int i = 0; i < 2; ++i) ptx::fence_operands(frag[1 - set][i]);
      if constexpr (kb == 0) {
        if (ks > 0) release(ks - 1);
      }
      if constexpr (kb + 1 < 4) {
        decode(std::integral_constant<int, kb + 1>{}, frag[1 - set]);
      } else if (more) {
        load_step(ks + 1);
        decode(std::integral_constant<int, 0>{}, frag[1 - set]);
      }
    };
    load_step(0);
    decode(std::integral_constant<int, 0>{}, frag[0]);
    for (int ks = 0; ks < k_steps; ++ks) {
      const bool more = ks + 1 < k_steps;
      block(std::integral_constant<int, 0>{}, ks, more);
      block(std::integral_constant<int, 1>{}, ks, more);
      block(std::integral_constant<int, 2>{}, ks, more);
      block(std::integral_constant<int, 3>{}, ks, more);
    }
    ptx::wgmma_wait_group<0>();
    ptx::fence_operands(acc);
    release(k_steps - 1);
    item += k_steps;
    Epilogue::template apply<Cfg>(p.epilogue, op, tc, f, sm, acc);
  });
}

}  // namespace moe_ep::cuda
