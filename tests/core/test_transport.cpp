// The simulated transport: all-gather, barriers with deadlines, failure propagation.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>

#include "core/runtime_state.h"
#include "core/sim_transport.h"
#include "support/sim_ranks.h"

namespace moe_ep {
namespace {

using namespace std::chrono_literals;
using testsupport::outcomes_str;
using testsupport::run_ranks;

TEST(SimTransport, AllGatherReturnsEveryRanksValueManyRounds) {
  constexpr int R = 4;
  auto world = std::make_shared<detail::SimWorld>(R);
  auto out = run_ranks(R, [&](int r) {
    detail::SimTransport t(world, r, 5000ms);
    for (int round = 0; round < 200; ++round) {
      const auto v = t.all_gather("round", r * 1000 + round);
      ASSERT_EQ(v.size(), static_cast<size_t>(R));
      for (int q = 0; q < R; ++q) ASSERT_EQ(v[q], q * 1000 + round) << "round " << round;
    }
  });
  for (auto& o : out) EXPECT_FALSE(o.threw) << outcomes_str(out);
}

TEST(SimTransport, WindowsArePeerAddressable) {
  constexpr int R = 3;
  auto world = std::make_shared<detail::SimWorld>(R);
  auto out = run_ranks(R, [&](int r) {
    detail::SimTransport t(world, r, 5000ms);
    std::byte* mine = t.allocate_window(1024);
    ASSERT_NE(mine, nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(mine) % 256, 0u);
    int nonzero = 0;
    for (int i = 0; i < 1024; ++i) nonzero += mine[i] != std::byte{0};
    EXPECT_EQ(nonzero, 0) << "windows are zero-filled";
    t.barrier("checked");
    // Write my rank into slot r of every peer's window, then read all slots of mine.
    for (int q = 0; q < R; ++q) {
      const int32_t v = 100 + r;
      std::memcpy(t.peer_window(q) + 4 * r, &v, 4);
    }
    t.barrier("written");
    for (int q = 0; q < R; ++q) {
      int32_t v;
      std::memcpy(&v, mine + 4 * q, 4);
      EXPECT_EQ(v, 100 + q);
    }
  });
  for (auto& o : out) EXPECT_FALSE(o.threw) << outcomes_str(out);
}

TEST(SimTransport, DifferentWindowSizesFailOnEveryRank) {
  constexpr int R = 2;
  auto world = std::make_shared<detail::SimWorld>(R);
  auto out = run_ranks(R, [&](int r) {
    detail::SimTransport t(world, r, 5000ms);
    t.allocate_window(r == 0 ? 512 : 768);
  });
  for (auto& o : out) {
    ASSERT_TRUE(o.threw);
    EXPECT_EQ(o.code, ErrorCode::kRuntime);
    EXPECT_NE(o.message.find("rank 0: 512, rank 1: 768"), std::string::npos) << o.message;
  }
}

TEST(SimTransport, RankThatNeverArrivesTimesOutNamingRankAndPhase) {
  constexpr int R = 4;
  constexpr int kMissing = 2;
  auto world = std::make_shared<detail::SimWorld>(R);
  const auto start = std::chrono::steady_clock::now();
  auto out = run_ranks(R, [&](int r) {
    detail::SimTransport t(world, r, 150ms);
    t.barrier("warmup");
    if (r == kMissing) return;  // never arrives at "dispatch"
    t.barrier("dispatch");
  });
  const auto elapsed = std::chrono::steady_clock::now() - start;
  EXPECT_LT(elapsed, 3s) << "the waiting ranks must not hang";
  for (int r = 0; r < R; ++r) {
    if (r == kMissing) {
      EXPECT_FALSE(out[r].threw);
      continue;
    }
    ASSERT_TRUE(out[r].threw) << "rank " << r;
    EXPECT_EQ(out[r].code, ErrorCode::kTimeout) << out[r].message;
    EXPECT_NE(out[r].message.find("phase 'dispatch'"), std::string::npos) << out[r].message;
    EXPECT_NE(out[r].message.find("waiting for rank 2"), std::string::npos) << out[r].message;
    EXPECT_NE(out[r].message.find("rank " + std::to_string(r)), std::string::npos)
        << out[r].message;
  }
  // The world is broken: the late rank and any later call get an error at once.
  detail::SimTransport late(world, kMissing, 5000ms);
  const auto t0 = std::chrono::steady_clock::now();
  try {
    late.barrier("dispatch");
    ADD_FAILURE() << "a broken world must refuse barriers";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kTimeout);
    EXPECT_NE(std::string(e.what()).find("waiting for rank 2"), std::string::npos) << e.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 1s);
}

TEST(SimTransport, LocalFailureReachesEveryRankAndTheWorldStaysUsable) {
  constexpr int R = 3;
  auto world = std::make_shared<detail::SimWorld>(R);
  auto out = run_ranks(R, [&](int r) {
    detail::SimTransport t(world, r, 5000ms);
    try {
      t.barrier("dispatch", r == 1 ? "x has T = 99 tokens" : "");
      ADD_FAILURE() << "rank " << r << ": the barrier must report rank 1's failure";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kRuntime);
      EXPECT_NE(std::string(e.what()).find("rank 1 failed before phase 'dispatch'"),
                std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("x has T = 99 tokens"), std::string::npos);
    }
    // Next round works.
    const auto v = t.all_gather("next", r);
    for (int q = 0; q < R; ++q) EXPECT_EQ(v[q], q);
  });
  for (auto& o : out) EXPECT_FALSE(o.threw) << outcomes_str(out);
}

TEST(SimTransport, PhaseMismatchBreaksTheWorldWithAClearMessage) {
  constexpr int R = 2;
  auto world = std::make_shared<detail::SimWorld>(R);
  auto out = run_ranks(R, [&](int r) {
    detail::SimTransport t(world, r, 2000ms);
    if (r == 1) std::this_thread::sleep_for(50ms);  // rank 0 is in 'dispatch' first
    t.barrier(r == 0 ? "dispatch" : "combine");
  });
  for (int r = 0; r < R; ++r) {
    ASSERT_TRUE(out[r].threw);
    EXPECT_EQ(out[r].code, ErrorCode::kRuntime) << out[r].message;
    EXPECT_NE(out[r].message.find("rank 1 entered phase 'combine' while rank 0 is in phase "
                                  "'dispatch'"),
              std::string::npos) << out[r].message;
  }
}

TEST(SimTransport, RuntimeReservesTheWorkspaceCollectively) {
  constexpr int R = 2;
  const WorkspaceShape shape{R, 4, 8, 64, 32, 2};
  std::vector<std::shared_ptr<Runtime>> rts(R);
  auto out = run_ranks(R, [&](int r) {
    rts[r] = Runtime::acquire(testsupport::simulated_bootstrap(R, r));
    EXPECT_EQ(rts[r]->workspace(), nullptr);
    const Workspace& ws = rts[r]->reserve_workspace(shape);
    EXPECT_EQ(ws.bytes(), workspace_bytes(R, 4, 8, 64, 32, 2));
    EXPECT_EQ(&rts[r]->reserve_workspace(shape), &ws);  // not reallocated
    // Each rank sees the same peer bases.
    EXPECT_EQ(ws.base(r), rts[r]->state().transport().peer_window(r));
  });
  for (auto& o : out) ASSERT_FALSE(o.threw) << outcomes_str(out);
  EXPECT_EQ(rts[0]->workspace()->base(1), rts[1]->workspace()->base(1));
  EXPECT_NE(rts[0]->workspace()->base(0), rts[0]->workspace()->base(1));
  // A bigger shape does not fit: a clear error, no reallocation.
  WorkspaceShape bigger = shape;
  bigger.max_tokens_per_rank = 9;
  try {
    rts[0]->reserve_workspace(bigger);
    ADD_FAILURE() << "a bigger shape must not fit";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kRuntime);
    EXPECT_NE(std::string(e.what()).find("max_tokens_per_rank = 9 exceeds the "
                                         "max_tokens_per_rank = 8"),
              std::string::npos) << e.what();
  }
  // A smaller one fits without a collective call.
  WorkspaceShape smaller = shape;
  smaller.hidden_size = 32;
  EXPECT_EQ(&rts[1]->reserve_workspace(smaller), rts[1]->workspace());
}

}  // namespace
}  // namespace moe_ep
