// The safetensors dtype strings this reader knows, with their element sizes.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace moe_ep::checkpoint {

// Bits per element, 0 when `dtype` is not a safetensors dtype this reader knows. "F4" is
// float4_e2m1fn: two elements a byte, shape counted in elements.
int safetensors_element_bits(std::string_view dtype);
std::string known_safetensors_dtypes();  // "BOOL, U8, I8, ..."

}  // namespace moe_ep::checkpoint
