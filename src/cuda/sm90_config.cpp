#include "cuda/sm90_config.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "core/check.h"

namespace moe_ep::cuda {

namespace {

// Why a register-operand family (wgmma-bf16, wgmma-rs, nvfp4-wgmma: n tiles of 128; k steps of
// 128 are the plan's own rule) cannot run this layer, "" when it can: `weights` (a reason of the
// loaded weights, or ""), then the shape, then whether its kernels fit on the device.
std::string register_operand_unavailable(const MoeDesc& desc, const std::string& weights,
                                         const int (&blocks_per_sm)[2], int block_n = kRsFp8BlockN) {
  static_assert(kRsFp8BlockN == 128, "the register-operand families take n tiles of 128 (wgmma-rs: or 256)");
  if (!weights.empty()) return weights;
  if (desc.fleet.hidden_size % block_n != 0 || (2 * desc.intermediate_size) % block_n != 0)
    return fmt::format("hidden = {} and 2 * intermediate = {} must be multiples of {}", desc.fleet.hidden_size,
                       2 * desc.intermediate_size, block_n);
  return blocks_per_sm[0] < 1 || blocks_per_sm[1] < 1 ? "the kernels do not fit on this device" : "";
}

// Why the decode GEMMs with K split in two cannot run this layer, as the rest of a sentence on
// overrides.decode_split_k = 2; "" when they can (then auto takes them up to
// kDecodeSplitMaxTokens).
std::string decode_split_unavailable(const Sm90Config& c, const MoeDesc& desc, const Sm90Facts& facts) {
  if (!facts.decode_unavailable.empty()) return ": the decode GEMMs cannot run this layer: " + facts.decode_unavailable;
  const int64_t H = desc.fleet.hidden_size, I = desc.intermediate_size;
  if (desc.recipe == Recipe::kMxfp4 && (H % 1024 != 0 || I % 1024 != 0))
    return fmt::format(": each half of K must be whole 512-wide chunks; hidden = {} and intermediate = {} must be "
                       "multiples of 1024", H, I);
  if (desc.recipe != Recipe::kMxfp4 && (H % 256 != 0 || I % 256 != 0 || H < 512 || I < 512))
    return fmt::format(": each half of K must be whole 128-wide k steps and the tile's A rows must hold the halves' "
                       "hand-over; hidden = {} and intermediate = {} must be multiples of 256, at least 512", H, I);
  if (c.exact_accumulation)
    return " adds the two halves' fp32 sums: the decode GEMMs are then not bitwise the CPU layer's, which "
           "exact_accumulation asks for";
  if (c.decode_prefetch != kDecodePrefetch || c.fuse_combine)
    return fmt::format(" has no form with overrides.decode_prefetch = {} or overrides.fuse_combine = true",
                       c.decode_prefetch);
  if (facts.decode_split_blocks_per_sm[0] < 1 || facts.decode_split_blocks_per_sm[1] < 1)
    return ": the split decode kernels do not fit on this device";
  return "";
}

// The T at which the experts hold `rows` rows each on average (T * top_k / E, E the global experts).
int64_t tokens_at_rows_per_expert(const MoeDesc& desc, int64_t rows) {
  return rows * desc.fleet.num_experts / std::max<int64_t>(desc.top_k, 1);
}

}  // namespace

const char* sm90_gemm_name(Sm90Gemm gemm) {
  switch (gemm) {
    case Sm90Gemm::kDecode: return "decode";
    case Sm90Gemm::kMma: return "mma";
    case Sm90Gemm::kWgmma: return "wgmma";
    case Sm90Gemm::kWgmmaBf16: return "wgmma-bf16";
    case Sm90Gemm::kWgmmaRs: return "wgmma-rs";
    case Sm90Gemm::kNvfp4Mma: return "nvfp4-mma";
    case Sm90Gemm::kNvfp4Decode: return "nvfp4-decode";
    case Sm90Gemm::kNvfp4Wgmma: return "nvfp4-wgmma";
  }
  return "unknown";
}

namespace {

// E[cost(x)] over an expert's rows x ~ normal(rows, sqrt(rows)), x >= 1.
template <class Cost>
double expected_over_rows(double rows, Cost&& cost) {
  if (rows <= 0) return 0.0;
  const double sigma = std::sqrt(rows);
  double sum = 0.0, weight = 0.0;
  for (int64_t x = std::max<int64_t>(1, static_cast<int64_t>(rows - 6 * sigma));
       x <= static_cast<int64_t>(rows + 6 * sigma) + 1; ++x) {
    const double z = (static_cast<double>(x) - rows) / sigma, p = std::exp(-0.5 * z * z);
    sum += p * cost(x);
    weight += p;
  }
  return sum / weight;
}

}  // namespace

double expected_expert_tiles(double rows, int block_m) {
  return expected_over_rows(rows, [&](int64_t x) { return static_cast<double>((x + block_m - 1) / block_m); });
}

double expected_gemm1_bf16_cost(double rows) {
  return expected_over_rows(rows, [](int64_t x) {
    const int64_t tiles = (x + 63) / 64;
    return kGemm1Bf16TileCost * static_cast<double>(tiles / 2) + kGemm1Bf16OddTileCost * static_cast<double>(tiles % 2);
  });
}

bool gemm1_bf16_pays(double rows_per_expert) {
  return rows_per_expert > static_cast<double>(kNarrowTailsMaxRowsPerExpert) &&
         expected_gemm1_bf16_cost(rows_per_expert) <= kGemm1Bf16Margin * expected_expert_tiles(rows_per_expert, 64);
}

int64_t mxfp4_decode_max_tokens(const MoeDesc& desc) {
  return std::max(kDecodeMaxTokens, tokens_at_rows_per_expert(desc, kDecodeMaxRowsPerExpert));
}

int64_t nvfp4_wgmma_min_tokens(const MoeDesc& desc) {
  return tokens_at_rows_per_expert(desc, kNvfp4WgmmaMinRowsPerExpert);
}

const Sm90Bucket& Sm90Config::bucket(int64_t num_tokens) const {
  for (const Sm90Bucket& b : buckets)
    if (num_tokens <= b.max_tokens) return b;
  return buckets.back();
}

bool Sm90Config::fuses_quantize_route(const Sm90Bucket& b) const {
  return quantize_input && fuse_quantize_route.value_or(recipe == Recipe::kMxfp4 && b.gemm == Sm90Gemm::kDecode);
}

bool Sm90Config::uses_16bit_activations() const {
  for (const Sm90Bucket& b : buckets)
    if (b.gemm == Sm90Gemm::kWgmmaBf16 || b.gemm == Sm90Gemm::kNvfp4Wgmma) return true;
  return false;
}

Sm90Config select_sm90_load_config(const MoeDesc& desc, const KernelOverrides& o) {
  Sm90Config c;
  c.recipe = desc.recipe;
  c.requested = o.gemm;
  c.exact_accumulation = desc.numerics.exact_accumulation;
  c.fast_math = desc.numerics.fast_math;
  c.quantize_input = desc.quantize_input;
  const bool mxfp4 = desc.recipe == Recipe::kMxfp4;
  c.decode_max_tokens = mxfp4 ? mxfp4_decode_max_tokens(desc) : kNvfp4DecodeMaxTokens;
  MOE_EP_CHECK_CODE(mxfp4 || o.gemm == GemmKernel::kAuto || o.gemm == GemmKernel::kMma ||
                        o.gemm == GemmKernel::kDecode || o.gemm == GemmKernel::kWgmma,
                    ErrorCode::kUnsupported,
                    "overrides.gemm = {}: recipe '{}' runs f16 GEMMs on SM90 (mma.sync, or f16 wgmma "
                    "with the weights in registers); allowed: auto, decode, mma, wgmma",
                    gemm_kernel_name(o.gemm), recipe_name(desc.recipe));
  const bool warpgroup =
      o.gemm == GemmKernel::kWgmma || o.gemm == GemmKernel::kWgmmaBf16 || o.gemm == GemmKernel::kWgmmaRs;
  MOE_EP_CHECK_CODE(!(warpgroup && c.exact_accumulation), ErrorCode::kInvalidArgument,
                    "overrides.gemm = {} contradicts desc.numerics.exact_accumulation = true (the "
                    "wgmma accumulator is not fp32-exact per k block); allowed with it: auto, decode, mma",
                    gemm_kernel_name(o.gemm));
  if (o.fold_fp8) c.fold = *o.fold_fp8;
  MOE_EP_CHECK_CODE(c.fold || !warpgroup || !mxfp4, ErrorCode::kUnsupported,
                    "overrides.gemm = {} needs folded weights; overrides.fold_fp8 = false keeps "
                    "E8M0 block scales", gemm_kernel_name(o.gemm));
  if (!o.tile.automatic()) {
    MOE_EP_CHECK_CODE(mxfp4 || o.gemm == GemmKernel::kWgmma, ErrorCode::kUnsupported,
                      "overrides.tile = {}: recipe '{}' has a tile choice on SM90 only with "
                      "overrides.gemm = wgmma", o.tile.str(), recipe_name(desc.recipe));
    if (!mxfp4) {
      MOE_EP_CHECK_CODE(o.tile == (TileShape{kRsBlockM, 128}) || o.tile == (TileShape{kRsWideBlockM, kRsWideBlockN}),
                        ErrorCode::kUnsupported,
                        "overrides.tile = {} is not an nvfp4 wgmma tile of SM90; allowed: {}x128, {}x{}",
                        o.tile.str(), kRsBlockM, kRsWideBlockM, kRsWideBlockN);
      c.nvfp4_wgmma_block_n = static_cast<int>(o.tile.n);
    } else if (o.gemm == GemmKernel::kWgmmaBf16) {
      MOE_EP_CHECK_CODE(o.tile == (TileShape{kRsBlockM, 128}) || o.tile == (TileShape{kRsWideBlockM, kRsWideBlockN}),
                        ErrorCode::kUnsupported,
                        "overrides.tile = {} is not a wgmma-bf16 tile of SM90; allowed: {}x128, {}x{}", o.tile.str(),
                        kRsBlockM, kRsWideBlockM, kRsWideBlockN);
      c.wgmma_bf16_block_n = static_cast<int>(o.tile.n);
    } else if (o.gemm == GemmKernel::kWgmmaRs) {
      MOE_EP_CHECK_CODE(o.tile == (TileShape{64, 128}) || o.tile == (TileShape{96, 128}) ||
                            o.tile == (TileShape{64, 256}),
                        ErrorCode::kUnsupported,
                        "overrides.tile = {} is not a wgmma-rs tile of SM90; allowed: 64x128, 96x128, 64x256",
                        o.tile.str());
      c.wgmma_rs_block_m = static_cast<int>(o.tile.m);
      c.wgmma_rs_block_n = static_cast<int>(o.tile.n);
    } else if (o.tile == TileShape{64, 256})
      c.wgmma_tile = WgmmaTile::k64x256;
    else if (o.tile == TileShape{128, 128})
      c.wgmma_tile = WgmmaTile::k128x128;
    else
      MOE_EP_FAIL(ErrorCode::kUnsupported, "overrides.tile = {} is not a wgmma tile of SM90; "
                  "allowed: 64x256, 128x128", o.tile.str());
  }
  if (o.decode_max_tokens) {
    MOE_EP_CHECK(*o.decode_max_tokens >= 0, "overrides.decode_max_tokens = {} is invalid; expected "
                 ">= 0 tokens", *o.decode_max_tokens);
    c.decode_max_tokens = *o.decode_max_tokens;
  }
  if (o.decode_prefetch) {
    MOE_EP_CHECK(*o.decode_prefetch == kDecodePrefetch || *o.decode_prefetch == kDecodeDeepPrefetch,
                 "overrides.decode_prefetch = {} is invalid; expected {} or {} k steps", *o.decode_prefetch,
                 kDecodePrefetch, kDecodeDeepPrefetch);
    c.decode_prefetch = *o.decode_prefetch;
  }
  if (o.decode_split_k) {
    MOE_EP_CHECK(*o.decode_split_k == 1 || *o.decode_split_k == 2,
                 "overrides.decode_split_k = {} is invalid; expected 1 or 2 parts", *o.decode_split_k);
    c.decode_split = *o.decode_split_k;
  }
  if (o.fuse_quantize_route.value_or(false)) {
    MOE_EP_CHECK_CODE(desc.quantize_input, ErrorCode::kUnsupported,
                      "overrides.fuse_quantize_route = true: this layer does not quantize x "
                      "(desc.quantize_input = false, or the local experts of an expert-parallel rank)");
  }
  if (o.fuse_quantize_route) c.fuse_quantize_route = *o.fuse_quantize_route;
  MOE_EP_CHECK_CODE(!o.fuse_combine.value_or(false) || desc.shared_intermediate_size == 0, ErrorCode::kUnsupported,
                    "overrides.fuse_combine = true: the shared expert's output is added in the combine, beside "
                    "GEMM 2 on its own stream; with a shared expert (desc.shared_intermediate_size = {}) the "
                    "combine stays a launch of its own", desc.shared_intermediate_size);
  if (o.fuse_combine) c.fuse_combine = *o.fuse_combine;
  return c;
}

namespace {

// The T buckets (and the availability strings) of select_sm90_kernels.
void pick_buckets(Sm90Config& c, const MoeDesc& desc, const KernelOverrides& o, const Sm90Facts& facts) {
  c.facts = facts;
  const int64_t max_tokens = desc.fleet.max_tokens_per_rank;
  c.buckets.clear();
  MOE_EP_CHECK_CODE(!c.fuse_combine || facts.decode_unavailable.empty(), ErrorCode::kUnsupported,
                    "overrides.fuse_combine = true: the combine is fused into the decode GEMMs, which cannot "
                    "run this layer: {}", facts.decode_unavailable);
  const std::string split_unavailable = decode_split_unavailable(c, desc, facts);
  MOE_EP_CHECK_CODE(c.decode_split != 2 || split_unavailable.empty(), ErrorCode::kUnsupported,
                    "overrides.decode_split_k = 2{}", split_unavailable);
  if (c.decode_prefetch == kDecodeDeepPrefetch) {  // only by override
    MOE_EP_CHECK_CODE(facts.decode_unavailable.empty(), ErrorCode::kUnsupported,
                      "overrides.decode_prefetch = {}: the decode GEMMs cannot run this layer: {}",
                      kDecodeDeepPrefetch, facts.decode_unavailable);
    MOE_EP_CHECK_CODE(facts.decode_deep_blocks_per_sm[0] > 0 && facts.decode_deep_blocks_per_sm[1] > 0,
                      ErrorCode::kUnsupported,
                      "overrides.decode_prefetch = {}: the deep decode kernels do not fit on this device",
                      kDecodeDeepPrefetch);
  }
  if (desc.recipe != Recipe::kMxfp4) {
    // nvfp4 auto: the decode kernels up to decode_max_tokens (mma.sync where they cannot run),
    // the f16 wgmma kernels from nvfp4_wgmma_min_tokens where they fit and exact accumulation is
    // off (the default decode bucket then ends below it; an overridden decode_max_tokens moves
    // the decode end alone, as for mxfp4: wgmma from the later of the two), the 64 x 128 mma.sync
    // kernels between or above. Each kernel alone by override.
    MOE_EP_CHECK_CODE(facts.decode_unavailable.empty() || o.gemm != GemmKernel::kDecode, ErrorCode::kUnsupported,
                      "overrides.gemm = decode: the nvfp4 decode GEMMs cannot run this layer: {}",
                      facts.decode_unavailable);
    c.nvfp4_wgmma_wide_unavailable =
        register_operand_unavailable(desc, "", facts.nvfp4_wgmma_wide_blocks_per_sm, kRsWideBlockN);
    c.nvfp4_wgmma_unavailable = c.nvfp4_wgmma_block_n == kRsWideBlockN
                                    ? c.nvfp4_wgmma_wide_unavailable
                                    : register_operand_unavailable(desc, "", facts.nvfp4_wgmma_blocks_per_sm);
    MOE_EP_CHECK_CODE(c.nvfp4_wgmma_unavailable.empty() || o.gemm != GemmKernel::kWgmma, ErrorCode::kUnsupported,
                      "overrides.gemm = wgmma: the nvfp4 wgmma GEMMs cannot run this layer: {}",
                      c.nvfp4_wgmma_unavailable);
    // The 64x256 form: 64-token list tiles, four consumers on 256 weight rows.
    const Sm90Bucket wide{0, 0, Sm90Gemm::kNvfp4Wgmma, kRsWideBlockM, 1, kRsWideBlockN};
    const Sm90Bucket narrow{0, 0, Sm90Gemm::kNvfp4Wgmma, kRsBlockM};
    if (o.gemm == GemmKernel::kWgmma) {
      c.buckets.push_back(c.nvfp4_wgmma_block_n == kRsWideBlockN ? wide : narrow);
      c.buckets.back().max_tokens = max_tokens;
      return;
    }
    const int64_t decode_hi = o.gemm == GemmKernel::kDecode ? max_tokens
                              : o.gemm == GemmKernel::kMma || !facts.decode_unavailable.empty()
                                  ? -1
                                  : std::min(c.decode_max_tokens, max_tokens);
    // (not with exact accumulation: the wgmma accumulator is not fp32-exact per k block)
    const bool wgmma = o.gemm == GemmKernel::kAuto && c.nvfp4_wgmma_unavailable.empty() && !c.exact_accumulation;
    const int64_t wgmma_lo = !wgmma                ? max_tokens + 1
                             : o.decode_max_tokens ? std::max(nvfp4_wgmma_min_tokens(desc), decode_hi + 1)
                                                   : nvfp4_wgmma_min_tokens(desc);
    if (wgmma && !o.decode_max_tokens) c.decode_max_tokens = std::min(c.decode_max_tokens, wgmma_lo - 1);
    // Buckets in T order, each from the end of the one before; empty ones are left out.
    auto add = [&](int64_t hi, Sm90Bucket b) {
      b.min_tokens = c.buckets.empty() ? 0 : c.buckets.back().max_tokens + 1;
      b.max_tokens = std::min(hi, max_tokens);
      if (b.max_tokens >= b.min_tokens) c.buckets.push_back(b);
    };
    // The decode bucket splits K in two up to kDecodeSplitMaxTokens where the split kernels can
    // run, or all of it when pinned (overrides.decode_split_k).
    const int64_t decode_end = std::min(decode_hi, wgmma_lo - 1);
    const int64_t split_end = c.decode_split ? (*c.decode_split == 2 ? decode_end : -1)
                                             : (split_unavailable.empty() ? kDecodeSplitMaxTokens : -1);
    add(std::min(decode_end, split_end), {0, 0, Sm90Gemm::kNvfp4Decode, kDecodeBlockM, 2});
    add(decode_end, {0, 0, Sm90Gemm::kNvfp4Decode, kDecodeBlockM, 1});
    add(wgmma_lo - 1, {0, 0, Sm90Gemm::kNvfp4Mma, kGemmBlockM});
    add(max_tokens, wgmma && c.nvfp4_wgmma_wide_unavailable.empty() ? wide : narrow);
    return;
  }
  const WgmmaTileShape ts = wgmma_tile_shape(c.wgmma_tile);
  if (!facts.w13_folded || !facts.w2_folded)
    c.wgmma_unavailable = c.fold ? "the weights are not inside the FP8 window (SPEC.md §5), so they "
                                   "are not folded"
                                 : "folding is off (overrides.fold_fp8 = false)";
  else if (desc.fleet.hidden_size % ts.block_n != 0 || (2 * desc.intermediate_size) % ts.block_n != 0)
    c.wgmma_unavailable = fmt::format("hidden = {} and 2 * intermediate = {} must be multiples of {}",
                                      desc.fleet.hidden_size, 2 * desc.intermediate_size, ts.block_n);
  else if (facts.wgmma_blocks_per_sm[0] < 1 || facts.wgmma_blocks_per_sm[1] < 1)
    c.wgmma_unavailable = "the kernels do not fit on this device";
  // The mxfp4 register-operand families (wgmma-bf16, wgmma-rs) need folded weights.
  const std::string unfolded =
      facts.w13_folded && facts.w2_folded ? ""
      : c.fold ? "the weights are not inside the FP8 window (SPEC.md §5), so they are not folded"
               : "folding is off (overrides.fold_fp8 = false)";
  c.wgmma_bf16_unavailable =
      c.wgmma_bf16_block_n == kRsWideBlockN
          ? register_operand_unavailable(desc, unfolded, facts.wgmma_bf16_wide_blocks_per_sm, kRsWideBlockN)
          : register_operand_unavailable(desc, unfolded, facts.wgmma_bf16_blocks_per_sm);
  const std::string wide_rs_unavailable =
      register_operand_unavailable(desc, unfolded, facts.wgmma_rs_wide_blocks_per_sm, kRsFp8WideBlockN);
  c.wgmma_rs_unavailable = c.wgmma_rs_block_n == kRsFp8WideBlockN
                               ? wide_rs_unavailable
                               : register_operand_unavailable(desc, unfolded, facts.wgmma_rs_blocks_per_sm);
  c.wgmma_rs_auto_unavailable =
      c.exact_accumulation ? "exact_accumulation = true"
      : !o.tile.automatic() ? fmt::format("overrides.tile = {} pins the FP8 wgmma tile", o.tile.str())
                            : wide_rs_unavailable;
  const bool decode_ok = facts.decode_unavailable.empty(), wgmma_ok = c.wgmma_unavailable.empty();
  MOE_EP_CHECK_CODE(decode_ok || o.gemm != GemmKernel::kDecode, ErrorCode::kUnsupported,
                    "overrides.gemm = decode: the decode GEMMs cannot run this layer: {}",
                    facts.decode_unavailable);
  MOE_EP_CHECK_CODE(wgmma_ok || o.gemm != GemmKernel::kWgmma, ErrorCode::kUnsupported,
                    "overrides.gemm = wgmma: the wgmma GEMMs cannot run this layer: {}",
                    c.wgmma_unavailable);
  MOE_EP_CHECK_CODE(c.wgmma_bf16_unavailable.empty() || o.gemm != GemmKernel::kWgmmaBf16,
                    ErrorCode::kUnsupported,
                    "overrides.gemm = wgmma-bf16: the wgmma-bf16 GEMMs cannot run this layer: {}",
                    c.wgmma_bf16_unavailable);
  MOE_EP_CHECK_CODE(c.wgmma_rs_unavailable.empty() || o.gemm != GemmKernel::kWgmmaRs, ErrorCode::kUnsupported,
                    "overrides.gemm = wgmma-rs: the wgmma-rs GEMMs cannot run this layer: {}",
                    c.wgmma_rs_unavailable);
  auto block_m_of = [&](Sm90Gemm g, int64_t lo, int rs_block_n) {
    switch (g) {
      case Sm90Gemm::kDecode: return kDecodeBlockM;
      case Sm90Gemm::kWgmma: return ts.block_m;
      case Sm90Gemm::kWgmmaBf16: return rs_block_n == kRsWideBlockN ? kRsWideBlockM : kRsBlockM;
      case Sm90Gemm::kWgmmaRs:
        return rs_block_n == kRsFp8WideBlockN ? 64
               : c.wgmma_rs_block_m           ? c.wgmma_rs_block_m
               : lo >= kWgmmaRsWideMinTokens  ? 96
                                              : 64;
      default: return kGemmBlockM;
    }
  };
  // The decode buckets split K up to split_hi: every one when pinned, else (auto) the smallest T
  // where the split kernels fit.
  const int64_t split_hi = c.decode_split ? (*c.decode_split == 2 ? max_tokens : -1)
                                          : (split_unavailable.empty() ? kDecodeSplitMaxTokens : -1);
  // rs_block_n: the n tile of a wgmma-rs bucket, or kRsWideBlockN for wgmma-bf16's four-consumer
  // form (0 for the other families).
  auto bucket = [&](int64_t lo, int64_t hi, Sm90Gemm g, int rs_block_n = 0) {
    if (lo > hi) return;
    if (g == Sm90Gemm::kWgmmaRs && rs_block_n != kRsFp8WideBlockN && c.wgmma_rs_block_m == 0 &&
        lo < kWgmmaRsWideMinTokens && hi >= kWgmmaRsWideMinTokens) {  // two m tiles: one bucket each
      c.buckets.push_back({lo, kWgmmaRsWideMinTokens - 1, g, block_m_of(g, lo, rs_block_n), 1, rs_block_n});
      lo = kWgmmaRsWideMinTokens;
    }
    if (g == Sm90Gemm::kDecode && lo <= split_hi) {  // K split in two up to split_hi
      c.buckets.push_back({lo, std::min(hi, split_hi), g, block_m_of(g, lo, 0), 2});
      lo = split_hi + 1;
      if (lo > hi) return;
    }
    const Sm90Bucket next{lo, hi, g, block_m_of(g, lo, rs_block_n), 1, rs_block_n};
    if (!c.buckets.empty() && c.buckets.back().gemm == g && c.buckets.back().block_m == next.block_m &&
        c.buckets.back().decode_split == 1 && c.buckets.back().block_n == next.block_n &&
        !c.buckets.back().narrow_tails && !c.buckets.back().gemm1_bf16) {
      c.buckets.back().max_tokens = hi;
      return;
    }
    c.buckets.push_back(next);
  };
  switch (o.gemm) {
    case GemmKernel::kDecode: bucket(0, max_tokens, Sm90Gemm::kDecode); return;
    case GemmKernel::kMma: bucket(0, max_tokens, Sm90Gemm::kMma); return;
    case GemmKernel::kWgmma: bucket(0, max_tokens, Sm90Gemm::kWgmma); return;
    case GemmKernel::kWgmmaBf16:
      bucket(0, max_tokens, Sm90Gemm::kWgmmaBf16, c.wgmma_bf16_block_n == kRsWideBlockN ? kRsWideBlockN : 0);
      return;
    case GemmKernel::kWgmmaRs: bucket(0, max_tokens, Sm90Gemm::kWgmmaRs, c.wgmma_rs_block_n); return;
    case GemmKernel::kAuto: break;
  }
  // Auto: decode for small T (mma.sync where the decode kernels cannot run), then mma.sync,
  // then wgmma-rs on 64x256 tiles where they fit, else FP8 wgmma (neither with exact
  // accumulation: mma.sync throughout).
  const int64_t decode_hi = std::min(c.decode_max_tokens, max_tokens);
  bucket(0, decode_hi, decode_ok ? Sm90Gemm::kDecode : Sm90Gemm::kMma);
  const bool use_rs = c.wgmma_rs_auto_unavailable.empty();
  const bool use_wgmma = use_rs || (wgmma_ok && !c.exact_accumulation);
  const int64_t wgmma_lo = use_wgmma ? std::max(c.wgmma_min_tokens, decode_hi + 1) : max_tokens + 1;
  bucket(decode_hi + 1, std::min(wgmma_lo - 1, max_tokens), Sm90Gemm::kMma);
  if (use_rs) {  // narrow tail tiles up to kNarrowTailsMaxRowsPerExpert rows per expert
    const int64_t narrow_hi = std::min(max_tokens, tokens_at_rows_per_expert(desc, kNarrowTailsMaxRowsPerExpert));
    bucket(wgmma_lo, narrow_hi, Sm90Gemm::kWgmmaRs, kRsFp8WideBlockN);
    if (wgmma_lo <= narrow_hi) c.buckets.back().narrow_tails = true;
    // Above: GEMM 1 on bf16 wgmma's 128-token tiles where gemm1_bf16_pays at the bucket's rows per
    // expert (one bucket per run of T with the same answer, T stepping by one row per expert up to
    // kGemm1Bf16RuleMaxRowsPerExpert, above which the answer no longer changes), and only where
    // the layer quantizes x itself.
    const int64_t experts = desc.fleet.num_experts, k = std::max<int64_t>(desc.top_k, 1);
    const int64_t step = std::max<int64_t>(1, experts / k);
    const int64_t walk_end = std::min(max_tokens, tokens_at_rows_per_expert(desc, kGemm1Bf16RuleMaxRowsPerExpert));
    const bool bf16_allowed = facts.gemm1_bf16_128_blocks_per_sm > 0 && c.quantize_input;
    const auto pays = [&](int64_t t) {
      return bf16_allowed &&
             gemm1_bf16_pays(static_cast<double>(t) * static_cast<double>(k) / static_cast<double>(experts));
    };
    for (int64_t lo = std::max(wgmma_lo, narrow_hi + 1); lo <= max_tokens;) {
      const bool bf16 = pays(lo);
      int64_t hi = lo >= walk_end ? max_tokens : lo;
      while (hi < walk_end && pays(std::min(walk_end, hi + step)) == bf16) hi = std::min(walk_end, hi + step);
      while (hi < walk_end && pays(hi + 1) == bf16) ++hi;  // to the exact T where it turns
      if (hi == walk_end && pays(walk_end + 1) == bf16) hi = max_tokens;
      if (bf16) {
        c.buckets.push_back({lo, hi, Sm90Gemm::kWgmmaRs, 64, 1, kRsFp8WideBlockN});
        c.buckets.back().gemm1_bf16 = true;
      } else {
        bucket(lo, hi, Sm90Gemm::kWgmmaRs, kRsFp8WideBlockN);
      }
      lo = hi + 1;
    }
  } else
    bucket(wgmma_lo, max_tokens, Sm90Gemm::kWgmma);
}

}  // namespace

void select_sm90_kernels(Sm90Config& c, const MoeDesc& desc, const KernelOverrides& o,
                         const Sm90Facts& facts) {
  pick_buckets(c, desc, o, facts);
  bool decode = false;  // a bucket of T >= 1 runs the decode GEMMs
  for (const Sm90Bucket& b : c.buckets)
    decode = decode || ((b.gemm == Sm90Gemm::kDecode || b.gemm == Sm90Gemm::kNvfp4Decode) && b.max_tokens >= 1);
  MOE_EP_CHECK_CODE(c.decode_split != 2 || decode, ErrorCode::kUnsupported,
                    "overrides.decode_split_k = 2: no T bucket runs the decode GEMMs it splits (overrides.gemm = "
                    "{}, decode up to T = {})", gemm_kernel_name(o.gemm), c.decode_max_tokens);
  MOE_EP_CHECK_CODE(!c.fuse_combine || decode, ErrorCode::kUnsupported,
                    "overrides.fuse_combine = true: no T bucket runs the decode GEMMs it is fused into "
                    "(overrides.gemm = {}, decode up to T = {})", gemm_kernel_name(o.gemm), c.decode_max_tokens);
}

void Sm90Config::describe(SelectedConfig& out) const {
  const bool mxfp4 = recipe == Recipe::kMxfp4;
  const bool deep = decode_prefetch == kDecodeDeepPrefetch, split = decode_split == 2;
  int64_t split_hi = 0;  // the last T whose decode bucket splits K
  for (const Sm90Bucket& b : buckets)
    if (b.decode_split == 2) split_hi = b.max_tokens;
  const int* decode_per_sm = deep ? facts.decode_deep_blocks_per_sm : facts.decode_blocks_per_sm;
  const std::string split_note =
      split      ? fmt::format("; K split in two per block (overrides.decode_split_k), blocks/SM {} / {}",
                               facts.decode_split_blocks_per_sm[0], facts.decode_split_blocks_per_sm[1])
      : split_hi ? fmt::format("; K split in two per block up to T = {} (auto), blocks/SM {} / {}", split_hi,
                               facts.decode_split_blocks_per_sm[0], facts.decode_split_blocks_per_sm[1])
                 : std::string();
  const std::string decode_line =
      facts.decode_unavailable.empty()
          ? fmt::format("available: 16x128 tiles, auto up to T = {}, {} k steps of weights in flight per warp{}, "
                        "blocks/SM {} / {}{}", decode_max_tokens, decode_prefetch,
                        deep ? " (overrides.decode_prefetch)" : "", decode_per_sm[0], decode_per_sm[1], split_note)
          : "unavailable: " + facts.decode_unavailable;
  auto add_launch_fusions = [&] {
    out.add("combine", fuse_combine
                           ? "inside the decode GEMM 2 (overrides.fuse_combine); a launch of its own after the other GEMMs"
                           : "a launch of its own (inside the decode GEMM 2 by override: overrides.fuse_combine)");
    if (quantize_input)
      out.add("quantize_route", fuse_quantize_route ? *fuse_quantize_route ? "one launch (overrides.fuse_quantize_route)"
                                                                           : "two launches (overrides.fuse_quantize_route)"
                                : mxfp4 ? "one launch in the decode buckets, two elsewhere (auto; "
                                          "overrides.fuse_quantize_route pins either)"
                                        : "two launches (one by override: overrides.fuse_quantize_route)");
  };
  out.add("gemm", requested == GemmKernel::kAuto ? "auto (by T bucket)"
                                                 : fmt::format("{} (overrides.gemm)", gemm_kernel_name(requested)));
  out.add("exact_accumulation", exact_accumulation ? "true" : "false");
  out.add("fast_math", fast_math ? "true" : "false");
  out.add("sm_count", std::to_string(facts.sm_count));
  if (!mxfp4) {
    out.add("gemm_kernels", "f16 mma.sync (e2m1 * e4m3 decoded to f16): 16x128 decode tiles, 64x128x128 tiles");
    // Where the buckets run nvfp4's wgmma kernels, and on which tile.
    const Sm90Bucket* first_wgmma = nullptr;
    int64_t wide_hi = -1;
    for (const Sm90Bucket& b : buckets)
      if (b.gemm == Sm90Gemm::kNvfp4Wgmma) {
        if (first_wgmma == nullptr) first_wgmma = &b;
        if (b.block_n == kRsWideBlockN) wide_hi = b.max_tokens;
      }
    const std::string wgmma_use =
        first_wgmma == nullptr ? "by override (overrides.gemm = wgmma, overrides.tile = 128x128 or 64x256)"
        : requested != GemmKernel::kAuto
            ? fmt::format("every T (overrides.gemm), {} tiles", wide_hi >= 0 ? "64x256" : "128x128")
        : fmt::format("auto from T = {}, {} tiles", first_wgmma->min_tokens, wide_hi >= 0 ? "64x256" : "128x128");
    out.add("wgmma",
            nvfp4_wgmma_unavailable.empty()
                ? fmt::format("{}: f16 wgmma, the weights decoded in registers; blocks/SM {} / {} (128x128), {}",
                              wgmma_use, facts.nvfp4_wgmma_blocks_per_sm[0], facts.nvfp4_wgmma_blocks_per_sm[1],
                              nvfp4_wgmma_wide_unavailable.empty()
                                  ? fmt::format("{} / {} (64x256, four consumers)",
                                                facts.nvfp4_wgmma_wide_blocks_per_sm[0],
                                                facts.nvfp4_wgmma_wide_blocks_per_sm[1])
                                  : "64x256 unavailable: " + nvfp4_wgmma_wide_unavailable)
                : "unavailable: " + nvfp4_wgmma_unavailable);
    out.add("mma", fmt::format("64x128x128 tiles, blocks/SM {} / {}", facts.mma_blocks_per_sm[0],
                               facts.mma_blocks_per_sm[1]));
    out.add("decode", decode_line);
    add_launch_fusions();
    return;
  }
  out.add("fold_fp8", fmt::format("{} (W13 {}, W2 {})", fold ? "on" : "off",
                                  facts.w13_folded ? "folded" : "E8M0 block scales",
                                  facts.w2_folded ? "folded" : "E8M0 block scales"));
  out.add("decode", decode_line);
  add_launch_fusions();
  const WgmmaTileShape ts = wgmma_tile_shape(wgmma_tile);
  int64_t rs_auto_from = 0, wgmma_auto_from = 0;  // the first T auto runs them at (0: none)
  int64_t narrow_to = 0;                           // the last T of narrow tail tiles
  std::string bf16_gemm1_at;                       // the T ranges of GEMM 1 on bf16 128x256 tiles
  if (requested == GemmKernel::kAuto)
    for (const Sm90Bucket& b : buckets) {
      if (b.narrow_tails) narrow_to = b.max_tokens;
      if (b.gemm1_bf16)
        bf16_gemm1_at += fmt::format("{}{}..{}", bf16_gemm1_at.empty() ? "" : ", ", b.min_tokens, b.max_tokens);
      if (b.gemm == Sm90Gemm::kWgmmaRs && !rs_auto_from) rs_auto_from = std::max<int64_t>(b.min_tokens, 1);
      if (b.gemm == Sm90Gemm::kWgmma && !wgmma_auto_from) wgmma_auto_from = std::max<int64_t>(b.min_tokens, 1);
    }
  const bool by_t = requested == GemmKernel::kAuto;  // the auto notes below apply
  const std::string wgmma_auto =
      !by_t                ? ""
      : wgmma_auto_from    ? fmt::format(", auto from T = {}", wgmma_auto_from)
      : rs_auto_from       ? ", by override (overrides.gemm = wgmma; auto takes wgmma-rs)"
      : exact_accumulation ? ", not in auto (exact_accumulation)"
                           : ", not in auto (no T bucket of this layer above the decode ones)";
  out.add("wgmma", wgmma_unavailable.empty()
                       ? fmt::format("available: {}x{} tiles{}, blocks/SM {} / {}", ts.block_m, ts.block_n,
                                     wgmma_auto, facts.wgmma_blocks_per_sm[0], facts.wgmma_blocks_per_sm[1])
                       : "unavailable: " + wgmma_unavailable);
  const bool bf16_wide = wgmma_bf16_block_n == kRsWideBlockN;
  const int* bf16_per_sm = bf16_wide ? facts.wgmma_bf16_wide_blocks_per_sm : facts.wgmma_bf16_blocks_per_sm;
  out.add("wgmma_bf16", wgmma_bf16_unavailable.empty()
                            ? fmt::format("available by override (overrides.gemm = wgmma-bf16): {} tiles{}, "
                                          "blocks/SM {} / {}",
                                          bf16_wide ? fmt::format("{}x{}", kRsWideBlockM, kRsWideBlockN)
                                                    : fmt::format("{}x128", kRsBlockM),
                                          bf16_wide ? " (four consumer warpgroups)" : "", bf16_per_sm[0],
                                          bf16_per_sm[1])
                            : "unavailable: " + wgmma_bf16_unavailable);
  const int* rs_per_sm =
      wgmma_rs_block_n == kRsFp8WideBlockN ? facts.wgmma_rs_wide_blocks_per_sm : facts.wgmma_rs_blocks_per_sm;
  const std::string rs_auto =
      rs_auto_from ? fmt::format("auto from T = {} on 64x256 tiles (four consumer warpgroups, blocks/SM {} / {}{}{}); ",
                                 rs_auto_from, facts.wgmma_rs_wide_blocks_per_sm[0], facts.wgmma_rs_wide_blocks_per_sm[1],
                                 narrow_to ? fmt::format(", tiles of <= 48 rows on n48 after the others up to T = {}", narrow_to) : "",
                                 bf16_gemm1_at.empty() ? ""
                                                       : fmt::format(", GEMM 1 on bf16 wgmma over 128x256 tiles (blocks/SM {}) at T = {}",
                                                                     facts.gemm1_bf16_128_blocks_per_sm, bf16_gemm1_at))
                   : !by_t || wgmma_rs_auto_unavailable.empty() ? std::string()
                                                       : fmt::format("not in auto ({}); ", wgmma_rs_auto_unavailable);
  out.add("wgmma_rs", wgmma_rs_unavailable.empty()
                          ? fmt::format("{}available by override (overrides.gemm = wgmma-rs): {} tiles, blocks/SM {} / {}",
                                        rs_auto,
                                        wgmma_rs_block_m ? fmt::format("{}x{}", wgmma_rs_block_m, wgmma_rs_block_n)
                                                         : fmt::format("64x128 (96x128 from T = {})", kWgmmaRsWideMinTokens),
                                        rs_per_sm[0], rs_per_sm[1])
                          : fmt::format("{}unavailable: {}", rs_auto, wgmma_rs_unavailable));
  out.add("mma", fmt::format("64x128x128 tiles, blocks/SM {} / {}", facts.mma_blocks_per_sm[0],
                             facts.mma_blocks_per_sm[1]));
}

}  // namespace moe_ep::cuda
