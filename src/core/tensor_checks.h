// The checks every public entry point applies to a TensorView argument, with messages that name
// the tensor, what it is and what was expected (docs/spec.md §11). Each failure throws
// kInvalidArgument with Error::parameter() = the tensor's name.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>

#include "moe_ep/tensor.h"

namespace moe_ep::detail {

// One expected dimension: its value and its name in messages ("T", "2I", "H/32").
struct Dim {
  int64_t value;
  const char* name;
};

std::string dtypes_str(std::initializer_list<DType> dtypes);

// Defined, dtype, shape, row-major contiguity, data pointer, then the device (`device_ok`, with
// `device_rule` saying what is expected).
void check_tensor(const TensorView& t, std::string_view name, std::initializer_list<DType> dtypes,
                  std::initializer_list<Dim> dims, std::string_view device_rule, bool device_ok);

// A tensor that must be left empty, `why` saying when it is not used.
void check_absent(const TensorView& t, std::string_view name, std::string_view why);

}  // namespace moe_ep::detail
