// FP4 x 16-bit grouped GEMM on 16-bit wgmma with the weights as the register operand (sm_90a):
//   D^T[n, m] = sum_k W[n, k] * A[m, k]   (weight rows n on the wgmma M side, tokens m on N)
// for two weight formats (the Weights policy below):
//   Mxfp4Bf16RsWeights  folded mxfp4 weights (w_scale = shifts, w_col_scale = the fold's column
//                       factors) decoded into bf16 A fragments (tile/fp4_bf16_codec.h: e2m1 *
//                       2^(d - 14), exact); A = bf16 rows in the rs order along k
//                       (launch_sm90_q8_to_rs_bf16 writes them from Q8), bf16 wgmma.
//   Nvfp4F16RsWeights   nvfp4 weights (w_scale = e4m3 block scales of 16) decoded into f16 A
//                       fragments (tile/nvfp4_f16_codec.h: e2m1 * e4m3, exact); A = f16 rows in
//                       that file's order (launch_sm90_nvfp4_to_rs_f16), f16 wgmma.
// The consumers decode the FP4 weights straight from global memory; every product is exact and
// the fp32 sum runs over all of K without promotion. The epilogues apply the weights' remaining
// factors (column factor times 2^kRsFoldBias, or the nvfp4 global scales).
//
// Block of 3 warpgroups (384 threads), one block per SM, persistent over the (m tile, n tile)
// list of the routing kernel (m tiles of kBlockM = 128 token rows, n tiles of 128 weight rows):
//   WG 0      producer: cp.async of the tile's token rows (a_row_index gathers; zero-filled past
//             the tile's rows), 256 bytes per row and k step, 8 threads per 128-byte row half
//             (thread tid: rows tid / 8 + 16 j, chunk tid % 8); kLookahead steps later it fences
//             and arrives on the stage's full barrier.
//   WG 1, 2   consumers: weight rows 64 c .. 64 c + 63 of the n tile each; per k step 8
//             m64n128k16 wgmmas from one of two fragment sets (32 registers each), while the
//             next k step is decoded into the other (wgmma_wait_group<1> retires the step that
//             read it; the weights of the step after are loaded a step ahead).
//
// Shared memory (base aligned to 1024 bytes here):
//   stage s < kStages:  2 column blocks (k 0..63, 64..127 of the step), each kBlockM rows x 128 B,
//                       K-major with the 128-byte swizzle of ptx/wgmma.cuh
//   amax                [2 consumers][kBlockM][4 warps] fp32 (mxfp4 GEMM 1 epilogue: Q8 amax per
//                       token; nvfp4 epilogues: [consumer][token] factor, rs_nvfp4_alphas)
//   full[kStages], empty[kStages]  mbarriers (full: 128 producer arrivals; empty: one per
//                                  consumer warp)
#pragma once

#include <cstdint>
#include <type_traits>

#include "cuda/kernels/sm90_grouped_gemm.h"
#include "cuda/kernels/sm90_persistent_tiles.cuh"
#include "cuda/kernels/sm90_rs_fragment.cuh"
#include "cuda/kernels/sm90_rs_ring.cuh"
#include "cuda/ptx/ld_global.cuh"
#include "cuda/ptx/mbarrier.cuh"
#include "cuda/ptx/wgmma.cuh"
#include "cuda/tile/fp4_bf16_codec.h"
#include "cuda/tile/fp4_codec.h"
#include "cuda/tile/nvfp4_f16_codec.h"

namespace moe_ep::cuda {

// The weight words and scale words of one k step for a consumer thread: its rows g and g + 8.
template <class ScaleWord>
struct RsWeightStep {
  uint4 w_g, w_g8;
  ScaleWord d_g, d_g8;
};

// Word j of a packed 16-byte weight chunk.
template <int j>
__device__ __forceinline__ uint32_t rs_word(const uint4& w) {
  static_assert(j >= 0 && j < 4);
  return j == 0 ? w.x : j == 1 ? w.y : j == 2 ? w.z : w.w;
}

// A whole k step's 8 k16 A fragments: Weights::decode_block<j> of each k32 block j into
// fragments 2j, 2j + 1.
template <class Weights>
__device__ __forceinline__ void decode_blocks(const RsWeightStep<typename Weights::ScaleWord>& w,
                                              uint32_t (&out)[8][4]) {
  auto block = [&](auto j_constant) {
    constexpr int j = decltype(j_constant)::value;
    Weights::template decode_block<j>(rs_word<j>(w.w_g), rs_word<j>(w.w_g8), w.d_g, w.d_g8,
                                      reinterpret_cast<uint32_t(&)[2][4]>(out[2 * j]));
  };
  block(std::integral_constant<int, 0>{});
  block(std::integral_constant<int, 1>{});
  block(std::integral_constant<int, 2>{});
  block(std::integral_constant<int, 3>{});
}

// Folded mxfp4: the shifts of the 4 k32 blocks of a row's k step, bf16 fragments.
struct Mxfp4Bf16RsWeights {
  using ScaleWord = uint32_t;
  static constexpr bool kF16 = false;
  // The accumulator in the fold's units: the rs decode is e2m1 * 2^(d - 8 - kRsFoldBias).
  static constexpr float kAccScale = static_cast<float>(1 << kRsFoldBias);
  static bool operands_ok(const GroupedGemmOperands& op) { return op.w_col_scale != nullptr; }

  // The 2 k16 A fragments of k32 block j (k16 steps 2j, 2j + 1) from word j of rows g, g + 8.
  template <int j>
  static __device__ __forceinline__ void decode_block(uint32_t word_g, uint32_t word_g8, ScaleWord d_g,
                                                      ScaleWord d_g8, uint32_t (&out)[2][4]) {
    const uint32_t fg = rs_fold_factor((d_g >> (8 * j)) & 0xF);
    const uint32_t fg8 = rs_fold_factor((d_g8 >> (8 * j)) & 0xF);
    rs_a_fragment<0>(word_g, word_g8, fg, fg8, out[0]);
    rs_a_fragment<1>(word_g, word_g8, fg, fg8, out[1]);
  }
  // The 8 k16 A fragments of a k step (k16 step 2j + s from word j).
  static __device__ __forceinline__ void decode(const RsWeightStep<ScaleWord>& w, uint32_t (&out)[8][4]) {
    decode_blocks<Mxfp4Bf16RsWeights>(w, out);
  }
};

// nvfp4: the e4m3 scales of the 8 k16 blocks of a row's k step, f16 fragments (the global
// scales are the epilogue's).
struct Nvfp4F16RsWeights {
  using ScaleWord = uint2;
  static constexpr bool kF16 = true;
  static constexpr float kAccScale = 1.0f;
  static bool operands_ok(const GroupedGemmOperands& op) { return op.w_global && op.a_global; }

  // The 2 k16 A fragments of word kb (k16 blocks 2kb (lo) and 2kb + 1 (hi)); a0 / a2 = row g
  // pairs 0 / 1, a1 / a3 = row g + 8 (tile/nvfp4_f16_codec.h).
  template <int kb>
  static __device__ __forceinline__ void decode_block(uint32_t word_g, uint32_t word_g8, ScaleWord d_g,
                                                      ScaleWord d_g8, uint32_t (&out)[2][4]) {
    uint32_t e4[2][2];  // [row g, g + 8][block 2kb, 2kb + 1]
    decode_fp4_word(word_g, e4[0][0], e4[0][1]);
    decode_fp4_word(word_g8, e4[1][0], e4[1][1]);
    const uint32_t s_g = nvfp4_scale_pair(d_g, kb), s_g8 = nvfp4_scale_pair(d_g8, kb);
    nvfp4_scaled_pairs<false>(e4[0][0], s_g, out[0][0], out[0][2]);
    nvfp4_scaled_pairs<false>(e4[1][0], s_g8, out[0][1], out[0][3]);
    nvfp4_scaled_pairs<true>(e4[0][1], s_g, out[1][0], out[1][2]);
    nvfp4_scaled_pairs<true>(e4[1][1], s_g8, out[1][1], out[1][3]);
  }
  // The 8 k16 A fragments of a k step.
  static __device__ __forceinline__ void decode(const RsWeightStep<ScaleWord>& w, uint32_t (&out)[8][4]) {
    decode_blocks<Nvfp4F16RsWeights>(w, out);
  }
};

template <class Cfg, class Epilogue, class Params>
__device__ __forceinline__ void run_rs_grouped_gemm(const Params& p, uint8_t* smem_raw);

template <class Weights_>
struct RsTileConfig {
  using Weights = Weights_;
  // The kernel body (sm90_rs_kernel.cuh) and its launch check.
  template <class Epilogue, class Params>
  static __device__ __forceinline__ void run(const Params& p, uint8_t* smem) {
    run_rs_grouped_gemm<RsTileConfig, Epilogue>(p, smem);
  }
  static bool operands_ok(const GroupedGemmOperands& op) { return Weights::operands_ok(op); }
  static constexpr int kBlockM = kRsBlockM;  // token rows (the wgmma N side)
  static constexpr int kBlockN = 128;        // weight rows (2 consumers x 64)
  static constexpr int kBlockK = 128;
  static constexpr int kAcc = 64;  // fp32 accumulators per consumer thread (m64n128)
  static constexpr float kAccScale = Weights::kAccScale;
  static constexpr int kStages = 4;
  static constexpr int kLookahead = 2;
  static constexpr int kConsumers = 2;
  static constexpr int kThreads = 128 * (1 + kConsumers);
  static constexpr int kProducerRegs = 56;
  static constexpr int kConsumerRegs = 224;
  // setmaxnreg moves registers within the block's allocation: 384 threads x 168 at launch.
  static_assert(128 * kProducerRegs + 256 * kConsumerRegs <= 384 * 168, "register file");
  // A consumer releases step i - 1 only after waiting on full(i), which the producer signals after
  // issuing step i + kLookahead, which needs step i + kLookahead - kStages released.
  static_assert(kStages >= kLookahead + 2, "the stage ring would deadlock");
  static constexpr int kColBytes = kBlockM * 128;  // one 64-wide k column block
  static constexpr int kStageBytes = 2 * kColBytes;
  static_assert(kColBytes % 1024 == 0, "wgmma tiles are 1024-byte aligned");
  using TokenRows = RsTokenRows<kBlockM / 16, 2, kColBytes>;  // the producer's: 8 threads per row
  using Layout = RsRingLayout<kStages, kStageBytes, kConsumers, kBlockM>;
  static constexpr int kSharedBytes = Layout::kSharedBytes;
};

// The producer: the tile's token rows only (the consumers load their weights themselves).
template <class Cfg>
struct RsProducer {
  typename Cfg::TokenRows rows;

  __device__ __forceinline__ void begin_tile(const GroupedGemmOperands& op, const TileCoord& t, int /*k_steps*/,
                                             int tid) {
    rows.begin_tile(op, t, tid);
  }
  __device__ __forceinline__ void issue(const GroupedGemmOperands& op, const RsRingSmem<Cfg>& sm, int ks,
                                        int /*k_steps*/, int s, int tid) const {
    rows.issue(op, ptx::smem_addr(sm.a(s)), ks, tid);
  }
  static __device__ __forceinline__ void landed(const RsRingSmem<Cfg>&, int, int) {}
};

template <class Cfg, class Epilogue, class Params>
__device__ __forceinline__ void run_rs_grouped_gemm(const Params& p, uint8_t* smem_raw) {
  const RsRingSmem<Cfg> sm{align_smem_1024(smem_raw)};
  const int tid = threadIdx.x;
  const GroupedGemmOperands& op = p.op;
  const RsBlockWork work = rs_block_start<Cfg>(sm, op, p.schedule);
  if (tid < 128) return run_rs_producer<Cfg, RsProducer<Cfg>>(sm, op, p.schedule, work, tid);
  constexpr int S = Cfg::kStages;
  const RsConsumerThread ct = rs_consumer_thread<Cfg>();
  const int k_steps = work.k_steps, lane = ct.lane;
  int item = 0;
  for (int tile = blockIdx.x; tile < work.num_tiles; tile += gridDim.x) {
    const TileCoord t = tile_coord<Cfg::kBlockM>(p.schedule, tile, work.n_tiles);
    const RsFragment f{t.n_tile * Cfg::kBlockN + 64 * ct.wg + 16 * ct.warp + ct.g, lane % 4, ct.warp, ct.wg};
    // Weight micro-tiles f.row / 8 (rows g) and the next one (rows g + 8), k step 0.
    const int64_t micro = static_cast<int64_t>(t.expert) * (op.n / 8) + f.row / 8;
    const uint8_t* w_g = op.w + micro * k_steps * kWeightMicroTileBytes + lane * 16;
    const uint8_t* w_g8 = w_g + static_cast<int64_t>(k_steps) * kWeightMicroTileBytes;
    using ScaleWord = typename Cfg::Weights::ScaleWord;
    constexpr int kScaleBytes = sizeof(ScaleWord);
    const uint8_t* d_g = op.w_scale + (static_cast<int64_t>(t.expert) * k_steps * op.n + f.row) * kScaleBytes;
    const int64_t d_step = static_cast<int64_t>(op.n) * kScaleBytes;
    auto load_scale = [](const uint8_t* p) {
      if constexpr (kScaleBytes == 4)
        return ptx::ld_stream_u32(p);
      else
        return ptx::ld_stream_v2(p);
    };
    auto load_step = [&](int ks) {
      RsWeightStep<ScaleWord> w;
      w.w_g = ptx::ld_stream_v4(w_g + ks * kWeightMicroTileBytes);
      w.w_g8 = ptx::ld_stream_v4(w_g8 + ks * kWeightMicroTileBytes);
      w.d_g = load_scale(d_g + ks * d_step);
      w.d_g8 = load_scale(d_g + ks * d_step + 8 * kScaleBytes);
      return w;
    };

    float acc[64];
#pragma unroll
    for (int i = 0; i < 64; ++i) acc[i] = 0.0f;
    // Two fragment sets of a whole k step (8 k16 steps x 4 registers): set ks % 2 feeds step ks
    // while set (ks + 1) % 2 is decoded for the next one, so no wgmma's inputs are written while
    // the k step it belongs to is in flight.
    uint32_t frag[2][8][4] = {};
    auto decode = [](const RsWeightStep<ScaleWord>& w, uint32_t(&out)[8][4]) { Cfg::Weights::decode(w, out); };
    RsWeightStep<ScaleWord> next = load_step(0);
    decode(next, frag[0]);
    if (k_steps > 1) next = load_step(1);
    // K step ks with fragment set kSet: issue its 8 wgmmas, retire step ks - 1 (release its
    // stage), decode step ks + 1 into the other set, prefetch the weights of step ks + 2.
    auto k_step = [&](auto set_constant, int ks) {
      constexpr int kSet = decltype(set_constant)::value;
      const int s = (item + ks) % S;
      ptx::mbarrier_wait_parity(sm.full(s), ((item + ks) / S) & 1);
      const uint64_t desc = ptx::wgmma_desc_k_major_sw128(ptx::smem_addr(sm.a(s)));
      ptx::wgmma_fence();
#pragma unroll
      for (int step = 0; step < 8; ++step)  // column block step / 4, k16 slice step % 4 (32 bytes)
        ptx::wgmma_m64n128k16_rs<Cfg::Weights::kF16>(acc, frag[kSet][step],
                                                     desc + (step / 4) * (Cfg::kColBytes >> 4) + 2 * (step % 4));
      ptx::wgmma_commit_group();
      ptx::wgmma_wait_group<1>();
#pragma unroll
      for (int step = 0; step < 8; ++step) ptx::fence_operands(frag[1 - kSet][step]);
      if (ks > 0) {
        __syncwarp();
        if (lane == 0) ptx::mbarrier_arrive(sm.empty((item + ks - 1) % S));
      }
      if (ks + 1 < k_steps) {
        decode(next, frag[1 - kSet]);
        if (ks + 2 < k_steps) next = load_step(ks + 2);
      }
    };
    for (int ks = 0; ks < k_steps; ks += 2) {
      k_step(std::integral_constant<int, 0>{}, ks);
      if (ks + 1 < k_steps) k_step(std::integral_constant<int, 1>{}, ks + 1);
    }
    ptx::wgmma_wait_group<0>();
    ptx::fence_operands(acc);
    item += k_steps;
    __syncwarp();
    if (lane == 0 && k_steps > 0) ptx::mbarrier_arrive(sm.empty((item - 1) % S));
    Epilogue::template apply<Cfg>(p.epilogue, op, t, f, sm, acc);
  }
}

}  // namespace moe_ep::cuda
