// Overflow-checked int64 arithmetic for sizes read from untrusted files.
#pragma once

#include <cstdint>
#include <optional>

namespace moe_ep::checkpoint {

inline std::optional<int64_t> checked_mul(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_mul_overflow(a, b, &r)) return std::nullopt;
  return r;
}

inline std::optional<int64_t> checked_add(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_add_overflow(a, b, &r)) return std::nullopt;
  return r;
}

}  // namespace moe_ep::checkpoint
