#include "cuda/policy/sm90_forms.h"

#include <fmt/format.h>

#include "core/check.h"
#include "cuda/policy/sm90_tiles.h"

namespace moe_ep::cuda {
namespace {

using F = Sm90Form;
using G = GemmKernel;
constexpr Recipe kMx = Recipe::kMxfp4, kNv = Recipe::kNvfp4;

// clang-format off
constexpr std::array<Sm90FormInfo, kSm90FormCount> kForms = {{
  // form                name                              recipe family      mainloop                                                  operands
  //   block_m        list_block_m   block_n            cons split tails persist gemm2 folded exact  x16    h16    whole
  {F::kMxfp4Decode,      "mxfp4.decode.16x128",            kMx, G::kDecode, "mma.sync, weights on the m side streamed into registers", "e4m3 x e2m1 (E8M0 or folded scales)",
     kDecodeBlockM,  kDecodeBlockM, kDecodeBlockN,      0, 1, false, false, true, false, true,  false, false, false},
  {F::kMxfp4DecodeSplit, "mxfp4.decode-split.16x64",       kMx, G::kDecode, "the decode mainloop, K in two halves per block",          "e4m3 x e2m1 (E8M0 or folded scales)",
     kDecodeBlockM,  kDecodeBlockM, kDecodeSplitBlockN, 0, 2, false, false, true, false, false, false, false, false},
  {F::kMxfp4DecodeWgmma, "mxfp4.decode-wgmma.16x128",      kMx, G::kDecodeWgmma, "the decode tiles and weight stream, each k32 block on an m64 n8 / n16 FP8 wgmma, weights decoded into the register A operand", "e4m3 x e4m3 (E8M0 or folded scales)",
     kDecodeBlockM,  kDecodeBlockM, kDecodeBlockN,      2, 1, false, false, true, false, false, false, false, false},
  {F::kMxfp4DecodeWgmmaSplit, "mxfp4.decode-wgmma-split.16x64", kMx, G::kDecodeWgmma, "the decode-wgmma mainloop, K in two halves per block", "e4m3 x e4m3 (E8M0 or folded scales)",
     kDecodeBlockM,  kDecodeBlockM, kDecodeSplitBlockN, 2, 2, false, false, true, false, false, false, false, false},
  {F::kMxfp4Mma,         "mxfp4.mma.64x128",               kMx, G::kMma,    "mma.sync, both operands through shared memory",           "e4m3 x e2m1 (E8M0 or folded scales)",
     kGemmBlockM,    kGemmBlockM,   kGemmBlockN,        0, 1, false, true,  true, false, true,  false, false, false},
  {F::kMxfp4WgmmaFp8,    "mxfp4.wgmma-fp8.64x256",         kMx, G::kWgmma,  "FP8 wgmma, weights decoded to shared memory by the producer", "e4m3 x e4m3 (folded)",
     kWgmmaBlockM,   kWgmmaBlockM,  kWgmmaBlockN,       2, 1, false, true,  true, true,  false, false, false, false},
  {F::kMxfp4RsFp8,       "mxfp4.rs-fp8.64x256",            kMx, G::kWgmmaRs, "FP8 wgmma, weights decoded into the register A operand", "e4m3 x e4m3 (folded)",
     kRsWideBlockM,  kRsWideBlockM, kRsFp8WideBlockN,   4, 1, false, true,  true, true,  false, false, false, false},
  {F::kMxfp4RsFp8Tails,  "mxfp4.rs-fp8-tails.64x256",      kMx, G::kAuto,   "rs-fp8, an expert's last tile of <= 48 rows on n48 after the others", "e4m3 x e4m3 (folded)",
     kRsWideBlockM,  kRsWideBlockM, kRsFp8WideBlockN,   4, 1, true,  true,  true, true,  false, false, false, false},
  {F::kMxfp4RsBf16Pairs, "mxfp4.rs-bf16-pairs.128x256",    kMx, G::kAuto,   "bf16 wgmma, weights decoded into registers; an expert's pairs of list tiles as 128-token tiles, its odd last tile after", "bf16 x bf16 (folded)",
     kRsWide128BlockM, kRsWideBlockM, kRsWideBlockN,    4, 1, false, true,  false, true, false, true,  false, false},
  {F::kMxfp4OneToken,    "mxfp4.one-token.1x16",           kMx, G::kAuto,   "the layer of one token in two launches: mma.sync on the token, W2 copied to shared memory while W13 streams", "e4m3 x e2m1 (E8M0 or folded scales)",
     1,              1,             16,                 0, 1, false, true,  true, false, true,  false, false, true},
  {F::kNvfp4Decode,      "nvfp4.decode.16x128",            kNv, G::kDecode, "f16 mma.sync, weights on the m side decoded in registers", "f16 x f16 (e2m1 x e4m3, exact)",
     kDecodeBlockM,  kDecodeBlockM, kDecodeBlockN,      0, 1, false, false, true, false, true,  false, false, false},
  {F::kNvfp4DecodeSplit, "nvfp4.decode-split.16x64",       kNv, G::kDecode, "the decode mainloop, K in two halves per block",          "f16 x f16 (e2m1 x e4m3, exact)",
     kDecodeBlockM,  kDecodeBlockM, kDecodeSplitBlockN, 0, 2, false, false, true, false, false, false, false, false},
  {F::kNvfp4Mma,         "nvfp4.mma.64x128",               kNv, G::kMma,    "f16 mma.sync, both operands decoded from shared memory",  "f16 x f16 (e2m1 x e4m3, exact)",
     kGemmBlockM,    kGemmBlockM,   kGemmBlockN,        0, 1, false, true,  true, false, true,  false, false, false},
  {F::kNvfp4RsF16,       "nvfp4.rs-f16.128x128",           kNv, G::kWgmma,  "f16 wgmma, weights decoded into the register A operand", "f16 x f16 (e2m1 x e4m3, exact)",
     kRsBlockM,      kRsBlockM,     kRsBlockN,          2, 1, false, true,  true, false, false, true,  true, false},
  {F::kNvfp4RsF16Wide,   "nvfp4.rs-f16.64x256",            kNv, G::kWgmma,  "f16 wgmma, weights decoded into the register A operand", "f16 x f16 (e2m1 x e4m3, exact)",
     kRsWideBlockM,  kRsWideBlockM, kRsWideBlockN,      4, 1, false, true,  true, false, false, true,  true, false},
}};
// clang-format on

constexpr bool table_in_enum_order() {
  for (int i = 0; i < kSm90FormCount; ++i)
    if (static_cast<int>(kForms[i].form) != i) return false;
  return true;
}
static_assert(table_in_enum_order(), "sm90_forms(): one row per Sm90Form, in enum order");

std::string tile_str(const Sm90FormInfo& f) { return fmt::format("{}x{}", f.block_m, f.block_n); }

}  // namespace

const std::array<Sm90FormInfo, kSm90FormCount>& sm90_forms() { return kForms; }

const Sm90FormInfo& sm90_form(Sm90Form form) { return kForms[static_cast<int>(form)]; }

std::string_view sm90_form_name(Sm90Form form) { return sm90_form(form).name; }

std::optional<Sm90Form> parse_sm90_form(std::string_view name) {
  for (const Sm90FormInfo& f : kForms)
    if (f.name == name) return f.form;
  return std::nullopt;
}

std::string sm90_form_unavailable(Sm90Form form, const MoeDesc& desc, const Sm90Facts& facts, bool fold) {
  const Sm90FormInfo& f = sm90_form(form);
  const int64_t H = desc.fleet.hidden_size, I = desc.intermediate_size;
  if (f.recipe != desc.recipe) return fmt::format("a form of recipe '{}'", recipe_name(f.recipe));
  if (f.exact == false && desc.numerics.exact_accumulation)
    return f.consumers == 0 ? "it adds the K halves' fp32 sums, so it is not bitwise the CPU layer (exact_accumulation)"
                            : "its wgmma accumulator is not fp32-exact per k block (exact_accumulation)";
  if (f.whole_layer) {
    if (!desc.quantize_input)
      return "x comes quantized (desc.quantize_input = false, or the local experts of an expert-parallel rank)";
    if (H % 128 != 0 || I % 128 != 0)
      return fmt::format("hidden = {} and intermediate = {} must be multiples of 128", H, I);
    if (desc.top_k > kOneTokenMaxTopK)
      return fmt::format("top_k = {}: its down kernel keeps at most {} slots", desc.top_k, kOneTokenMaxTopK);
    if (facts.per_sm(form, 0) < 1)
      return facts.one_token_groups > 0
                 ? fmt::format("its down kernel's {} groups of 16 W2 rows x I per block and its gate_up kernel do "
                               "not fit on one SM together", facts.one_token_groups * desc.top_k)
                 : "its kernels do not fit on this device";
    return "";
  }
  if (f.folded_only && (!facts.w13_folded || !facts.w2_folded))
    return fold ? "the weights are not inside the FP8 window (docs/spec.md), so they are not folded"
                : "folding is off (overrides.fold_fp8 = false)";
  const bool decode = sm90_decode_family(f.family);
  if (decode && !facts.decode_unavailable.empty()) return facts.decode_unavailable;
  if (f.k_split > 1) {
    if (f.recipe == Recipe::kMxfp4 && (H % 1024 != 0 || I % 1024 != 0))
      return fmt::format("each half of K must be whole 512-wide chunks; hidden = {} and intermediate = {} must be "
                         "multiples of 1024", H, I);
    if (f.recipe == Recipe::kNvfp4 && (H % 256 != 0 || I % 256 != 0 || H < 512 || I < 512))
      return fmt::format("each half of K must be whole 128-wide k steps and the tile's A rows must hold the halves' "
                         "hand-over; hidden = {} and intermediate = {} must be multiples of 256, at least 512", H, I);
  }
  if (!decode && (H % f.block_n != 0 || (2 * I) % f.block_n != 0))
    return fmt::format("hidden = {} and 2 * intermediate = {} must be multiples of {}", H, 2 * I, f.block_n);
  if (facts.per_sm(form, 0) < 1 || (f.has_gemm2 && facts.per_sm(form, 1) < 1))
    return "its kernels do not fit on this device";
  return "";
}

std::optional<Sm90Form> sm90_family_form(Recipe recipe, GemmKernel family, TileShape tile) {
  for (const Sm90FormInfo& f : kForms)
    if (f.recipe == recipe && f.family == family && f.k_split == 1 &&
        (tile.automatic() || tile == TileShape{f.block_m, f.block_n}))
      return f.form;
  return std::nullopt;
}

std::string sm90_family_tiles(Recipe recipe, GemmKernel family) {
  std::string out;
  for (const Sm90FormInfo& f : kForms)
    if (f.recipe == recipe && f.family == family && f.k_split == 1 && !sm90_decode_family(family))
      out += (out.empty() ? "" : ", ") + tile_str(f);
  return out;
}

std::string sm90_form_table_markdown() {
  std::string out =
      "| form | GEMMs | mainloop | operands | tile | consumers | pinned by | exact |\n"
      "|---|---|---|---|---|---|---|---|\n";
  for (const Sm90FormInfo& f : kForms)
    out += fmt::format("| `{}` | {} | {}{} | {} | {} token{} x {} rows{} | {} | {} | {} |\n", f.name,
                       f.has_gemm2 ? "1, 2" : "1", f.mainloop,
                       f.persistent ? "; persistent" : "", f.operands, f.block_m, f.block_m == 1 ? "" : "s", f.block_n,
                       f.list_block_m != f.block_m ? fmt::format(" (list tiles of {})", f.list_block_m) : "",
                       f.consumers == 0 ? "-" : std::to_string(f.consumers),
                       f.whole_layer                  ? "`one_token_layer = true`"
                       : f.family == GemmKernel::kAuto ? "auto only"
                                                     : fmt::format("`gemm = {}`", gemm_kernel_name(f.family)),
                       f.exact ? "yes" : "no");
  return out;
}

}  // namespace moe_ep::cuda
