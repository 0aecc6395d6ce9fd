#include "cuda/policy/sm90_config.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include <fmt/format.h>

#include "core/check.h"

namespace moe_ep::cuda {
namespace {

using F = Sm90Form;

// The T at which the experts hold `rows` rows each on average (T * top_k / E, E the global experts).
int64_t tokens_at_rows_per_expert(const MoeDesc& desc, int64_t rows) {
  return rows * desc.fleet.num_experts / std::max<int64_t>(desc.top_k, 1);
}

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

// The forms of a recipe's families: decode, decode-split, mma, and the wgmma forms. mxfp4's decode
// pair: decode-wgmma's where pinned, or under auto where it can run (it streams the weights with
// fewer instructions; not where exact_accumulation holds), else mma.sync's.
struct RecipeForms {
  F decode, split, mma;
};
RecipeForms recipe_forms(const Sm90Config& c) {
  if (c.recipe == Recipe::kNvfp4) return {F::kNvfp4Decode, F::kNvfp4DecodeSplit, F::kNvfp4Mma};
  const bool wgmma = c.requested == GemmKernel::kDecodeWgmma ||
                     (c.requested == GemmKernel::kAuto && c.available(F::kMxfp4DecodeWgmma));
  return wgmma ? RecipeForms{F::kMxfp4DecodeWgmma, F::kMxfp4DecodeWgmmaSplit, F::kMxfp4Mma}
               : RecipeForms{F::kMxfp4Decode, F::kMxfp4DecodeSplit, F::kMxfp4Mma};
}

// Appends buckets in T order, each from the end of the one before; empty ones are left out, and
// one running the same forms as the last is merged into it.
class BucketList {
 public:
  BucketList(std::vector<Sm90Bucket>& out, int64_t max_tokens) : out_(out), max_tokens_(max_tokens) {}
  void add(int64_t hi, F gemm1, F gemm2) {
    const int64_t lo = next();
    hi = std::min(hi, max_tokens_);
    if (hi < lo) return;
    if (!out_.empty() && out_.back().gemm1 == gemm1 && out_.back().gemm2 == gemm2) {
      out_.back().max_tokens = hi;
      return;
    }
    out_.push_back({lo, hi, gemm1, gemm2});
  }
  void add(int64_t hi, F form) { add(hi, form, form); }
  // Decode forms up to `hi`, K split in two up to split_hi.
  void add_decode(int64_t hi, const RecipeForms& r, int64_t split_hi) {
    add(std::min(hi, split_hi), r.split);
    add(hi, r.decode);
  }
  int64_t next() const { return out_.empty() ? 0 : out_.back().max_tokens + 1; }

 private:
  std::vector<Sm90Bucket>& out_;
  int64_t max_tokens_;
};

void pick_buckets(Sm90Config& c, const MoeDesc& desc, const KernelOverrides& o) {
  const int64_t max_tokens = desc.fleet.max_tokens_per_rank;
  const bool mxfp4 = desc.recipe == Recipe::kMxfp4;
  const RecipeForms r = recipe_forms(c);
  c.buckets.clear();
  BucketList list(c.buckets, max_tokens);

  // The split decode forms: every decode bucket when pinned, else (auto) up to kDecodeSplitMaxTokens
  // where they can run.
  MOE_EP_CHECK_CODE(c.decode_split != 2 || c.available(r.split), ErrorCode::kUnsupported,
                    "overrides.decode_split_k = 2: {} cannot run this layer: {}", sm90_form_name(r.split), c.reason(r.split));
  const int64_t split_hi = c.decode_split ? (*c.decode_split == 2 ? max_tokens : -1)
                                          : (c.available(r.split) ? kDecodeSplitMaxTokens : -1);
  if (c.requested != GemmKernel::kAuto) {
    // select_sm90_load_config checked that the recipe has this family (and tile).
    const F form = *sm90_family_form(c.recipe, c.requested, c.tile);
    MOE_EP_CHECK_CODE(c.available(form), ErrorCode::kUnsupported, "overrides.gemm = {}{}: {} cannot run this layer: {}",
                      gemm_kernel_name(c.requested),
                      c.tile.automatic() ? std::string() : fmt::format(", overrides.tile = {}", c.tile.str()),
                      sm90_form_name(form), c.reason(form));
    if (form == r.decode)
      list.add_decode(max_tokens, r, split_hi);
    else
      list.add(max_tokens, form);
    return;
  }

  if (!mxfp4) {
    // nvfp4: decode up to decode_max_tokens (mma.sync where it cannot run), the f16 wgmma forms
    // from nvfp4_wgmma_min_tokens (the default decode end then moves below it; an overridden
    // decode_max_tokens moves the decode end alone, wgmma from the later of the two), mma.sync
    // between; the 64x256 wgmma form where it fits, else 128x128.
    const int64_t decode_hi = c.available(r.decode) ? std::min(c.decode_max_tokens, max_tokens) : -1;
    const bool wgmma = c.available(F::kNvfp4RsF16);
    const int64_t wgmma_lo = !wgmma                ? max_tokens + 1
                             : o.decode_max_tokens ? std::max(nvfp4_wgmma_min_tokens(desc), decode_hi + 1)
                                                   : nvfp4_wgmma_min_tokens(desc);
    if (wgmma && !o.decode_max_tokens) c.decode_max_tokens = std::min(c.decode_max_tokens, wgmma_lo - 1);
    list.add_decode(std::min(decode_hi, wgmma_lo - 1), r, split_hi);
    list.add(wgmma_lo - 1, r.mma);
    list.add(max_tokens, c.available(F::kNvfp4RsF16Wide) ? F::kNvfp4RsF16Wide : F::kNvfp4RsF16);
    return;
  }

  // mxfp4: decode for small T (mma.sync where it cannot run), then mma.sync, then rs-fp8 where it
  // can run (its tails form up to kNarrowTailsMaxRowsPerExpert rows per expert, GEMM 1 on the bf16
  // pairs form where gemm1_bf16_pays), else FP8 wgmma; with exact accumulation mma.sync throughout.
  // T = 1: the one-token layer where it can run (as pinned, else up to kOneTokenAutoMaxWeightBytes
  // unless the decode split is pinned: then the decode forms run every decode bucket), then the
  // decode forms.
  const Sm90Form one_token = Sm90Form::kMxfp4OneToken;
  MOE_EP_CHECK_CODE(!c.one_token_layer.value_or(false) || c.available(one_token), ErrorCode::kUnsupported,
                    "overrides.one_token_layer = true: {} cannot run this layer: {}", sm90_form_name(one_token),
                    c.reason(one_token));
  const bool one_token_auto =
      !c.decode_split.has_value() && one_token_weight_bytes(desc) <= kOneTokenAutoMaxWeightBytes;
  if (c.one_token_layer.value_or(one_token_auto) && c.available(one_token))
    list.add(1, one_token);
  const int64_t decode_hi = std::min(c.decode_max_tokens, max_tokens);
  if (c.available(r.decode))
    list.add_decode(decode_hi, r, split_hi);
  else
    list.add(decode_hi, r.mma);
  const bool use_rs = c.available(F::kMxfp4RsFp8);
  const bool use_wgmma = use_rs || c.available(F::kMxfp4WgmmaFp8);
  const int64_t wgmma_lo = use_wgmma ? std::max(kWgmmaMinTokens, decode_hi + 1) : max_tokens + 1;
  list.add(wgmma_lo - 1, r.mma);
  if (!use_rs) {
    list.add(max_tokens, F::kMxfp4WgmmaFp8);
    return;
  }
  list.add(tokens_at_rows_per_expert(desc, kNarrowTailsMaxRowsPerExpert),
           c.available(F::kMxfp4RsFp8Tails) ? F::kMxfp4RsFp8Tails : F::kMxfp4RsFp8);
  // Above: one bucket per run of T with the same answer of gemm1_bf16_pays, T stepping by one row
  // per expert up to kGemm1Bf16RuleMaxRowsPerExpert, above which the answer no longer changes.
  const int64_t experts = desc.fleet.num_experts, k = std::max<int64_t>(desc.top_k, 1);
  const int64_t step = std::max<int64_t>(1, experts / k);
  const int64_t walk_end = std::min(max_tokens, tokens_at_rows_per_expert(desc, kGemm1Bf16RuleMaxRowsPerExpert));
  const bool bf16_allowed = c.available(F::kMxfp4RsBf16Pairs) && c.quantize_input;
  const auto pays = [&](int64_t t) {
    return bf16_allowed &&
           gemm1_bf16_pays(static_cast<double>(t) * static_cast<double>(k) / static_cast<double>(experts));
  };
  for (int64_t lo = list.next(); lo <= max_tokens; lo = list.next()) {
    const bool bf16 = pays(lo);
    int64_t hi = lo >= walk_end ? max_tokens : lo;
    while (hi < walk_end && pays(std::min(walk_end, hi + step)) == bf16) hi = std::min(walk_end, hi + step);
    while (hi < walk_end && pays(hi + 1) == bf16) ++hi;  // to the exact T where it turns
    if (hi == walk_end && pays(walk_end + 1) == bf16) hi = max_tokens;
    list.add(hi, bf16 ? F::kMxfp4RsBf16Pairs : F::kMxfp4RsFp8, F::kMxfp4RsFp8);
  }
}

// "1..640, 2731..4012": the T ranges where `uses` holds of a bucket (neighbours joined; T = 0 reads
// as 1).
template <class Uses>
std::string ranges_where(const std::vector<Sm90Bucket>& buckets, Uses&& uses) {
  std::vector<std::pair<int64_t, int64_t>> ranges;
  for (const Sm90Bucket& b : buckets) {
    if (!uses(b) || b.max_tokens < 1) continue;
    if (!ranges.empty() && ranges.back().second + 1 == b.min_tokens)
      ranges.back().second = b.max_tokens;
    else
      ranges.emplace_back(std::max<int64_t>(1, b.min_tokens), b.max_tokens);
  }
  std::string out;
  for (const auto& [lo, hi] : ranges) out += fmt::format("{}{}..{}", out.empty() ? "" : ", ", lo, hi);
  return out;
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

int64_t one_token_weight_bytes(const MoeDesc& desc) {
  const int64_t H = desc.fleet.hidden_size, I = desc.intermediate_size;
  return desc.top_k * 3 * H * I * 17 / 32;  // e2m1 codes (1/2 byte) and one E8M0 byte per 32
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
  if (sm90_form(b.gemm1).whole_layer) return false;  // it quantizes x itself
  return quantize_input && fuse_quantize_route.value_or(recipe == Recipe::kMxfp4 &&
                                                        sm90_decode_family(sm90_form(b.gemm1).family));
}

bool Sm90Config::uses_16bit_activations() const {
  for (const Sm90Bucket& b : buckets)
    if (sm90_form(b.gemm2).h_16bit) return true;
  return false;
}

bool Sm90Config::uses_one_token_layer() const {
  for (const Sm90Bucket& b : buckets)
    if (sm90_form(b.gemm1).whole_layer) return true;
  return false;
}

Sm90Config select_sm90_load_config(const MoeDesc& desc, const KernelOverrides& o) {
  Sm90Config c;
  c.recipe = desc.recipe;
  c.requested = o.gemm;
  c.tile = o.tile;
  c.exact_accumulation = desc.numerics.exact_accumulation;
  c.fast_math = desc.numerics.fast_math;
  c.quantize_input = desc.quantize_input;
  const bool mxfp4 = desc.recipe == Recipe::kMxfp4;
  c.decode_max_tokens = mxfp4 ? mxfp4_decode_max_tokens(desc) : kNvfp4DecodeMaxTokens;
  // A family is pinnable for a recipe where the table has a form of it.
  std::string families = "auto";
  for (const GemmKernel g :
       {GemmKernel::kDecode, GemmKernel::kMma, GemmKernel::kWgmma, GemmKernel::kWgmmaRs, GemmKernel::kDecodeWgmma})
    if (sm90_family_form(desc.recipe, g)) fmt::format_to(std::back_inserter(families), ", {}", gemm_kernel_name(g));
  MOE_EP_CHECK_CODE(o.gemm == GemmKernel::kAuto || sm90_family_form(desc.recipe, o.gemm), ErrorCode::kUnsupported, "overrides.gemm = {}: recipe '{}' has no such kernel "
                    "family on SM90; allowed: {}", gemm_kernel_name(o.gemm), recipe_name(desc.recipe), families);
  const bool warpgroup = o.gemm == GemmKernel::kWgmma || o.gemm == GemmKernel::kWgmmaRs;
  MOE_EP_CHECK_CODE(!((warpgroup || o.gemm == GemmKernel::kDecodeWgmma) && c.exact_accumulation),
                    ErrorCode::kInvalidArgument,
                    "overrides.gemm = {} contradicts desc.numerics.exact_accumulation = true (the "
                    "wgmma accumulator is not fp32-exact per k block); allowed with it: auto, decode, mma",
                    gemm_kernel_name(o.gemm));
  if (o.fold_fp8) c.fold = *o.fold_fp8;
  MOE_EP_CHECK_CODE(c.fold || !warpgroup || !mxfp4, ErrorCode::kUnsupported,
                    "overrides.gemm = {} needs folded weights; overrides.fold_fp8 = false keeps "
                    "E8M0 block scales", gemm_kernel_name(o.gemm));
  if (!o.tile.automatic()) {
    const std::string tiles = sm90_family_tiles(desc.recipe, o.gemm);
    MOE_EP_CHECK_CODE(warpgroup && !tiles.empty(), ErrorCode::kUnsupported,
                      "overrides.tile = {}: a tile is pinned together with overrides.gemm = wgmma or wgmma-rs "
                      "(overrides.gemm = {})", o.tile.str(), gemm_kernel_name(o.gemm));
    MOE_EP_CHECK_CODE(sm90_family_form(desc.recipe, o.gemm, o.tile).has_value(), ErrorCode::kUnsupported, "overrides.tile = {} is not a tile of {} for recipe '{}' on "
                      "SM90; allowed: {}", o.tile.str(), gemm_kernel_name(o.gemm), recipe_name(desc.recipe), tiles);
  }
  if (o.decode_max_tokens) {
    MOE_EP_CHECK(*o.decode_max_tokens >= 0, "overrides.decode_max_tokens = {} is invalid; expected "
                 ">= 0 tokens", *o.decode_max_tokens);
    c.decode_max_tokens = *o.decode_max_tokens;
  }
  if (o.decode_split_k) {
    MOE_EP_CHECK(*o.decode_split_k == 1 || *o.decode_split_k == 2,
                 "overrides.decode_split_k = {} is invalid; expected 1 or 2 parts", *o.decode_split_k);
    c.decode_split = *o.decode_split_k;
  }
  MOE_EP_CHECK_CODE(!o.fuse_quantize_route.value_or(false) || desc.quantize_input, ErrorCode::kUnsupported,
                    "overrides.fuse_quantize_route = true: this layer does not quantize x "
                    "(desc.quantize_input = false, or the local experts of an expert-parallel rank)");
  c.fuse_quantize_route = o.fuse_quantize_route;
  MOE_EP_CHECK_CODE(!o.one_token_layer.value_or(false) || (mxfp4 && desc.quantize_input && o.gemm == GemmKernel::kAuto),
                    ErrorCode::kUnsupported,
                    "overrides.one_token_layer = true: the one-token layer runs the mxfp4 recipe on a layer that "
                    "quantizes x, with overrides.gemm = auto (recipe '{}', quantize_input = {}, gemm = {})",
                    recipe_name(desc.recipe), desc.quantize_input, gemm_kernel_name(o.gemm));
  c.one_token_layer = o.one_token_layer;
  return c;
}

void select_sm90_kernels(Sm90Config& c, const MoeDesc& desc, const KernelOverrides& o, const Sm90Facts& facts) {
  c.facts = facts;
  for (const Sm90FormInfo& f : sm90_forms())
    c.unavailable[static_cast<int>(f.form)] = sm90_form_unavailable(f.form, desc, facts, c.fold);
  pick_buckets(c, desc, o);
  bool decode = false;  // a bucket of T >= 1 runs the decode forms
  for (const Sm90Bucket& b : c.buckets)
    decode = decode || (sm90_decode_family(sm90_form(b.gemm1).family) && b.max_tokens >= 1);
  MOE_EP_CHECK_CODE(c.decode_split != 2 || decode, ErrorCode::kUnsupported,
                    "overrides.decode_split_k = 2: no T bucket runs the decode GEMMs it splits (overrides.gemm = "
                    "{}, decode up to T = {})", gemm_kernel_name(o.gemm), c.decode_max_tokens);
}

void Sm90Config::describe(SelectedConfig& out) const {
  out.add("gemm", requested == GemmKernel::kAuto
                      ? "auto (by T bucket)"
                      : fmt::format("{}{} (overrides)", gemm_kernel_name(requested),
                                    tile.automatic() ? std::string() : fmt::format(" {}", tile.str())));
  out.add("exact_accumulation", exact_accumulation ? "true" : "false");
  out.add("fast_math", fast_math ? "true" : "false");
  out.add("sm_count", std::to_string(facts.sm_count));
  if (recipe == Recipe::kMxfp4)
    out.add("fold_fp8", fmt::format("{} (W13 {}, W2 {})", fold ? "on" : "off",
                                    facts.w13_folded ? "folded" : "E8M0 block scales",
                                    facts.w2_folded ? "folded" : "E8M0 block scales"));
  out.add("decode_max_tokens", std::to_string(decode_max_tokens));
  if (quantize_input) {
    const std::string fused = ranges_where(buckets, [&](const Sm90Bucket& b) { return fuses_quantize_route(b); });
    out.add("quantize_route", fused.empty() ? "two launches" : fmt::format("one launch at T = {}", fused));
  }
  // One entry per form of the recipe (the table's rows): where it runs, its occupancy, or why not.
  for (const Sm90FormInfo& f : sm90_forms()) {
    if (f.recipe != recipe) continue;
    const std::string& why = reason(f.form);
    const std::string gemm1_at = ranges_where(buckets, [&](const Sm90Bucket& b) { return b.gemm1 == f.form; });
    const std::string gemm2_at = ranges_where(buckets, [&](const Sm90Bucket& b) { return b.gemm2 == f.form; });
    const std::string at = gemm1_at == gemm2_at ? (gemm1_at.empty() ? "" : fmt::format("T = {}", gemm1_at))
                           : gemm2_at.empty()   ? fmt::format("GEMM 1 at T = {}", gemm1_at)
                           : gemm1_at.empty()   ? fmt::format("GEMM 2 at T = {}", gemm2_at)
                                                : fmt::format("GEMM 1 at T = {}; GEMM 2 at T = {}", gemm1_at, gemm2_at);
    const std::string per_sm = f.has_gemm2 ? fmt::format("blocks/SM {} / {}", facts.per_sm(f.form, 0),
                                                         facts.per_sm(f.form, 1))
                                           : fmt::format("blocks/SM {}", facts.per_sm(f.form, 0));
    out.add(std::string(f.name), !why.empty() ? "unavailable: " + why
                                 : at.empty() ? fmt::format("available, not selected; {}", per_sm)
                                              : fmt::format("{}; {}", at, per_sm));
  }
}

}  // namespace moe_ep::cuda
