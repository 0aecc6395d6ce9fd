// Checks of a layer output y against the CPU reference backend, and sanity checks that need
// no reference. All norms in float64.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "cli/problem.h"
#include "testing/synthetic.h"

namespace moe_ep::cli {

// Rows to check: all of them when T <= max_rows, else max_rows rows spread evenly over [0, T)
// including the first and the last.
std::vector<int64_t> sample_rows(int64_t num_tokens, int64_t max_rows);

// ||y - ref||_2 / ||ref||_2 over `rows` of bf16 [T, H] arrays; 0 when both are zero, +inf when
// only ref is zero, NaN when y holds NaN.
double rel_err_rows(std::span<const uint16_t> y, std::span<const uint16_t> ref, int64_t H,
                    std::span<const int64_t> rows);
bool bitwise_equal_rows(std::span<const uint16_t> y, std::span<const uint16_t> ref, int64_t H,
                        std::span<const int64_t> rows);

// What the sanity check may expect of a row, beyond "finite".
struct SanityRule {
  // Every token passes the shared expert: no row is zero by its slots alone.
  bool shared_expert = false;
  // activation_clamp = 0: up = clamp(u, -0, 0) = 0, so every output is zero by definition.
  bool outputs_zero = false;
  // The reference's y on `reference_rows` (rows of `reference`, [T, H]): where it is zero, a
  // zero y is right too (a chained layer's input can be too small to survive Q8).
  std::span<const uint16_t> reference;
  std::span<const int64_t> reference_rows;
};

// Every element finite (no poison left), tokens without a valid slot exactly zero, and a
// nonzero output where some slot is valid (unless the rule says the output is zero there).
// With a shared expert every token passes it, so every row must be nonzero instead. `detail`
// says what failed.
bool sanity_check(std::span<const uint16_t> y, const testing::HostInputs& inputs, std::string* detail,
                  const SanityRule& rule);
inline bool sanity_check(std::span<const uint16_t> y, const testing::HostInputs& inputs,
                         std::string* detail, bool shared_expert = false) {
  SanityRule rule;
  rule.shared_expert = shared_expert;
  return sanity_check(y, inputs, detail, rule);
}

// Scales each bf16 row of x [rows, H] by a power of two so that its largest magnitude lies in
// [1, 2) (zero and non-finite rows stay as they are): the input of the next layer of a chain,
// which would otherwise shrink layer by layer until Q8 rounds it to zero. Exact for normal
// values, and the same on every path that runs the chain.
void scale_rows_to_unit_amax(std::span<uint16_t> x, int64_t H);

// The CPU reference backend's y on `rows` (other rows stay NaN): a fresh CPU runtime and layer
// of setup.desc (its shared expert too, when `weights` carries one) with `num_threads` threads
// (0: the library default). No other runtime may be alive.
std::vector<uint16_t> cpu_reference_rows(const ProblemSetup& setup, const WeightPack& weights,
                                         const testing::HostInputs& inputs,
                                         std::span<const int64_t> rows, int num_threads);

}  // namespace moe_ep::cli
