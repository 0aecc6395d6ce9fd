// The SM90 backend's selection policy: which kernel form runs each GEMM for which T, chosen once
// at layer creation from the descriptor, the overrides and the measured facts (sm90_forms.h), then
// only read. The plan (sm90_pipeline.h) turns it into prebuilt launches per T bucket;
// Layer::info().config prints it. Host-only: no CUDA header, tested without a GPU.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "cuda/policy/sm90_forms.h"
#include "moe_ep/desc.h"
#include "moe_ep/kernel_config.h"

namespace moe_ep::cuda {

// ---- the rules of auto; each constant is where a measured crossing put it ----

// mxfp4's decode forms up to the larger of these: kDecodeMaxTokens, or the T at which the
// experts hold kDecodeMaxRowsPerExpert rows each on average (T * top_k / E, E the global experts),
// where streaming the weights is the cost and the decode forms beat the register-operand ones.
inline constexpr int64_t kDecodeMaxTokens = 512;
inline constexpr int64_t kDecodeMaxRowsPerExpert = 15;
int64_t mxfp4_decode_max_tokens(const MoeDesc& desc);
// Auto runs T = 1 on the one-token layer where it can and the K experts of one token hold at most
// this many weight bytes (overrides.one_token_layer pins it either way): it saves the chain two
// launches and their round trips, but its gate_up kernel streams W13 more slowly than the decode
// GEMMs do, so it wins where launches, not bytes, are the cost (tiny; not deepseek-v4-flash).
inline constexpr int64_t kOneTokenAutoMaxWeightBytes = int64_t{16} << 20;
// The bytes of the K experts of one token: W13 and W2 codes with their E8M0 scales.
int64_t one_token_weight_bytes(const MoeDesc& desc);
// nvfp4's decode forms against its mma.sync ones: faster up to about this T on the presets.
inline constexpr int64_t kNvfp4DecodeMaxTokens = 1536;
// nvfp4's f16 wgmma forms from the T at which the experts hold this many rows each on average
// (the decode bucket then ends below it).
inline constexpr int64_t kNvfp4WgmmaMinRowsPerExpert = 22;
int64_t nvfp4_wgmma_min_tokens(const MoeDesc& desc);
// mxfp4's wgmma forms from this many tokens on (where most experts fill whole 64-row tiles).
inline constexpr int64_t kWgmmaMinTokens = 256;
// The decode forms split K in two up to this many tokens, where the split forms can run: a
// warp's serial walk over K bounds the GEMM only for the one or two tokens of a tile.
inline constexpr int64_t kDecodeSplitMaxTokens = 1;
// rs-fp8 runs an expert's last tile of <= 48 rows on n48 wgmmas (the tails form) while the
// experts hold at most this many rows each on average; above, whole tiles cost less.
inline constexpr int64_t kNarrowTailsMaxRowsPerExpert = 64;
// GEMM 1 on the bf16 pairs form (128-token tiles, no per-k32 promotion, half the weight decode
// per product) where an expert's expected cost on it, kGemm1Bf16TileCost per 128-token tile and
// kGemm1Bf16OddTileCost per odd last 64-row tile (in 64-row FP8 tiles, from the kernels' measured
// times), is at most kGemm1Bf16Margin of its expected 64-row FP8 tiles, with the rows per expert
// ~ normal around T * top_k / E with the deviation of random routing. Only where the layer
// quantizes x: with caller-quantized rows the conversion to bf16 covers every row passed.
inline constexpr double kGemm1Bf16TileCost = 1.7;
inline constexpr double kGemm1Bf16OddTileCost = 1.35;
inline constexpr double kGemm1Bf16Margin = 0.95;
// Above this many rows per expert the rule's answer stays the same.
inline constexpr int64_t kGemm1Bf16RuleMaxRowsPerExpert = 320;
// Expected m tiles of `block_m` rows of an expert whose rows are ~ normal(rows, sqrt(rows)).
double expected_expert_tiles(double rows, int block_m);
// The expected cost of such an expert's GEMM 1 on the pairs form, in 64-row FP8 tiles.
double expected_gemm1_bf16_cost(double rows);
// Whether auto runs GEMM 1 on the bf16 pairs form at this mean of rows per expert.
bool gemm1_bf16_pays(double rows_per_expert);

// One T bucket: the forms of its two GEMMs over [min_tokens, max_tokens].
struct Sm90Bucket {
  int64_t min_tokens = 0, max_tokens = 0;
  Sm90Form gemm1 = Sm90Form::kMxfp4Mma, gemm2 = Sm90Form::kMxfp4Mma;
  // Rows per m tile the routing lists for this bucket (both GEMMs walk the same list).
  int block_m() const { return sm90_form(gemm1).list_block_m; }
  bool operator==(const Sm90Bucket&) const = default;
};

struct Sm90Config {
  Recipe recipe = Recipe::kMxfp4;
  GemmKernel requested = GemmKernel::kAuto;  // KernelOverrides::gemm
  TileShape tile;                            // KernelOverrides::tile
  bool fold = true;                          // fold mxfp4 weights into the FP8 window at load
  int64_t decode_max_tokens = kDecodeMaxTokens;
  std::optional<int> decode_split;           // pinned (overrides.decode_split_k)
  std::optional<bool> fuse_quantize_route;   // pinned (overrides.fuse_quantize_route)
  std::optional<bool> one_token_layer;       // pinned (overrides.one_token_layer)
  bool quantize_input = true;                // desc.quantize_input: the layer quantizes x
  bool exact_accumulation = false, fast_math = false;
  Sm90Facts facts;
  std::array<std::string, kSm90FormCount> unavailable;  // why each form cannot run ("" when it can)
  std::vector<Sm90Bucket> buckets;           // ascending, covering 0..max_tokens_per_rank

  const Sm90Bucket& bucket(int64_t num_tokens) const;
  const std::string& reason(Sm90Form form) const { return unavailable[static_cast<int>(form)]; }
  bool available(Sm90Form form) const { return reason(form).empty(); }
  // Whether a bucket quantizes x and routes in one launch: as pinned, else (auto) in mxfp4's decode
  // buckets, where it measured faster; never when x comes quantized.
  bool fuses_quantize_route(const Sm90Bucket& bucket) const;
  // Whether a bucket reads 16-bit h (plan.h's h_16bit region).
  bool uses_16bit_activations() const;
  // Whether a bucket runs a whole-layer form (plan.h's h_f32 region for mxfp4).
  bool uses_one_token_layer() const;
  void describe(SelectedConfig& out) const;  // the entries (the plan adds its own lines)
};

// Load-time choices that precede the weights (folding) and the overrides' own checks. Throws
// kUnsupported / kInvalidArgument naming the override when it cannot be honoured for this problem.
Sm90Config select_sm90_load_config(const MoeDesc& desc, const KernelOverrides& overrides);

// Completes `config` with the facts and picks the forms of every T bucket. An override the forms
// cannot honour, or one that contradicts exact_accumulation, fails naming it.
void select_sm90_kernels(Sm90Config& config, const MoeDesc& desc, const KernelOverrides& overrides,
                         const Sm90Facts& facts);

}  // namespace moe_ep::cuda
