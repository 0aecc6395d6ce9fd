// EPLB through the multi-rank layer: logical ids remapped to replicated physical experts give
// the y of the logical layer bit for bit; counters; in-place replacement of one physical slot.
#include <gtest/gtest.h>

#include "moe_ep/eplb.h"
#include "core/runtime_state.h"
#include "support/ep_harness.h"

namespace moe_ep {
namespace {

using namespace testsupport;

TEST(EpEplb, RedundantExpertsGiveTheLogicalResult) {
  // 12 logical experts + 4 redundant = 16 physical on 4 ranks.
  Problem logical = tiny_problem("mxfp4");
  logical.num_experts = 12;
  logical.max_tokens = 10;
  const WeightSet lw = random_weights(logical, WeightFormat::kMXFP4, 81);
  std::vector<int64_t> load(12, 1);
  load[5] = 50;  // expert 5 is hot: it gets replicas
  load[2] = 20;
  const std::vector<int64_t> replicated = plan_redundant_experts(load, 4);
  EXPECT_EQ(replicated, (std::vector<int64_t>{5, 5, 2, 5}));
  Eplb eplb(make_eplb_placement(12, replicated));
  Problem physical = logical;
  physical.num_experts = eplb.num_physical();
  const WeightSet pw = gather_experts(lw, eplb.placement().physical_to_logical());

  constexpr int R = 4;
  std::vector<Inputs> logical_parts, physical_parts;
  for (int r = 0; r < R; ++r) {
    Inputs in = random_inputs(logical, 10 - r, 300 + r, {.skip_fraction = 0.1});
    for (int64_t t = 0; t < in.tokens; t += 2) in.set_id(t, 0, 5);  // load the hot expert
    logical_parts.push_back(in);
    Inputs phys = in;
    eplb.set_recording(true);
    eplb.remap(in.ids64.view(), phys.ids64.view());
    physical_parts.push_back(phys);
  }
  // The counters count every routed slot once, on its physical expert.
  const auto counters = eplb.counter_values();
  std::vector<int64_t> expected(16, 0);
  int64_t replicas_of_5 = 0;
  for (const Inputs& in : physical_parts)
    for (int64_t i = 0; i < static_cast<int64_t>(in.ids64.size()); ++i)
      if (in.ids64[i] >= 0) ++expected[in.ids64[i]];
  EXPECT_EQ(counters, expected);
  for (int32_t p : {5, 12, 13, 15}) replicas_of_5 += counters[p] > 0;
  EXPECT_EQ(replicas_of_5, 4) << "every replica of the hot expert takes load";

  const HostTensor<uint16_t> ref = reference_y(logical, lw, concat_inputs(logical_parts));
  const auto y = run_ep(physical, pw, R, physical_parts);
  EXPECT_EQ(compare_ranks_bitwise(y, ref, logical.hidden), "") << physical.str();
}

TEST(EpEplb, ReplaceOnePhysicalSlotInPlace) {
  Problem p = tiny_problem("nvfp4");
  p.max_tokens = 8;
  const WeightSet w = random_weights(p, WeightFormat::kNVFP4, 91);
  const WeightSet donor = random_weights(p, WeightFormat::kNVFP4, 92);
  constexpr int R = 2, kSlot = 11;  // physical 11 lives on rank 1
  // Expected weights: expert 11 replaced by the donor's expert 3.
  std::vector<int32_t> ids(16);
  for (int e = 0; e < 16; ++e) ids[e] = e;
  WeightSet expected_w = gather_experts(w, ids);
  {
    const WeightSet one = gather_experts(donor, {3});
    auto copy_expert = [](auto& dst, const auto& src) {
      if (dst.empty()) return;
      const size_t per = src.size();
      std::copy(src.values().begin(), src.values().end(), dst.values().begin() + kSlot * per);
    };
    copy_expert(expected_w.w13, one.w13);
    copy_expert(expected_w.w13_scale, one.w13_scale);
    copy_expert(expected_w.w2, one.w2);
    copy_expert(expected_w.w2_scale, one.w2_scale);
    copy_expert(expected_w.w13_global, one.w13_global);
    copy_expert(expected_w.w2_global, one.w2_global);
  }
  std::vector<Inputs> parts;
  for (int r = 0; r < R; ++r) {
    Inputs in = random_inputs(p, 8, 400 + r);
    for (int64_t t = 0; t < 8; ++t) in.set_id(t, 1, kSlot);
    parts.push_back(in);
  }
  const Inputs global = concat_inputs(parts);
  const HostTensor<uint16_t> before = reference_y(p, w, global);
  const HostTensor<uint16_t> after = reference_y(p, expected_w, global);
  ASSERT_NE(before.values(), after.values());

  // Single-rank layer first.
  {
    Problem single = p;
    single.max_tokens = global.tokens;
    auto layer = make_layer(single, w);
    const WeightSet one = gather_experts(donor, {3});
    layer->replace_expert_weights(kSlot, one.pack());
    EXPECT_EQ(run_forward(*layer, single, global).values(), after.values());
  }

  std::vector<HostTensor<uint16_t>> y0(R), y1(R);
  std::vector<std::string> wrong_rank(R);
  auto out = run_ranks(R, [&](int r) {
    auto rt = Runtime::acquire(simulated_bootstrap(R, r));
    auto layer = Layer::create(rt, p.desc(), slice_experts(w.pack(), r * 8, 8), p.overrides);
    y0[r] = run_forward(*layer, p, parts[r]);
    const WeightSet one = gather_experts(donor, {3});
    if (r == 1) layer->replace_expert_weights(kSlot, one.pack());
    try {
      if (r == 0) layer->replace_expert_weights(kSlot, one.pack());
    } catch (const Error& e) {
      wrong_rank[r] = e.what();
    }
    rt->state().transport().barrier("replaced");
    y1[r] = run_forward(*layer, p, parts[r]);
  });
  for (auto& o : out) ASSERT_FALSE(o.threw) << outcomes_str(out);
  EXPECT_NE(wrong_rank[0].find("physical_expert = 11 is not owned by rank 0; expected 0..7"),
            std::string::npos) << wrong_rank[0];
  EXPECT_EQ(compare_ranks_bitwise(y0, before, p.hidden), "");
  EXPECT_EQ(compare_ranks_bitwise(y1, after, p.hidden), "");
}

}  // namespace
}  // namespace moe_ep
