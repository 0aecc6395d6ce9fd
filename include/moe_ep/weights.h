// Expert weights handed to a layer: the experts this rank owns (E_loc = E / world_size).
//
//   W13_e [2I, H]: rows [0, I) gate (w1), rows [I, 2I) up (w3);  W2_e [H, I]. K-major.
//
//   format  tensor        dtype        shape
//   kMXFP4  w13           u8           [E_loc, 2I, H/2]   packed e2m1, low nibble = even k
//           w13_scale     u8 | e8m0    [E_loc, 2I, H/32]  UE8M0, 0xFF rejected
//           w2            u8           [E_loc, H, I/2]
//           w2_scale      u8 | e8m0    [E_loc, H, I/32]
//   kNVFP4  w13, w2       as MXFP4
//           w13_scale     u8 | e4m3    [E_loc, 2I, H/16]  e4m3 block scales, NaN rejected
//           w2_scale      u8 | e4m3    [E_loc, H, I/16]
//           w13_global    f32          [E_loc, 2]         weight_scale_2 (gate, up)
//           w2_global     f32          [E_loc]            weight_scale_2
//           dequantized w = e2m1 * block_scale * weight_scale_2
//   kBF16   w13           bf16         [E_loc, 2I, H]     quantized by the layer's family
//           w2            bf16         [E_loc, H, I]
//
// The shared expert (MoeDesc::shared_intermediate_size = Is > 0; any format), in host memory or
// on the layer's device (apart from the routed tensors if need be):
//           shared_w13    bf16         [2Is, H]           rows [0, Is) gate, [Is, 2Is) up
//           shared_w2     bf16         [H, Is]
#pragma once

#include <string_view>

#include "moe_ep/tensor.h"

namespace moe_ep {

enum class WeightFormat { kMXFP4, kNVFP4, kBF16 };

std::string_view weight_format_name(WeightFormat format);  // "mxfp4", "nvfp4", "bf16"
// The inverse; throws kInvalidArgument naming `parameter` (Error::parameter()) and the allowed names.
WeightFormat parse_weight_format(std::string_view name, std::string_view parameter = "weights.format");

struct WeightPack {
  WeightFormat format = WeightFormat::kMXFP4;
  TensorView w13, w13_scale, w13_global;
  TensorView w2, w2_scale, w2_global;
  TensorView shared_w13, shared_w2;  // when desc.shared_intermediate_size > 0, else empty
};

}  // namespace moe_ep
