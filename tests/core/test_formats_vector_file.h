// The bit-exact vectors of tests/python/gen_format_vectors.py (ml_dtypes and an independent
// numpy implementation of docs/spec.md §3–5): reading them and comparing the library against them.
//
// Layout: $MOE_EP_TEST_DATA/formats/<case>.<array>.npy (numpy .npy, little-endian, C order) and
// manifest.txt, one case name per line. ctest writes them with the fixture `format_vectors`
// before any test of the suites *FormatVectors* / *QuantVectors* runs. A missing or malformed
// file throws std::runtime_error, which gtest reports as a failure of the test (never a skip).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

namespace moe_ep::testvectors {

// The folder of the vectors; throws when MOE_EP_TEST_DATA is not set.
std::string vector_dir();

// The case names of manifest.txt.
std::vector<std::string> manifest_cases();

// Every case the C++ tests check, in the generator's order; a test compares it with the manifest
// so that neither side can drop a case unnoticed.
const std::vector<std::string>& checked_cases();
std::vector<std::string> checked_cases_starting_with(const std::string& prefix);

struct NpyArray {
  std::string path;
  std::string descr;  // numpy dtype string: "|u1", "<u2", "<i4", "<f4"
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
  int64_t size() const;
};

NpyArray read_npy(const std::string& path);

template <class T>
constexpr const char* npy_descr();
template <> constexpr const char* npy_descr<uint8_t>() { return "|u1"; }
template <> constexpr const char* npy_descr<uint16_t>() { return "<u2"; }
template <> constexpr const char* npy_descr<int32_t>() { return "<i4"; }
template <> constexpr const char* npy_descr<float>() { return "<f4"; }

// <case>.<array>.npy as a flat vector of T (the dtype must be T's).
template <class T>
std::vector<T> load(const std::string& case_name, const std::string& array) {
  const NpyArray a = read_npy(fmt::format("{}/{}.{}.npy", vector_dir(), case_name, array));
  if (a.descr != npy_descr<T>())
    throw std::runtime_error(fmt::format("format test vector file '{}' holds dtype '{}', the test "
                                         "reads '{}'", a.path, a.descr, npy_descr<T>()));
  std::vector<T> out(static_cast<size_t>(a.size()));
  std::memcpy(out.data(), a.bytes.data(), a.bytes.size());
  return out;
}

// The shape of <case>.<array>.npy.
std::vector<int64_t> shape_of(const std::string& case_name, const std::string& array);

inline uint32_t bits_of(float v) {
  uint32_t u;
  std::memcpy(&u, &v, sizeof u);
  return u;
}

// Floats compare by bits, so -0 differs from +0 and NaN payloads count.
struct SameBits {
  bool operator()(float a, float b) const { return bits_of(a) == bits_of(b); }
  template <class T>
  bool operator()(T a, T b) const { return a == b; }
};
// Decoders are compared bit for bit except that any NaN matches any NaN: formats.h leaves the
// sign and payload of a decoded NaN open.
struct SameBitsOrBothNaN {
  bool operator()(float a, float b) const {
    return SameBits{}(a, b) || (std::isnan(a) && std::isnan(b));
  }
};

inline std::string show(float v) { return fmt::format("{:g} (0x{:08x})", v, bits_of(v)); }
inline std::string show(uint8_t v) { return fmt::format("0x{:02x}", v); }
inline std::string show(uint16_t v) { return fmt::format("0x{:04x}", v); }
inline std::string show(int32_t v) { return fmt::format("{}", v); }

// Compares every element; on a mismatch names the case, the count and the first few indices,
// each with describe(i) (the input that produced it).
template <class T, class Equal = SameBits>
::testing::AssertionResult all_equal(const std::string& what, const std::vector<T>& expected,
                                     const std::vector<T>& actual,
                                     const std::function<std::string(size_t)>& describe,
                                     Equal equal = {}) {
  if (expected.size() != actual.size())
    return ::testing::AssertionFailure()
           << what << ": " << actual.size() << " values, expected " << expected.size();
  size_t num_bad = 0;
  std::string first;
  for (size_t i = 0; i < expected.size(); ++i) {
    if (equal(expected[i], actual[i])) continue;
    if (num_bad++ < 8)
      first += fmt::format("\n  [{}] {}: expected {}, got {}", i, describe(i), show(expected[i]),
                           show(actual[i]));
  }
  if (num_bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << what << ": " << num_bad << " of " << expected.size() << " differ" << first;
}

}  // namespace moe_ep::testvectors
