// Kernel selection as data: the choices a caller may pin (KernelOverrides) and the configuration
// an implementation selected for a layer (SelectedConfig, printed by `moe_ep info` / `run --json`
// and returned by Layer::info()). A backend selects once, at layer creation: select_config(desc,
// device, overrides). Nothing is read from the environment.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace moe_ep {

// GEMM kernel families of the GPU backends; a backend maps each to its kernel forms per recipe
// (SM90: docs/kernels.md, generated from its form table).
enum class GemmKernel : uint8_t {
  kAuto,    // the implementation picks per T bucket
  kDecode,  // small batches: weights on the MMA's m side, streamed into registers
  kMma,     // mma.sync tiles; exact fp32 k-block sums
  kWgmma,   // warpgroup MMA: mxfp4 FP8 with both operands in shared memory; nvfp4 f16 with the
            // weights decoded into registers
  kWgmmaRs,  // mxfp4 FP8 warpgroup MMA with the weights decoded into registers
  kDecodeWgmma,  // mxfp4 small batches as kDecode, each k32 block on an FP8 warpgroup MMA (not
                 // fp32-exact per k block, so refused with exact_accumulation)
};
// "auto", "decode", "mma", "wgmma", "wgmma-rs", "decode-wgmma"
std::string_view gemm_kernel_name(GemmKernel kernel);
// Throws kInvalidArgument naming `option` and the allowed names.
GemmKernel parse_gemm_kernel(std::string_view name, std::string_view option = "gemm");

// An output tile of rows x columns; {0, 0} lets the implementation choose.
struct TileShape {
  int m = 0, n = 0;
  bool automatic() const { return m == 0 && n == 0; }
  bool operator==(const TileShape&) const = default;
  std::string str() const;  // "64x256", or "auto"
};
// "MxN" (or "auto"); throws kInvalidArgument naming `option`.
TileShape parse_tile_shape(std::string_view text, std::string_view option = "tile");

// Explicit choices that replace an implementation's own selection; a default-constructed value
// pins nothing. An override an implementation cannot honour for the problem fails at layer
// creation (kUnsupported naming the override and why), and one that contradicts the numerics
// policy (wgmma with exact_accumulation) is refused, never silently preferred.
struct KernelOverrides {
  GemmKernel gemm = GemmKernel::kAuto;
  TileShape tile;                           // with gemm = wgmma / wgmma-rs: the output tile of that family
                                            // (SM90: mxfp4 64x256; nvfp4 wgmma 128x128, 64x256)
  std::optional<int64_t> decode_max_tokens;  // auto: decode kernels up to this many tokens
  std::optional<bool> fold_fp8;             // mxfp4 on GPUs: fold weights into the FP8 window
  std::optional<int> decode_split_k;        // decode GEMMs: K in 1 or 2 parts per block (2: SM90, H and I
                                            // multiples of 1024 for mxfp4, of 256 and >= 512 for nvfp4)
  std::optional<bool> fuse_quantize_route;  // GPUs: quantization of x and the routing in one launch
                                            // (auto: SM90 mxfp4's decode buckets)
  std::optional<bool> one_token_layer;      // SM90 mxfp4: at T = 1 the whole layer in two launches
                                            // (auto: where it fits and the layer quantizes x)
  int num_threads = 0;                      // CPU backend workers incl. the caller (0: all cores)
  int64_t cpu_batch_tokens = 0;             // CPU backend tokens per batch (0: 256 MiB budget)

  std::string str() const;  // the pinned fields only ("" when none)
};

// One key = value of a selected configuration, in the order the implementation lists them.
struct ConfigEntry {
  std::string key, value;
};

// What a layer runs: the implementation's selected config and its launch plan (one entry per
// T bucket: the token range and the kernels, tiles and grids that run for it).
struct SelectedConfig {
  std::vector<ConfigEntry> entries;
  std::vector<ConfigEntry> plan;  // key: "T=1..512", value: what runs
  std::string str() const;        // multi-line, for `moe_ep info` and MOE_EP_PRINT_CONFIG
  void add(std::string key, std::string value) { entries.push_back({std::move(key), std::move(value)}); }
};

}  // namespace moe_ep
