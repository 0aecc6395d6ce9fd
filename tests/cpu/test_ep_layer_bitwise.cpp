// The multi-rank CPU layer gives the single-rank y bit for bit, per token, for R = 1, 2, 4, 8:
// uneven T per rank (including 0), -1 holes, i32 and i64 ids, both recipes, caller-quantized
// activations.
#include <gtest/gtest.h>

#include "support/ep_harness.h"

namespace moe_ep {
namespace {

using namespace testsupport;

constexpr int64_t kTokensPerRank[8] = {5, 0, 9, 3, 7, 1, 0, 12};

struct Case {
  std::string family;
  bool ids_i32;
  bool quantize_input;
};

void PrintTo(const Case& c, std::ostream* os) {
  *os << c.family << (c.ids_i32 ? " i32 ids" : " i64 ids")
      << (c.quantize_input ? " bf16 x" : " caller-quantized a");
}

class EpBitwise : public ::testing::TestWithParam<Case> {};

TEST_P(EpBitwise, SameYPerTokenForEveryRankCount) {
  const Case c = GetParam();
  Problem p = tiny_problem(c.family);
  p.max_tokens = 16;
  p.quantize_input = c.quantize_input;
  const WeightSet w = random_weights(p, p.traits().native_format, 11);
  for (int R : {1, 2, 4, 8}) {
    std::vector<Inputs> parts;
    for (int r = 0; r < R; ++r) {
      Inputs in = random_inputs(p, kTokensPerRank[r], 100 + 7 * R + r,
                                {.skip_fraction = 0.2, .ids_i32 = c.ids_i32});
      if (!c.quantize_input) quantize_inputs_for_caller(p, in);
      parts.push_back(std::move(in));
    }
    const Inputs global = concat_inputs(parts);
    const HostTensor<uint16_t> ref = reference_y(p, w, global);
    const auto y = run_ep(p, w, R, parts);
    EXPECT_EQ(compare_ranks_bitwise(y, ref, p.hidden), "") << "R = " << R << " " << p.str();
  }
}

INSTANTIATE_TEST_SUITE_P(Recipes, EpBitwise,
                         ::testing::Values(Case{"mxfp4", false, true}, Case{"mxfp4", true, false},
                                           Case{"nvfp4", true, true}, Case{"nvfp4", false, false}),
                         [](const auto& info) {
                           return info.param.family + (info.param.ids_i32 ? "_i32" : "_i64") +
                                  (info.param.quantize_input ? "_x" : "_prequantized");
                         });

TEST(EpLayer, ForwardRowsIsRefusedWithAReason) {
  Problem p = tiny_problem("mxfp4");
  const WeightSet w = random_weights(p, WeightFormat::kMXFP4, 3);
  auto out = run_ranks(1, [&](int r) {
    auto rt = Runtime::acquire(simulated_bootstrap(1, r));
    auto layer = Layer::create(rt, p.desc(), w.pack(), p.overrides);
    Inputs in = random_inputs(p, 2, 5);
    HostTensor<uint16_t> y = poisoned_output(p, 2);
    const int64_t rows[] = {0};
    layer->forward_rows(in.args(y, true), rows);
  });
  ASSERT_TRUE(out[0].threw);
  EXPECT_EQ(out[0].code, ErrorCode::kUnsupported);
  EXPECT_NE(out[0].message.find("single-rank check path"), std::string::npos) << out[0].message;
}

TEST(EpLayer, InfoNamesTheOwnedExpertsAndTheWorkspace) {
  Problem p = tiny_problem("mxfp4");
  const WeightSet w = random_weights(p, WeightFormat::kMXFP4, 3);
  std::vector<std::string> notes(2);
  auto out = run_ranks(2, [&](int r) {
    auto rt = Runtime::acquire(simulated_bootstrap(2, r));
    auto layer = Layer::create(rt, p.desc(), slice_experts(w.pack(), r * 8, 8), p.overrides);
    notes[r] = layer->info().notes;
    EXPECT_EQ(layer->info().num_local_experts, 8);
  });
  for (auto& o : out) ASSERT_FALSE(o.threw) << o.message;
  EXPECT_NE(notes[1].find("rank 1 of 2 simulated ranks owns experts [8, 16)"), std::string::npos)
      << notes[1];
}

}  // namespace
}  // namespace moe_ep
