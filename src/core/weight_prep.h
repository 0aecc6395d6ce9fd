// Canonical host weights of one layer's local experts, shared by the CPU and CUDA backends.
//
// Layer::create checks the WeightPack layout (dtypes, shapes, strides, devices). This file turns
// a pack that lives in host memory into the one format its recipe computes with:
//
//   recipe mxfp4:  MXFP4 as given, or BF16 quantized with quantize_mxfp4.
//   recipe nvfp4:  NVFP4 as given (gate/up global scales folded into one per expert, see
//                  below), or MXFP4/BF16 dequantized to bf16 and requantized to NVFP4 with one
//                  global scale per (expert, tensor) from that tensor's amax.
//
// Weights on a device are not read here: a backend whose pack lives on a GPU copies it to host
// memory first (same layout, TensorViews with Device::cpu()) and passes the copy.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "core/thread_pool.h"
#include "moe_ep/recipe.h"
#include "moe_ep/weights.h"

namespace moe_ep {

struct ExpertShape {
  int64_t num_experts = 0;   // local experts E_loc held by this pack
  int64_t hidden = 0;        // H
  int64_t intermediate = 0;  // I
};

// Runs task(0..num_tasks-1), possibly in parallel; each task touches disjoint data.
void serial_for(int64_t num_tasks, const std::function<void(int64_t)>& task);

// Rejects NaN/0xFF E8M0 scales, NaN e4m3 scales, non-finite or non-positive global scales and
// non-finite bf16 weights (the shared expert's too, where in host memory), naming the tensor and
// the first bad index. The pack must be in host memory.
void check_weight_values(const WeightPack& pack);
// The shared expert's tensors that are in host memory (they may live apart from the routed ones).
void check_shared_expert_values(const WeightPack& pack);

// Layout, all row-major, experts outermost (B = block: 32 for MXFP4, 16 for NVFP4):
//   w13        [E, 2I, H/2]  packed e2m1, low nibble = even k; rows [0, I) gate, [I, 2I) up
//   w13_scale  [E, 2I, H/B]  MXFP4: E8M0 bytes; NVFP4: e4m3 bytes
//   w2         [E, H, I/2]
//   w2_scale   [E, H, I/B]
//   w13_global [E], w2_global [E]   NVFP4 only: weight_scale_2, dequantized
//                                   w = e2m1 * block_scale * weight_scale_2
struct HostExpertWeights {
  WeightFormat format = WeightFormat::kMXFP4;  // kMXFP4 or kNVFP4
  ExpertShape shape;
  std::unique_ptr<uint8_t[]> w13, w13_scale, w2, w2_scale;
  std::unique_ptr<float[]> w13_global, w2_global;
  std::string notes;  // one line per finding (conversions, folds, the FP8 window)

  int64_t block() const;
  int64_t w13_packed_per_expert() const { return 2 * shape.intermediate * shape.hidden / 2; }
  int64_t w13_scales_per_expert() const { return 2 * shape.intermediate * shape.hidden / block(); }
  int64_t w2_packed_per_expert() const { return shape.hidden * shape.intermediate / 2; }
  int64_t w2_scales_per_expert() const { return shape.hidden * shape.intermediate / block(); }

  const uint8_t* w13_packed(int64_t e) const { return w13.get() + e * w13_packed_per_expert(); }
  const uint8_t* w13_scales(int64_t e) const { return w13_scale.get() + e * w13_scales_per_expert(); }
  const uint8_t* w2_packed(int64_t e) const { return w2.get() + e * w2_packed_per_expert(); }
  const uint8_t* w2_scales(int64_t e) const { return w2_scale.get() + e * w2_scales_per_expert(); }
  float w13_weight_scale_2(int64_t e) const { return format == WeightFormat::kNVFP4 ? w13_global[e] : 1.0f; }
  float w2_weight_scale_2(int64_t e) const { return format == WeightFormat::kNVFP4 ? w2_global[e] : 1.0f; }
};

// Converts a host pack (layout already checked) for `recipe`; checks values first.
// Throws kInvalidArgument when NVFP4 gate/up global scales cannot be folded exactly.
HostExpertWeights prepare_host_weights(Recipe recipe, const WeightPack& pack,
                                       const ExpertShape& shape,
                                       const ParallelFor& parallel_for = serial_for);

// docs/spec.md §5: e2m1 * 2^k is exact in e4m3 iff k in [-8, 6], so converting MXFP4 to FP8 with one
// power-of-two rescale per row (or per expert) is exact when the row's (expert's) block
// exponents over non-zero blocks span at most 15 octaves (max - min <= 14).
struct Fp8WindowStats {
  static constexpr int kMaxSpan = 14;
  int64_t rows = 0, rows_inside = 0;        // W13 and W2 rows of all local experts
  int64_t experts = 0, experts_inside = 0;  // an expert is inside when all its blocks are
  int max_row_span = 0;                     // largest max - min block exponent of any row
};
Fp8WindowStats analyze_fp8_window(const HostExpertWeights& weights,
                                  const ParallelFor& parallel_for = serial_for);
// One MXFP4 row [K/2 packed, K/32 E8M0]: whether block b holds only (signed) zeros, and the
// smallest / largest E8M0 byte over its other blocks (hi < 0 when every block is zero). The
// window above is about these.
bool mxfp4_block_is_zero(const uint8_t* packed_row, int64_t block);
struct Mxfp4RowExponents {
  int lo = 255, hi = -1;
};
Mxfp4RowExponents mxfp4_row_exponents(const uint8_t* packed_row, const uint8_t* scale_row, int64_t k);
// The statistics above from the row exponents of every canonical row, experts outermost:
// w13_rows [E * 2I], w2_rows [E * H] (a backend that scans the rows itself, on a GPU).
Fp8WindowStats fp8_window_from_rows(int64_t experts, std::span<const Mxfp4RowExponents> w13_rows,
                                    std::span<const Mxfp4RowExponents> w2_rows);

// Throws kInvalidArgument for the invalid scale byte at flat index `flat` of `scales` (the
// message check_weight_values gives, naming the tensor and the element).
[[noreturn]] void fail_invalid_scale_byte(const TensorView& scales, std::string_view name,
                                          WeightFormat format, int64_t flat);

// "mxfp4->fp8 window: ..." followed by `outside_behaviour` (what the backend does for rows
// outside the window).
std::string describe_fp8_window(const Fp8WindowStats& stats, std::string_view outside_behaviour);

}  // namespace moe_ep
