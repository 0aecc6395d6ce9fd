// Elements of BF16 / F16 / F32 checkpoint tensors: widened to fp32 exactly, or turned into bf16
// bits (BF16 as stored, F16 and F32 rounded to nearest even).
#pragma once

#include <cstdint>
#include <string_view>

#include "moe_ep/checkpoint.h"

namespace moe_ep::checkpoint {

bool is_float_dtype(std::string_view dtype);  // BF16, F16, F32
float f16_to_float(uint16_t bits);
// Element i of a BF16 / F16 / F32 tensor, from the mapping.
float float_element(const CheckpointTensor& t, int64_t i);
// Elements [begin, begin + n) of a BF16 / F16 / F32 tensor as bf16 bits into dst. Throws
// kInvalidArgument naming the tensor, `role` and the element when one is not finite (or, from
// F32, leaves bf16's range).
void copy_as_bf16(const CheckpointTensor& t, std::string_view role, int64_t begin, int64_t n,
                  uint16_t* dst);

}  // namespace moe_ep::checkpoint
