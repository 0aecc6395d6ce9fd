// Reads typed choices from a fuzzer's byte string. Every read succeeds: past the end it yields
// zeros, so any input (also an empty one) describes one complete case.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <vector>

namespace moe_ep::fuzz {

class FuzzBytes {
 public:
  FuzzBytes(const uint8_t* data, size_t size) : data_(data), size_(size) {}

  uint8_t u8() { return pos_ < size_ ? data_[pos_++] : 0; }
  bool flag(int one_in = 2) { return u8() % one_in == 0; }  // true with probability ~1/one_in
  uint32_t u32() {
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) v |= uint32_t{u8()} << (8 * i);
    return v;
  }
  uint64_t u64() { return uint64_t{u32()} | (uint64_t{u32()} << 32); }
  // Uniform-ish in [lo, hi] (hi - lo < 2^32).
  int64_t range(int64_t lo, int64_t hi) {
    const uint64_t span = static_cast<uint64_t>(hi - lo) + 1;
    return lo + static_cast<int64_t>(u32() % span);
  }
  template <class T>
  T pick(std::initializer_list<T> values) {
    return values.begin()[u8() % values.size()];
  }
  float f32() {
    const uint32_t bits = u32();
    float f;
    std::memcpy(&f, &bits, sizeof f);
    return f;
  }
  // The remaining bytes, repeated to fill n bytes (zeros when none remain).
  void fill(void* out, size_t n) {
    auto* p = static_cast<uint8_t*>(out);
    const size_t left = size_ - pos_;
    for (size_t i = 0; i < n; ++i) p[i] = left ? data_[pos_ + i % left] : 0;
  }
  size_t remaining() const { return size_ - pos_; }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

// Product of non-negative factors, or -1 when a factor is negative or the product exceeds
// `limit` (no overflow: every partial product stays below limit).
inline int64_t bounded_product(std::initializer_list<int64_t> factors, int64_t limit) {
  int64_t n = 1;
  for (int64_t f : factors) {
    if (f < 0) return -1;
    if (f != 0 && n > limit / f) return -1;
    n *= f;
  }
  return n;
}

}  // namespace moe_ep::fuzz
