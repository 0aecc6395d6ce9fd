// Routing across ranks with structured inputs: x encodes (rank, token) and the experts of each
// token are a function of (rank, token), so a row that reached the wrong experts or came back to
// the wrong row changes y. Also: ranks with T = 0, every token on one expert, -1 everywhere.
#include <gtest/gtest.h>

#include <set>

#include "moe_ep/formats.h"
#include "support/ep_harness.h"

namespace moe_ep {
namespace {

using namespace testsupport;

// x[t, j]: multiples of 1/8 in [-1, 1] (exact in bf16 and in Q8) that encode id = rank * 16 + t:
// the first half of the row is a pattern shifted by id % 17, the second half one shifted by
// id / 17, so different (rank, token) give different rows. ids (r*5 + t*3 + 7k) % E (distinct
// for K <= E because 7 is odd and E a power of two); weights (k + 1) / 8.
Inputs structured_inputs(const Problem& p, int rank, int64_t T) {
  Inputs in;
  in.tokens = T;
  in.x = HostTensor<uint16_t>(DType::kBF16, {T, p.hidden});
  in.ids64 = HostTensor<int64_t>(DType::kI64, {T, p.top_k});
  in.ids32 = HostTensor<int32_t>(DType::kI32, {T, p.top_k});
  in.weights = HostTensor<float>(DType::kF32, {T, p.top_k});
  for (int64_t t = 0; t < T; ++t) {
    const int64_t id = rank * 16 + t;
    for (int64_t j = 0; j < p.hidden; ++j) {
      const int64_t level = j < p.hidden / 2 ? (j * 5 + id % 17) % 17 - 8 : (j * 3 + id / 17) % 17 - 8;
      in.x[t * p.hidden + j] = float_to_bf16(static_cast<float>(level) / 8.0f);
    }
    for (int64_t k = 0; k < p.top_k; ++k) {
      in.set_id(t, k, (rank * 5 + t * 3 + 7 * k) % p.num_experts);
      in.weights[t * p.top_k + k] = static_cast<float>(k + 1) / 8.0f;
    }
  }
  return in;
}

void expect_ranks_match_reference(const Problem& p, const WeightSet& w,
                                  const std::vector<Inputs>& parts, const std::string& what) {
  const Inputs global = concat_inputs(parts);
  const HostTensor<uint16_t> ref = reference_y(p, w, global);
  const auto y = run_ep(p, w, static_cast<int>(parts.size()), parts);
  EXPECT_EQ(compare_ranks_bitwise(y, ref, p.hidden), "") << what << " " << p.str();
}

TEST(EpRouting, StructuredInputsComeBackToTheirRows) {
  Problem p = tiny_problem("mxfp4");
  p.max_tokens = 12;
  const WeightSet w = random_weights(p, WeightFormat::kMXFP4, 21);
  constexpr int R = 4;
  std::vector<Inputs> parts;
  for (int r = 0; r < R; ++r) parts.push_back(structured_inputs(p, r, 12));
  const Inputs global = concat_inputs(parts);
  const HostTensor<uint16_t> ref = reference_y(p, w, global);
  // The check can fail: every (rank, token) row of the reference is different, so a row that
  // went to the wrong experts or back to the wrong place would not match.
  std::set<std::vector<uint16_t>> distinct;
  for (int64_t t = 0; t < global.tokens; ++t)
    distinct.insert(std::vector<uint16_t>(ref.values().begin() + t * p.hidden,
                                          ref.values().begin() + (t + 1) * p.hidden));
  ASSERT_EQ(static_cast<int64_t>(distinct.size()), global.tokens);
  const auto y = run_ep(p, w, R, parts);
  EXPECT_EQ(compare_ranks_bitwise(y, ref, p.hidden), "") << p.str();
  // Swapping two rows of one rank is detected by the same comparison.
  auto swapped = y;
  std::swap_ranges(swapped[2].values().begin(), swapped[2].values().begin() + p.hidden,
                   swapped[2].values().begin() + p.hidden);
  EXPECT_NE(compare_ranks_bitwise(swapped, ref, p.hidden), "");
}

TEST(EpRouting, RanksWithNoTokens) {
  Problem p = tiny_problem("nvfp4");
  p.max_tokens = 8;
  const WeightSet w = random_weights(p, WeightFormat::kNVFP4, 22);
  // Only rank 2 has tokens; then no rank has any.
  std::vector<Inputs> parts;
  for (int r = 0; r < 4; ++r) parts.push_back(structured_inputs(p, r, r == 2 ? 8 : 0));
  expect_ranks_match_reference(p, w, parts, "only rank 2 has tokens");
  for (auto& in : parts) in = structured_inputs(p, 0, 0);
  const auto y = run_ep(p, w, 4, parts);
  for (const auto& yr : y) EXPECT_EQ(yr.size(), 0u);
}

TEST(EpRouting, EveryTokenOnOneExpert) {
  Problem p = tiny_problem("mxfp4");
  p.max_tokens = 10;
  const WeightSet w = random_weights(p, WeightFormat::kMXFP4, 23);
  constexpr int R = 8;
  for (bool duplicates : {false, true}) {
    std::vector<Inputs> parts;
    for (int r = 0; r < R; ++r) {
      Inputs in = structured_inputs(p, r, 10);
      for (int64_t t = 0; t < in.tokens; ++t)
        for (int64_t k = 0; k < p.top_k; ++k)
          // Expert 13 lives on rank 6; with duplicates every slot names it.
          in.set_id(t, k, k == 0 || duplicates ? 13 : -1);
      parts.push_back(std::move(in));
    }
    expect_ranks_match_reference(p, w, parts, duplicates ? "all slots on expert 13"
                                                         : "slot 0 on expert 13, others -1");
  }
}

TEST(EpRouting, HolesAndTokensWithoutAnyValidSlot) {
  Problem p = tiny_problem("mxfp4");
  p.max_tokens = 9;
  const WeightSet w = random_weights(p, WeightFormat::kMXFP4, 24);
  std::vector<Inputs> parts;
  for (int r = 0; r < 2; ++r) {
    Inputs in = structured_inputs(p, r, 9);
    for (int64_t t = 0; t < in.tokens; ++t)
      for (int64_t k = 0; k < p.top_k; ++k)
        if ((t + k + r) % 3 == 0 || t == 4) in.set_id(t, k, -1);  // row 4: no valid slot
    parts.push_back(std::move(in));
  }
  const auto y = run_ep(p, w, 2, parts);
  for (int r = 0; r < 2; ++r)
    for (int64_t j = 0; j < p.hidden; ++j) ASSERT_EQ(y[r][4 * p.hidden + j], 0) << "rank " << r;
  expect_ranks_match_reference(p, w, parts, "holes");
}

}  // namespace
}  // namespace moe_ep
