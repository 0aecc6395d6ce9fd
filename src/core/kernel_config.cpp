#include "moe_ep/kernel_config.h"

#include <charconv>

#include <fmt/format.h>

#include "check.h"

namespace moe_ep {

std::string_view gemm_kernel_name(GemmKernel kernel) {
  switch (kernel) {
    case GemmKernel::kAuto: return "auto";
    case GemmKernel::kDecode: return "decode";
    case GemmKernel::kMma: return "mma";
    case GemmKernel::kWgmma: return "wgmma";
    case GemmKernel::kWgmmaRs: return "wgmma-rs";
    case GemmKernel::kDecodeWgmma: return "decode-wgmma";
  }
  return "unknown";
}

GemmKernel parse_gemm_kernel(std::string_view name, std::string_view option) {
  for (GemmKernel k : {GemmKernel::kAuto, GemmKernel::kDecode, GemmKernel::kMma, GemmKernel::kWgmma,
                       GemmKernel::kWgmmaRs, GemmKernel::kDecodeWgmma})
    if (gemm_kernel_name(k) == name) return k;
  MOE_EP_FAIL(ErrorCode::kInvalidArgument,
              "{} '{}' is not a GEMM kernel; allowed: auto, decode, mma, wgmma, wgmma-rs, decode-wgmma", option, name);
}

std::string TileShape::str() const { return automatic() ? "auto" : fmt::format("{}x{}", m, n); }

TileShape parse_tile_shape(std::string_view text, std::string_view option) {
  if (text == "auto") return {};
  const auto x = text.find('x');
  TileShape t;
  bool ok = x != std::string_view::npos;
  if (ok) {
    const char* end_m = text.data() + x;
    const char* end_n = text.data() + text.size();
    const auto rm = std::from_chars(text.data(), end_m, t.m);
    const auto rn = std::from_chars(end_m + 1, end_n, t.n);
    ok = rm.ec == std::errc() && rm.ptr == end_m && rn.ec == std::errc() && rn.ptr == end_n &&
         t.m > 0 && t.n > 0;
  }
  MOE_EP_CHECK(ok, "{} '{}' is not a tile shape; expected MxN with M, N >= 1 (e.g. 64x256) or "
               "auto", option, text);
  return t;
}

std::string KernelOverrides::str() const {
  std::string s;
  auto add = [&s](const std::string& field) { s += (s.empty() ? "" : " ") + field; };
  if (gemm != GemmKernel::kAuto) add(fmt::format("gemm={}", gemm_kernel_name(gemm)));
  if (!tile.automatic()) add(fmt::format("tile={}", tile.str()));
  if (decode_max_tokens) add(fmt::format("decode_max_tokens={}", *decode_max_tokens));
  if (fold_fp8) add(fmt::format("fold_fp8={}", *fold_fp8));
  if (decode_split_k) add(fmt::format("decode_split_k={}", *decode_split_k));
  if (fuse_quantize_route) add(fmt::format("fuse_quantize_route={}", *fuse_quantize_route));
  if (one_token_layer) add(fmt::format("one_token_layer={}", *one_token_layer));
  if (num_threads) add(fmt::format("num_threads={}", num_threads));
  if (cpu_batch_tokens) add(fmt::format("cpu_batch_tokens={}", cpu_batch_tokens));
  return s;
}

std::string SelectedConfig::str() const {
  std::string s;
  for (const ConfigEntry& e : entries) s += fmt::format("  {} = {}\n", e.key, e.value);
  for (const ConfigEntry& e : plan) s += fmt::format("  plan {}: {}\n", e.key, e.value);
  return s;
}

}  // namespace moe_ep
