// The same seed run 20 times on 4 simulated ranks gives a bitwise-identical output hash, in one
// world (forwards back to back on the shared workspace) and in a fresh world.
#include <gtest/gtest.h>

#include "support/ep_harness.h"

namespace moe_ep {
namespace {

using namespace testsupport;

uint64_t hash_of(const std::vector<HostTensor<uint16_t>>& y) {
  uint64_t h = hash_bytes(nullptr, 0);
  for (const auto& yr : y) h = hash_bytes(yr.values().data(), yr.size() * 2, h);
  return h;
}

TEST(EpDeterminism, TwentyRunsSameHash) {
  Problem p = tiny_problem("nvfp4");
  p.max_tokens = 24;
  const WeightSet w = random_weights(p, WeightFormat::kNVFP4, 41);
  constexpr int R = 4, kRuns = 20;
  std::vector<Inputs> parts;
  for (int r = 0; r < R; ++r)
    parts.push_back(random_inputs(p, 24 - 5 * r, 7000 + r, {.skip_fraction = 0.1}));

  std::vector<uint64_t> hashes(R * kRuns);
  std::vector<HostTensor<uint16_t>> last(R);
  auto out = run_ranks(R, [&](int r) {
    auto rt = Runtime::acquire(simulated_bootstrap(R, r));
    auto layer = Layer::create(rt, p.desc(), slice_experts(w.pack(), r * 4, 4), p.overrides);
    for (int i = 0; i < kRuns; ++i) {
      last[r] = run_forward(*layer, p, parts[r]);
      hashes[r * kRuns + i] = hash_bytes(last[r].values().data(), last[r].size() * 2);
    }
  });
  for (auto& o : out) ASSERT_FALSE(o.threw) << outcomes_str(out);
  for (int r = 0; r < R; ++r)
    for (int i = 1; i < kRuns; ++i)
      EXPECT_EQ(hashes[r * kRuns + i], hashes[r * kRuns]) << "rank " << r << " run " << i;
  // A fresh world gives the same bits.
  EXPECT_EQ(hash_of(run_ep(p, w, R, parts)), hash_of(last));
}

}  // namespace
}  // namespace moe_ep
