// The SM90 backend's selected configuration: what runs for which T, chosen once at layer
// creation by select_sm90_config(desc, device, overrides, weights) and then only read. The plan
// (sm90_pipeline.h) turns it into prebuilt launches per T bucket; Layer::info().config prints it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "cuda/kernels/sm90_grouped_gemm.h"
#include "moe_ep/desc.h"
#include "moe_ep/kernel_config.h"

namespace moe_ep::cuda {

// The GEMM kernels one T bucket runs (both GEMMs of a forward use the same family, but for
// Sm90Bucket::gemm1_bf16).
enum class Sm90Gemm { kDecode, kMma, kWgmma, kWgmmaBf16, kWgmmaRs, kNvfp4Mma, kNvfp4Decode, kNvfp4Wgmma };
const char* sm90_gemm_name(Sm90Gemm gemm);

// Auto: mxfp4's decode kernels up to the larger of kDecodeMaxTokens and the T at which the
// experts hold kDecodeMaxRowsPerExpert rows each on average (T * top_k / E, E the global experts:
// one rank's share at world size 1), where the weight stream is the cost. Against wgmma-rs 64x256
// (H100, stop 30) the decode kernels win up to ~16 rows per expert on flash (T ~ 690) and ~15 on
// pro (T ~ 960): bench/RESULTS.md.
inline constexpr int64_t kDecodeMaxTokens = 512;
inline constexpr int64_t kDecodeMaxRowsPerExpert = 15;
int64_t mxfp4_decode_max_tokens(const MoeDesc& desc);
// nvfp4's decode kernels against its 64 x 128 mma.sync ones (H200, deepseek-v4-flash): 1.5x to
// 1.9x faster up to T = 512, 7% at T = 1536, 1% slower at T = 2048 (bench/RESULTS.md). Auto's
// decode bucket ends here where the wgmma kernels do not take over earlier (below).
inline constexpr int64_t kNvfp4DecodeMaxTokens = 1536;
// Auto: nvfp4's f16 wgmma kernels (the weights decoded in registers) from the T at which the
// experts hold this many rows each on average (T * top_k / E), where they fit and exact
// accumulation is off; the decode bucket ends below it (an overridden decode_max_tokens moves the
// decode end alone; wgmma from the later of the two). H100, layer, µs (decode or mma.sync ->
// wgmma 128x128): flash T = 512 1910 -> 3086, 1024 3389 -> 3194, 2048 6036 -> 3429, 8192
// 20822 -> 7211; pro T = 1024 9290 -> 11584, 2048 17109 -> 11895, 8192 54130 -> 18612: the
// crossing at ~21-22 rows per expert on both (bench/RESULTS.md, stop 34).
inline constexpr int64_t kNvfp4WgmmaMinRowsPerExpert = 22;
int64_t nvfp4_wgmma_min_tokens(const MoeDesc& desc);
// Auto's nvfp4 wgmma buckets run the four-consumer 64x256 form (64-token tiles) where it fits, the
// 128x128 form (128-token tiles) where it does not. Layer, µs (128x128 -> 64x256): H200 flash
// T = 938 3196 -> 1789, 2048 3410 -> 1941, 4096 3679 -> 3754, 5461 5236 -> 4693, pro T = 2048
// 11963 -> 6760, 8192 19079 -> 18345 (bench/RESULTS.md, stop 34); H100 flash T = 6144 6613 ->
// 5339, 8192 7195 -> 6743 (stop 35).
// Auto: wgmma from this many tokens on (where most experts fill whole 64-row tiles), unless the
// layer asks for exact accumulation (wgmma's FP8 accumulator is not fp32-exact).
inline constexpr int64_t kWgmmaMinTokens = 256;
// wgmma-rs by override without a tile: m tiles of 64 tokens below this many tokens, 96 from here
// on (experts of ~100+ rows).
inline constexpr int64_t kWgmmaRsWideMinTokens = 4096;
// Auto above the decode buckets: wgmma-rs on 64x256 tiles (four consumer warpgroups) where they
// fit, else FP8 wgmma. H200, layer: flash T = 2048 / 8192 2647 -> 2206 / 8768 -> 7452 µs, pro
// 9407 -> 7599 / 23227 -> 19291 µs (bench/RESULTS.md, stop 30).
// Auto: the decode GEMMs split K in two per block up to this many tokens, where they fit (mxfp4:
// H and I multiples of 1024, nvfp4: of 256 and at least 512; not with exact accumulation).
// Measured on an H100, flash: mxfp4 T = 1 59.0 -> 52.3 µs, T = 2 79.2 -> 87.4 (bench/RESULTS.md,
// stop 29); nvfp4 T = 1 70.6 -> 63.3, T = 2 93.8 -> 97.6 (stop 35).
inline constexpr int64_t kDecodeSplitMaxTokens = 1;
// Auto's wgmma-rs 64x256 buckets run an expert's last tile of <= 48 rows on n48 wgmmas, in a second
// pass after the block's other tiles, while the experts hold at most this many rows each on average
// (T * top_k / E): in tile order H200, flash T = 1024 / 2048 -11% / -2%, pro T = 2048 -9%; in a
// second pass the flash GEMMs at T = 2048 another -3.3% (H100); at T = 8192 (192 / 128 rows) either
// form costs 3-3.5% (bench/RESULTS.md, stops 30-31).
inline constexpr int64_t kNarrowTailsMaxRowsPerExpert = 64;
// Auto's wgmma-rs 64x256 buckets above the narrow ones run GEMM 1 on bf16 wgmma over 128-token
// tiles (the wide bf16 kernel's m64n128k16 form: no per-k32 promotion, half the weight decode
// per product; an expert's odd last 64-row tile in a second launch on 64-token tiles; GEMM 2
// stays FP8) where an expert's expected cost on them, kGemm1Bf16TileCost per 128-token tile and
// kGemm1Bf16OddTileCost per odd last tile, is at most kGemm1Bf16Margin of its expected 64-row FP8
// tiles (rows per expert ~ normal around T * top_k / E with the deviation of random routing).
// The costs are the flash T = 8192 layer's (H100, ncu, bench/RESULTS.md, stop 33): FP8 64x256
// 4565 µs over 14336 tiles; the pairs launch 3388 µs over ~6144 128-token tiles (1.73 FP8 tiles
// each), the odd-last launch 881 µs over ~2048 64-token tiles (1.35 each: its tiles' weights come
// from HBM again, a second wave of their own). The rule takes 68.1-128.5 and from 186.6 rows per
// expert (flash T = 2904-5482 and from 7963, pro T = 4356-8224 and from 11944).
// Only where the layer quantizes x (desc.quantize_input): with caller-quantized rows (an
// expert-parallel rank's received slots, every slot passed) the conversion to bf16 would cover
// every row the caller passes, routed or not.
inline constexpr double kGemm1Bf16TileCost = 1.7;
inline constexpr double kGemm1Bf16OddTileCost = 1.35;
inline constexpr double kGemm1Bf16Margin = 0.95;
// Above this many rows per expert the rule's answer stays the same.
inline constexpr int64_t kGemm1Bf16RuleMaxRowsPerExpert = 320;
// Expected m tiles of `block_m` rows of an expert whose rows are ~ normal(rows, sqrt(rows)).
double expected_expert_tiles(double rows, int block_m);
// The expected cost of such an expert's GEMM 1 on bf16 128-token tiles (its full pairs of 64-row
// tiles at kGemm1Bf16TileCost, an odd last one at kGemm1Bf16OddTileCost), in 64-row FP8 tiles.
double expected_gemm1_bf16_cost(double rows);
// Whether auto runs GEMM 1 on bf16 128x256 tiles at this mean of rows per expert.
bool gemm1_bf16_pays(double rows_per_expert);

// What the device and the loaded weights allow, measured before selection.
struct Sm90Facts {
  int sm_count = 0;
  bool w13_folded = false, w2_folded = false;  // mxfp4 weights folded into the FP8 window
  std::string decode_unavailable;  // why the decode kernels (of the recipe) cannot run ("" when they can)
  int decode_blocks_per_sm[2] = {0, 0};
  int decode_deep_blocks_per_sm[2] = {0, 0};  // kDecodeDeepPrefetch form; 0 when it does not fit
  int decode_split_blocks_per_sm[2] = {0, 0};  // K split in two; 0 when it does not fit
  int mma_blocks_per_sm[2] = {0, 0};    // mma.sync (mxfp4) or f16 mma.sync (nvfp4) GEMMs
  int wgmma_blocks_per_sm[2] = {0, 0};  // of the selected tile; 0 when not configured
  int wgmma_bf16_blocks_per_sm[2] = {0, 0};  // 0 when not configured
  int wgmma_bf16_wide_blocks_per_sm[2] = {0, 0};  // the 64x256 tile (four consumers); 0 when it does not fit
  int wgmma_rs_blocks_per_sm[2] = {0, 0};    // both m tiles (the smaller count); 0 when not configured
  int wgmma_rs_wide_blocks_per_sm[2] = {0, 0};  // the 64x256 tile (four consumers); 0 when it does not fit
  int gemm1_bf16_128_blocks_per_sm = 0;  // GEMM 1 on bf16 wgmma, 128x256 tiles; 0 when it does not fit
  int nvfp4_wgmma_blocks_per_sm[2] = {0, 0}; // 0 when not configured
  int nvfp4_wgmma_wide_blocks_per_sm[2] = {0, 0};  // the 64x256 tile (four consumers); 0 when it does not fit
};

struct Sm90Bucket {
  int64_t min_tokens = 0, max_tokens = 0;  // T in [min, max]
  Sm90Gemm gemm = Sm90Gemm::kMma;
  int block_m = kGemmBlockM;               // rows per m tile the routing lists
  int decode_split = 1;                    // decode buckets: K parts per block (1 or 2)
  int block_n = 0;                         // wgmma-rs buckets: weight rows per n tile (kRsFp8BlockN, or
                                           // kRsFp8WideBlockN: four consumer warpgroups); wgmma-bf16 and
                                           // nvfp4-wgmma: kRsWideBlockN for their four-consumer form; 0
                                           // elsewhere
  bool narrow_tails = false;               // wgmma-rs 64x256: tiles of <= 48 rows on n48 wgmmas, last
  bool gemm1_bf16 = false;                 // wgmma-rs 64x256: GEMM 1 on bf16 wgmma over 128-token tiles
                                           // (odd last 64-row tiles on 64-token ones; x as bf16), GEMM 2
                                           // FP8 on the same 64-row list
};

struct Sm90Config {
  Recipe recipe = Recipe::kMxfp4;
  GemmKernel requested = GemmKernel::kAuto;  // KernelOverrides::gemm
  bool fold = true;                          // fold mxfp4 weights into the FP8 window at load
  WgmmaTile wgmma_tile = kWgmmaDefaultTile;
  int64_t decode_max_tokens = kDecodeMaxTokens;
  int64_t wgmma_min_tokens = kWgmmaMinTokens;
  int decode_prefetch = kDecodePrefetch;     // k steps of weights in flight per decode warp
  std::optional<int> decode_split;           // pinned (overrides.decode_split_k); auto: up to
                                             // kDecodeSplitMaxTokens
  std::optional<bool> fuse_quantize_route;   // pinned (overrides.fuse_quantize_route); auto: fuses_quantize_route
  bool fuse_combine = false;                 // decode buckets: the combine inside GEMM 2
  bool quantize_input = true;                // desc.quantize_input: the layer quantizes x
  bool exact_accumulation = false, fast_math = false;
  std::string wgmma_unavailable;             // why wgmma cannot run ("" when it can)
  std::string wgmma_bf16_unavailable;        // the same for wgmma-bf16 (only by override so far)
  std::string wgmma_rs_unavailable;          // the same for wgmma-rs (of its override's tile)
  std::string wgmma_rs_auto_unavailable;     // why auto cannot take wgmma-rs 64x256 ("" when it does)
  std::string nvfp4_wgmma_unavailable;       // the same for nvfp4's f16 wgmma (of its override's tile)
  std::string nvfp4_wgmma_wide_unavailable;  // why its 64x256 form cannot run ("" when it can)
  int wgmma_rs_block_m = 0;                  // overrides.tile's m for wgmma-rs; 0: by T
  int wgmma_rs_block_n = kRsFp8BlockN;       // overrides.tile's n for wgmma-rs (256: four consumers)
  int wgmma_bf16_block_n = 128;              // overrides.tile's n for wgmma-bf16 (kRsWideBlockN: 64x256,
                                             // four consumers)
  int nvfp4_wgmma_block_n = 0;               // overrides.tile's n for nvfp4-wgmma (128 or kRsWideBlockN);
                                             // 0: auto's (by rows per expert), or 128 by overrides.gemm
  Sm90Facts facts;
  std::vector<Sm90Bucket> buckets;           // ascending, covering 1..max_tokens_per_rank

  const Sm90Bucket& bucket(int64_t num_tokens) const;
  // Whether a bucket quantizes x and routes in one launch: as pinned, else (auto) in mxfp4's decode
  // buckets, where it measured faster (bench/RESULTS.md, stop 28); never when x comes quantized.
  bool fuses_quantize_route(const Sm90Bucket& bucket) const;
  // Whether a bucket reads 16-bit activations (wgmma-bf16, nvfp4-wgmma: plan.h's h_16bit region).
  bool uses_16bit_activations() const;
  void describe(SelectedConfig& out) const;  // the entries (the plan adds its own lines)
};

// Load-time choices that precede the weights: folding and the wgmma tile. Throws kUnsupported /
// kInvalidArgument naming the override when it cannot be honoured for this problem.
Sm90Config select_sm90_load_config(const MoeDesc& desc, const KernelOverrides& overrides);

// Completes `config` with the facts and picks the kernels of every T bucket. An override the
// kernels cannot honour, or one that contradicts exact_accumulation, fails naming it.
void select_sm90_kernels(Sm90Config& config, const MoeDesc& desc, const KernelOverrides& overrides,
                         const Sm90Facts& facts);

}  // namespace moe_ep::cuda
