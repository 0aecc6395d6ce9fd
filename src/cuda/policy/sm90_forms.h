// The kernel forms of the SM90 backend: every expert GEMM kernel the backend can launch is one
// row of one table (sm90_forms.cpp), named, printable and parseable. A row says what the form is
// (recipe, mainloop, tile, consumers, K split, tails, operands) and what it needs; the selection
// policy (sm90_config.h) picks forms per T bucket from these rows alone, and the CUDA side
// (sm90_form_kernels.h) holds each row's configure / launch functions. Host-only: no CUDA header.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "moe_ep/desc.h"
#include "moe_ep/kernel_config.h"
#include "moe_ep/recipe.h"

namespace moe_ep::cuda {

// One value per row of the table, in table order.
enum class Sm90Form : uint8_t {
  kMxfp4Decode,
  kMxfp4DecodeSplit,
  kMxfp4DecodeWgmma,
  kMxfp4DecodeWgmmaSplit,
  kMxfp4Mma,
  kMxfp4WgmmaFp8,
  kMxfp4RsFp8,
  kMxfp4RsFp8Tails,
  kMxfp4RsBf16Pairs,
  kMxfp4OneToken,
  kNvfp4Decode,
  kNvfp4DecodeSplit,
  kNvfp4Mma,
  kNvfp4RsF16,
  kNvfp4RsF16Wide,
};
inline constexpr int kSm90FormCount = static_cast<int>(Sm90Form::kNvfp4RsF16Wide) + 1;

struct Sm90FormInfo {
  Sm90Form form;
  std::string_view name;       // "<recipe>.<mainloop>.<MxN>", unique: what describe() and --kernel-table print
  Recipe recipe;
  GemmKernel family;           // the KernelOverrides::gemm that pins it (kAuto: only auto picks it)
  std::string_view mainloop;   // how the product is computed, in a few words
  std::string_view operands;   // activations x weights as the tensor cores see them
  int block_m;                 // tokens per output tile
  int list_block_m;            // rows per m tile of the routing's list (the tile walk's unit)
  int block_n;                 // weight rows per output tile (H and 2I must be multiples of it)
  int consumers;               // consumer warpgroups (0: warp-level mma.sync)
  int k_split;                 // parts of K per block, summed in a fixed order
  bool narrow_tails;           // an expert's last tile of <= 48 rows on n48 wgmmas, after the others
  bool persistent;             // grid capped at blocks per SM x SMs (else one block per m tile x n tile)
  bool has_gemm2;              // false: a GEMM 1 form only (its bucket names another form for GEMM 2)
  bool folded_only;            // mxfp4 weights folded into the FP8 window
  bool exact;                  // fp32-exact k-block sums: allowed with exact_accumulation
  bool x_16bit, h_16bit;       // reads x (GEMM 1) / h (GEMM 2) as 16-bit rows in its k order
  bool whole_layer;            // both GEMMs, the quantization of x, the routing and the combine in
                               // its own launches (a bucket of T = 1), not through the grouped steps
};

// The decode families (kDecode, kDecodeWgmma): tiles of 16 routed rows, weights streamed into
// registers, one block per (m tile, n chunk).
constexpr bool sm90_decode_family(GemmKernel family) {
  return family == GemmKernel::kDecode || family == GemmKernel::kDecodeWgmma;
}

const std::array<Sm90FormInfo, kSm90FormCount>& sm90_forms();
const Sm90FormInfo& sm90_form(Sm90Form form);
std::string_view sm90_form_name(Sm90Form form);
std::optional<Sm90Form> parse_sm90_form(std::string_view name);

// What the device and the loaded weights allow, measured at layer creation before selection.
struct Sm90Facts {
  int sm_count = 0;
  bool w13_folded = false, w2_folded = false;  // mxfp4 weights folded into the FP8 window
  // Why the decode forms cannot hold a tile's rows of A in shared memory ("" when they can).
  std::string decode_unavailable;
  // The one-token form's 16-column groups of y per down block (kernels/sm90_one_token.h).
  int one_token_groups = 0;
  // Blocks of each form's GEMM 1 / GEMM 2 kernel that fit on one SM; 0 where it does not fit or
  // was not probed.
  std::array<std::array<int, 2>, kSm90FormCount> blocks_per_sm{};

  int& per_sm(Sm90Form form, int gemm) { return blocks_per_sm[static_cast<int>(form)][gemm]; }
  int per_sm(Sm90Form form, int gemm) const { return blocks_per_sm[static_cast<int>(form)][gemm]; }
};

// Why `form` cannot run this layer ("" when it can): its recipe, shape rules, weights, the
// numerics policy, and whether its kernels fit. `fold` is whether folding was asked for (the
// reason of unfolded weights differs).
std::string sm90_form_unavailable(Sm90Form form, const MoeDesc& desc, const Sm90Facts& facts, bool fold = true);

// The form a pinned family names for a recipe: its first whole-K form in table order whose tile
// is `tile` (any, when `tile` is automatic); nullopt when the recipe has none.
std::optional<Sm90Form> sm90_family_form(Recipe recipe, GemmKernel family, TileShape tile = {});

// The tiles a family can pin for a recipe ("128x128, 64x256"; "" when it has no tile choice).
std::string sm90_family_tiles(Recipe recipe, GemmKernel family);

// The form table as a Markdown table (docs/kernels.md carries it between its kernel-table markers).
std::string sm90_form_table_markdown();

}  // namespace moe_ep::cuda
