#include "cuda/weight_layout.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "core/check.h"
#include "cuda/kernels/sm90_grouped_gemm.h"
#include "cuda/tile/fp4_codec.h"
#include "moe_ep/formats.h"
#include "moe_ep/quant.h"

namespace moe_ep::cuda {
namespace {

constexpr int64_t kStepK = kGemmBlockK;                // 128
constexpr int64_t kTile = kWeightMicroTileBytes;       // 512

// The 4-bit code of canonical element (row, k) of one expert's [rows, K/2] packed matrix.
inline uint8_t code_at(const uint8_t* packed, int64_t k_dim, int64_t row, int64_t k) {
  return unpack_e2m1(packed[(row * k_dim + k) / 2], k);
}

// Element k of k step word `word` for lane t, value i of half `hi` (see sm90_grouped_gemm.h).
inline int64_t element_k(bool nvfp4, int64_t word, int64_t t, int64_t i, bool hi) {
  return nvfp4 ? 16 * (2 * word + (hi ? 1 : 0)) + 4 * t + i : 32 * word + (hi ? 16 : 0) + 4 * t + i;
}

// One expert: src packed [N, K/2] + scales [N, K/B] with row map -> tiles + scales.
template <class RowMap>
void convert_expert(const uint8_t* packed, const uint8_t* scales, int64_t n_dim, int64_t k_dim,
                    bool nvfp4, RowMap source_row, uint8_t* tiles, uint8_t* out_scales) {
  const int64_t steps = k_dim / kStepK;
  const int64_t block = nvfp4 ? kNvBlock : kMxBlock;
  const int64_t scales_per_step = kStepK / block;  // 4 or 8
  for (int64_t nb = 0; nb < n_dim / 8; ++nb) {
    for (int64_t s = 0; s < steps; ++s) {
      uint8_t* tile = tiles + (nb * steps + s) * kTile;
      for (int64_t lane = 0; lane < 32; ++lane) {
        const int64_t g = lane / 4, t = lane % 4;
        const int64_t row = source_row(nb * 8 + g);
        for (int64_t word = 0; word < 4; ++word) {
          uint8_t lo[4], hi[4];
          for (int64_t i = 0; i < 4; ++i) {
            lo[i] = code_at(packed, k_dim, row, s * kStepK + element_k(nvfp4, word, t, i, false));
            hi[i] = code_at(packed, k_dim, row, s * kStepK + element_k(nvfp4, word, t, i, true));
          }
          const uint32_t w = encode_fp4_word(lo, hi);
          uint8_t* dst = tile + lane * 16 + word * 4;
          for (int b = 0; b < 4; ++b) dst[b] = static_cast<uint8_t>(w >> (8 * b));
        }
      }
    }
  }
  for (int64_t s = 0; s < steps; ++s)
    for (int64_t n = 0; n < n_dim; ++n) {
      const int64_t row = source_row(n);
      for (int64_t j = 0; j < scales_per_step; ++j)
        out_scales[(s * n_dim + n) * scales_per_step + j] =
            scales[row * (k_dim / block) + s * scales_per_step + j];
    }
}

// Folds one tensor when every row is inside the window: the blocks of a row that hold a
// non-zero code span at most kFoldedShifts - 1 octaves (core/weight_prep.h:
// mxfp4_row_exponents), and its factor 2^(base - 119) is a normal float (base <= 246). All-zero
// blocks decode to zeros with any shift (they get 0).
// source_row(e, n): canonical row of kernel row n of expert e, {packed [K/2], E8M0 [K/32]}.
template <class SourceRow>
void fold_into_fp8_window(KernelWeightTensor& t, SourceRow source_row, const ParallelFor& parallel_for) {
  const int64_t steps = t.k / kStepK, n_dim = t.n, blocks = t.k / kMxBlock;
  std::vector<uint8_t> base = fold_row_bases(
      t.num_experts, n_dim,
      [&](int64_t e, int64_t n) {
        const auto [packed, scales] = source_row(e, n);
        return mxfp4_row_exponents(packed, scales, t.k);
      },
      parallel_for);
  if (base.empty()) return;
  parallel_for(t.num_experts, [&](int64_t e) {
    uint8_t* sc = t.scales.data() + e * steps * n_dim * 4;
    for (int64_t n = 0; n < n_dim; ++n) {
      const uint8_t* packed = source_row(e, n).first;
      for (int64_t b = 0; b < blocks; ++b) {
        uint8_t& v = sc[((b / 4) * n_dim + n) * 4 + b % 4];
        v = mxfp4_block_is_zero(packed, b) ? 0 : static_cast<uint8_t>(v - base[static_cast<size_t>(e * n_dim + n)]);
      }
    }
  });
  t.row_base = std::move(base);
  t.folded = true;
}

}  // namespace

std::vector<uint8_t> fold_row_bases(int64_t experts, int64_t n_dim,
                                    const std::function<Mxfp4RowExponents(int64_t, int64_t)>& row,
                                    const ParallelFor& parallel_for) {
  std::vector<uint8_t> base(static_cast<size_t>(experts * n_dim));
  std::vector<uint8_t> inside(static_cast<size_t>(experts), 1);
  parallel_for(experts, [&](int64_t e) {
    for (int64_t n = 0; n < n_dim; ++n) {
      Mxfp4RowExponents ex = row(e, n);
      if (ex.hi < 0) ex.lo = ex.hi = 127;  // an all-zero row
      if (ex.hi - ex.lo > kFoldedShifts - 1 || ex.lo > 246) inside[static_cast<size_t>(e)] = 0;
      base[static_cast<size_t>(e * n_dim + n)] = static_cast<uint8_t>(ex.lo);
    }
  });
  for (uint8_t ok : inside)
    if (!ok) return {};
  return base;
}

std::vector<float> row_factors_of(const std::vector<uint8_t>& row_base) {
  std::vector<float> f(row_base.size());
  for (size_t i = 0; i < f.size(); ++i) f[i] = std::ldexp(1.0f, static_cast<int>(row_base[i]) - 119);
  return f;
}

std::vector<float> KernelWeightTensor::row_factors() const {
  return row_factors_of(row_base);
}

int64_t gemm1_source_row(int64_t n, int64_t intermediate) {
  const int64_t b = n / 8, i = n % 8;
  return (b % 2 == 0 ? 0 : intermediate) + (b / 2) * 8 + i;
}

KernelWeights make_kernel_weights(const HostExpertWeights& w, const ParallelFor& parallel_for,
                                  Fp8Fold fold) {
  MOE_EP_ASSERT(w.format == WeightFormat::kMXFP4 || w.format == WeightFormat::kNVFP4);
  const bool nvfp4 = w.format == WeightFormat::kNVFP4;
  const int64_t E = w.shape.num_experts, H = w.shape.hidden, I = w.shape.intermediate;
  MOE_EP_ASSERT(H % kStepK == 0 && I % kStepK == 0);
  const int64_t scales_per_step = nvfp4 ? 8 : 4;
  KernelWeights out;
  out.format = w.format;
  auto shape = [&](KernelWeightTensor& t, int64_t n, int64_t k) {
    t.num_experts = E;
    t.n = n;
    t.k = k;
    t.tiles.resize(static_cast<size_t>(E * n * k / 2));
    t.scales.resize(static_cast<size_t>(E * (k / kStepK) * n * scales_per_step));
  };
  shape(out.w13, 2 * I, H);
  shape(out.w2, H, I);
  parallel_for(2 * E, [&](int64_t task) {
    const int64_t e = task / 2;
    if (task % 2 == 0) {
      convert_expert(w.w13_packed(e), w.w13_scales(e), 2 * I, H, nvfp4,
                     [I](int64_t n) { return gemm1_source_row(n, I); },
                     out.w13.tiles.data() + e * (2 * I * H / 2),
                     out.w13.scales.data() + e * (2 * I * H / kStepK) * scales_per_step);
    } else {
      convert_expert(w.w2_packed(e), w.w2_scales(e), H, I, nvfp4, [](int64_t n) { return n; },
                     out.w2.tiles.data() + e * (H * I / 2),
                     out.w2.scales.data() + e * (H * I / kStepK) * scales_per_step);
    }
  });
  if (!nvfp4 && fold == Fp8Fold::kWhenInside) {
    fold_into_fp8_window(
        out.w13,
        [&](int64_t e, int64_t n) {
          const int64_t row = gemm1_source_row(n, I);
          return std::pair{w.w13_packed(e) + row * (H / 2), w.w13_scales(e) + row * (H / kMxBlock)};
        },
        parallel_for);
    fold_into_fp8_window(
        out.w2,
        [&](int64_t e, int64_t n) {
          return std::pair{w.w2_packed(e) + n * (I / 2), w.w2_scales(e) + n * (I / kMxBlock)};
        },
        parallel_for);
  }
  if (nvfp4) {
    out.w13_global.resize(E);
    out.w2_global.resize(E);
    for (int64_t e = 0; e < E; ++e) {
      out.w13_global[e] = w.w13_weight_scale_2(e);
      out.w2_global[e] = w.w2_weight_scale_2(e);
    }
  }
  return out;
}

KernelWeightElement read_kernel_weight(const KernelWeightTensor& t, WeightFormat format,
                                       int64_t e, int64_t n, int64_t k) {
  const bool nvfp4 = format == WeightFormat::kNVFP4;
  const int64_t steps = t.k / kStepK, s = k / kStepK, kk = k % kStepK;
  // Invert element_k: which (word, lane t, half, i) holds kk.
  int64_t word, lane_t, i;
  bool hi;
  if (nvfp4) {
    const int64_t b = kk / 16, r = kk % 16;
    word = b / 2;
    hi = b % 2 == 1;
    lane_t = r / 4;
    i = r % 4;
  } else {
    const int64_t r = kk % 32;
    word = kk / 32;
    hi = r >= 16;
    lane_t = (r % 16) / 4;
    i = r % 4;
  }
  const int64_t lane = (n % 8) * 4 + lane_t;
  const uint8_t* p = t.tiles.data() + ((e * (t.n / 8) + n / 8) * steps + s) * kTile + lane * 16 + word * 4;
  const uint32_t w = static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) |
                     (static_cast<uint32_t>(p[2]) << 16) | (static_cast<uint32_t>(p[3]) << 24);
  uint32_t lo_e4m3, hi_e4m3;
  decode_fp4_word(w, lo_e4m3, hi_e4m3);
  const uint8_t byte = static_cast<uint8_t>(((hi ? hi_e4m3 : lo_e4m3) >> (8 * i)) & 0xFF);
  // Back from e4m3 to the e2m1 code (exact: every e2m1 value is an e4m3 value).
  const uint8_t code = float_to_e2m1(e4m3_to_float(byte));
  const int64_t per_step = nvfp4 ? 8 : 4, block = nvfp4 ? kNvBlock : kMxBlock;
  uint8_t scale = t.scales[((e * steps + s) * t.n + n) * per_step + kk / block];
  // Folded: the E8M0 byte again (an all-zero block reads back as the row base).
  if (t.folded) scale = static_cast<uint8_t>(scale + t.row_base[static_cast<size_t>(e * t.n + n)]);
  return {static_cast<uint8_t>((byte & 0x80) ? (code | 0x8) : code), scale};
}

}  // namespace moe_ep::cuda
