// EPLB: placement, the remap rule and the load counters against hand-computed values.
#include <gtest/gtest.h>

#include <thread>

#include "moe_ep/error.h"
#include "moe_ep/eplb.h"
#include "support/host_tensor.h"

namespace moe_ep {
namespace {

using testsupport::HostTensor;

// L = 3; physical 3, 4 replicate logical 1 and physical 5 logical 0:
//   logical 0 -> [0, 5], logical 1 -> [1, 3, 4], logical 2 -> [2].
EplbPlacement hand_placement() {
  const int64_t replicated[] = {1, 1, 0};
  return make_eplb_placement(3, replicated);
}

TEST(Eplb, PlacementHandCase) {
  const EplbPlacement p = hand_placement();
  EXPECT_EQ(p.num_physical, 6);
  EXPECT_EQ(p.max_replicas, 3);
  EXPECT_EQ(p.logical_to_physical, (std::vector<int32_t>{0, 5, -1, 1, 3, 4, 2, -1, -1}));
  EXPECT_EQ(p.replica_count, (std::vector<int32_t>{2, 3, 1}));
  EXPECT_EQ(p.physical_to_logical(), (std::vector<int32_t>{0, 1, 2, 1, 1, 0}));
}

template <class Id>
void check_remap_hand_case() {
  Eplb eplb(hand_placement());
  const DType dtype = sizeof(Id) == 4 ? DType::kI32 : DType::kI64;
  HostTensor<Id> logical(dtype, {4, 2});
  logical.values() = {1, 0, 1, 2, -1, 1, 3, 0};  // 3 >= L becomes -1
  HostTensor<Id> physical(dtype, {4, 2}, Id{77});
  eplb.set_recording(true);
  eplb.remap(logical.view(), physical.view());
  // (t, k) -> l2p[l, (t*K + k) % count[l]]:
  //   (0,0) l=1 i=0 -> 1   (0,1) l=0 i=1 -> 5   (1,0) l=1 i=2 -> 4   (1,1) l=2 i=0 -> 2
  //   (2,0) -1             (2,1) l=1 i=5%3=2 -> 4   (3,0) 3 >= L -> -1   (3,1) l=0 7%2=1 -> 5
  EXPECT_EQ(physical.values(), (std::vector<Id>{1, 5, 4, 2, -1, 4, -1, 5}));
  EXPECT_EQ(eplb.counter_values(), (std::vector<int64_t>{0, 1, 1, 0, 2, 2}));
  // Recording off: the map is the same, the counters stay.
  eplb.set_recording(false);
  EXPECT_EQ(*eplb.recording_flag(), 0);
  eplb.remap(logical.view(), physical.view());
  EXPECT_EQ(physical.values(), (std::vector<Id>{1, 5, 4, 2, -1, 4, -1, 5}));
  EXPECT_EQ(eplb.counter_values(), (std::vector<int64_t>{0, 1, 1, 0, 2, 2}));
  eplb.reset_counters();
  EXPECT_EQ(eplb.counter_values(), (std::vector<int64_t>(6, 0)));
  // In place (the same tensor in and out).
  eplb.remap(logical.view(), logical.view());
  EXPECT_EQ(logical.values(), (std::vector<Id>{1, 5, 4, 2, -1, 4, -1, 5}));
}

TEST(Eplb, RemapHandCaseI32) { check_remap_hand_case<int32_t>(); }
TEST(Eplb, RemapHandCaseI64) { check_remap_hand_case<int64_t>(); }

TEST(Eplb, CountersAreExactWithSeveralThreads) {
  Eplb eplb(hand_placement());
  eplb.set_recording(true);
  constexpr int kThreads = 4, kRounds = 500;
  HostTensor<int32_t> logical(DType::kI32, {8, 2});
  for (size_t i = 0; i < logical.size(); ++i) logical[i] = static_cast<int32_t>(i % 3);
  std::vector<std::thread> threads;
  for (int th = 0; th < kThreads; ++th)
    threads.emplace_back([&] {
      HostTensor<int32_t> out(DType::kI32, {8, 2});
      for (int i = 0; i < kRounds; ++i) eplb.remap(logical.view(), out.view());
    });
  for (auto& t : threads) t.join();
  int64_t total = 0;
  for (int64_t c : eplb.counter_values()) total += c;
  EXPECT_EQ(total, int64_t{kThreads} * kRounds * 16);
}

TEST(Eplb, PlanRedundantPicksTheLargestLoadPerReplica) {
  const int64_t load[] = {10, 40, 20};
  // 40/1 -> 1; then 10, 20, 20 -> 1 (tie to the lower id); then 10, 13.3, 20 -> 2.
  EXPECT_EQ(plan_redundant_experts(load, 3), (std::vector<int64_t>{1, 1, 2}));
  EXPECT_TRUE(plan_redundant_experts(load, 0).empty());
}

TEST(Eplb, BadPlacementsNameTheEntry) {
  auto msg = [](EplbPlacement p) -> std::string {
    try {
      Eplb e(std::move(p));
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      return e.what();
    }
    return "no error";
  };
  EplbPlacement p = hand_placement();
  p.logical_to_physical[2] = 4;  // padding of logical 0 not -1
  EXPECT_NE(msg(p).find("logical_to_physical[0, 2] = 4"), std::string::npos) << msg(p);
  p = hand_placement();
  p.logical_to_physical[4] = 1;  // physical 1 twice
  EXPECT_NE(msg(p).find("already serves"), std::string::npos) << msg(p);
  p = hand_placement();
  p.replica_count[2] = 0;
  EXPECT_NE(msg(p).find("replica_count[2] = 0"), std::string::npos) << msg(p);
  p = hand_placement();
  p.num_physical = 7;  // physical 6 serves nobody
  EXPECT_NE(msg(p).find("physical expert 6 serves no logical expert"), std::string::npos) << msg(p);
  p = hand_placement();
  p.logical_to_physical[0] = 9;
  EXPECT_NE(msg(p).find("outside [0, num_physical = 6)"), std::string::npos) << msg(p);

  Eplb eplb(hand_placement());
  HostTensor<int32_t> a(DType::kI32, {2, 2}), b(DType::kI32, {2, 3});
  EXPECT_THROW(eplb.remap(a.view(), b.view()), Error);
  HostTensor<float> f(DType::kF32, {2, 2});
  EXPECT_THROW(eplb.remap(f.view(), a.view()), Error);
}

}  // namespace
}  // namespace moe_ep
