// A layer with a shared expert (MoeDesc::shared_intermediate_size) gives, bit for bit, the routed
// layer's y followed by SharedExpert::add_to: on one rank (whole batches, small CPU batches,
// forward_rows) and on simulated ranks; a token whose slots are all -1 gets the shared expert's
// output alone.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include "moe_ep/shared_expert.h"
#include "support/ep_harness.h"
#include "support/layer_problem.h"

namespace moe_ep::testsupport {
namespace {

struct SharedCase {
  Problem with, without;  // the same routed layer, with and without the shared expert
  WeightSet w;            // routed weights identical in both (drawn first), plus the shared expert's
};

SharedCase make_case(const std::string& family, int64_t Is, uint64_t seed) {
  SharedCase c;
  c.without = tiny_problem(family);
  c.with = c.without;
  c.with.shared_intermediate = Is;
  c.w = random_weights(c.with, c.with.traits().native_format, seed);
  return c;
}

// The routed layer's y, then the shared expert added by the public SharedExpert.
HostTensor<uint16_t> expected_y(const SharedCase& c, const Inputs& in) {
  HostTensor<uint16_t> y = run_forward(*make_layer(c.without, without_shared_expert(c.w)), c.without, in);
  const auto shared = SharedExpert::create(c.with.hidden, c.with.shared_intermediate, c.with.clamp,
                                           c.w.shared_w13.view(), c.w.shared_w2.view());
  shared->add_to(in.x.view(), y.view());
  return y;
}

std::string first_difference(const HostTensor<uint16_t>& a, const HostTensor<uint16_t>& b, int64_t H) {
  if (a.size() != b.size()) return fmt::format("sizes {} and {}", a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i] != b[i])
      return fmt::format("row {} column {}: 0x{:04x}, expected 0x{:04x}", i / H, i % H, a[i], b[i]);
  return "";
}

class CpuSharedExpert : public ::testing::TestWithParam<std::string> {};

TEST_P(CpuSharedExpert, EqualsTheRoutedLayerThenAddTo) {
  for (int64_t Is : {16, 96}) {
    SharedCase c = make_case(GetParam(), Is, 70 + Is);
    Inputs in = random_inputs(c.with, 13, 71, {.skip_fraction = 0.25});
    for (int64_t k = 0; k < c.with.top_k; ++k) in.set_id(4, k, -1);  // token 4: no routed expert
    const HostTensor<uint16_t> expected = expected_y(c, in);
    const HostTensor<uint16_t> y = run_forward(*make_layer(c.with, c.w), c.with, in);
    EXPECT_EQ(first_difference(y, expected, c.with.hidden), "") << c.with.str();

    Problem batched = c.with;
    batched.overrides.cpu_batch_tokens = 4;  // tokens in batches of 4: rows cross batches
    EXPECT_EQ(first_difference(run_forward(*make_layer(batched, c.w), batched, in), expected, c.with.hidden), "")
        << batched.str();

    // Token 4 got o alone: not zero (the routed layer alone gives zeros there).
    const HostTensor<uint16_t> routed = run_forward(*make_layer(c.without, without_shared_expert(c.w)), c.without, in);
    int nonzero = 0;
    for (int64_t j = 0; j < c.with.hidden; ++j) {
      EXPECT_EQ(routed[4 * c.with.hidden + j] & 0x7FFF, 0) << "column " << j;
      nonzero += (y[4 * c.with.hidden + j] & 0x7FFF) != 0;
    }
    EXPECT_GT(nonzero, c.with.hidden / 2) << c.with.str();
  }
}

TEST_P(CpuSharedExpert, ForwardRowsAddsToTheListedRowsOnly) {
  SharedCase c = make_case(GetParam(), 64, 72);
  const Inputs in = random_inputs(c.with, 9, 73, {.skip_fraction = 0.1});
  const HostTensor<uint16_t> expected = expected_y(c, in);
  auto layer = make_layer(c.with, c.w);
  HostTensor<uint16_t> y = poisoned_output(c.with, in.tokens);
  const int64_t rows[] = {7, 2, 5};
  layer->forward_rows(in.args(y, true), rows);
  const int64_t H = c.with.hidden;
  for (int64_t t = 0; t < in.tokens; ++t) {
    const bool listed = t == 7 || t == 2 || t == 5;
    for (int64_t j = 0; j < H; ++j)
      ASSERT_EQ(y[t * H + j], listed ? expected[t * H + j] : kBf16NaN) << "row " << t << " column " << j;
  }
}

// y written over x: every token's shared expert still reads its own input.
TEST_P(CpuSharedExpert, InPlaceForwardEqualsOutOfPlace) {
  SharedCase c = make_case(GetParam(), 32, 76);
  const Inputs in = random_inputs(c.with, 11, 77, {.skip_fraction = 0.2});
  const HostTensor<uint16_t> expected = run_forward(*make_layer(c.with, c.w), c.with, in);
  for (int64_t batch : {0, 4}) {
    Problem p = c.with;
    p.overrides.cpu_batch_tokens = batch;
    HostTensor<uint16_t> xy = in.x;
    ForwardArgs a = in.args(xy, true);
    a.x = xy.view();
    make_layer(p, c.w)->forward(a);
    EXPECT_EQ(first_difference(xy, expected, p.hidden), "") << "cpu_batch_tokens " << batch;
  }
}

TEST_P(CpuSharedExpert, SimulatedRanksGiveTheSingleRankYBitwise) {
  SharedCase c = make_case(GetParam(), 32, 74);
  c.with.max_tokens = 16;
  const int64_t tokens[4] = {6, 0, 11, 3};
  for (int R : {2, 4}) {
    std::vector<Inputs> parts;
    for (int r = 0; r < R; ++r) parts.push_back(random_inputs(c.with, tokens[r], 75 + 10 * R + r, {.skip_fraction = 0.2}));
    const HostTensor<uint16_t> ref = reference_y(c.with, c.w, concat_inputs(parts));
    EXPECT_EQ(compare_ranks_bitwise(run_ep(c.with, c.w, R, parts), ref, c.with.hidden), "") << "R = " << R;
  }
}

INSTANTIATE_TEST_SUITE_P(Recipes, CpuSharedExpert, ::testing::Values("mxfp4", "nvfp4"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace moe_ep::testsupport
