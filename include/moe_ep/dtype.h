// Element types understood by moe_ep tensor views.
#pragma once

#include <cstdint>
#include <string_view>

namespace moe_ep {

// Packed FP4 (e2m1) tensors are passed as kU8 with the last dimension halved: two elements a
// byte, the low nibble holding the even element. E8M0 scales may be passed as kU8 or kE8M0.
enum class DType : uint8_t {
  kBF16,
  kF16,
  kF32,
  kF64,
  kI32,
  kI64,
  kU8,
  kE4M3,  // float8_e4m3fn
  kE8M0,  // float8_e8m0fnu (power-of-two scale byte)
};

int64_t dtype_size(DType dtype);
std::string_view dtype_name(DType dtype);

// DLPack type triple (code, bits, lanes) for interoperability with frameworks.
struct DLTypeCode {
  uint8_t code;
  uint8_t bits;
  uint16_t lanes;
};
DLTypeCode dtype_to_dlpack(DType dtype);
// Throws kInvalidArgument naming the triple when no moe_ep dtype matches.
DType dtype_from_dlpack(DLTypeCode code);

}  // namespace moe_ep
