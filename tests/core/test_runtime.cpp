// Runtime: reference counting, one world per process, simulated ranks, bootstrap checks.
#include <gtest/gtest.h>

#include <atomic>

#include "moe_ep/backend.h"
#include "moe_ep/runtime.h"
#include "support/sim_ranks.h"

namespace moe_ep {
namespace {

using testsupport::run_ranks;
using testsupport::simulated_bootstrap;

ErrorCode code_of(const std::function<void()>& f, std::string* message = nullptr) {
  try {
    f();
  } catch (const Error& e) {
    if (message) *message = e.what();
    return e.code();
  }
  ADD_FAILURE() << "expected an moe_ep::Error";
  return ErrorCode::kInternal;
}

TEST(Runtime, SameBootstrapSharesOneRuntime) {
  auto a = Runtime::acquire(Bootstrap{});
  auto b = Runtime::acquire(Bootstrap{});
  EXPECT_EQ(a.get(), b.get());
  EXPECT_EQ(a.use_count(), 2);
  b.reset();
  EXPECT_EQ(a.use_count(), 1);
  EXPECT_EQ(a->world_size(), 1);
  EXPECT_EQ(a->rank(), 0);
}

TEST(Runtime, LastReleaseFreesTheWorldSoAnotherCanBeAcquired) {
  std::weak_ptr<Runtime> weak;
  {
    auto a = Runtime::acquire(Bootstrap{});
    weak = a;
  }
  EXPECT_TRUE(weak.expired());
  auto sim = Runtime::acquire(simulated_bootstrap(1, 0));  // a different world is fine now
  EXPECT_EQ(sim->bootstrap().comm, CommSource::kSimulated);
}

TEST(Runtime, SecondDifferentWorldFailsNamingBoth) {
  auto a = Runtime::acquire(Bootstrap{});
  std::string msg;
  EXPECT_EQ(code_of([] { Runtime::acquire(simulated_bootstrap(2, 0)); }, &msg), ErrorCode::kRuntime);
  EXPECT_NE(msg.find("comm=single-process"), std::string::npos) << msg;
  EXPECT_NE(msg.find("world_size=2"), std::string::npos) << msg;
  EXPECT_NE(msg.find("comm=simulated"), std::string::npos) << msg;
  Bootstrap other_timeout;
  other_timeout.timeout_ms = 5;
  EXPECT_EQ(code_of([&] { Runtime::acquire(other_timeout); }), ErrorCode::kRuntime);
}

TEST(Runtime, SimulatedRanksShareOneWorld) {
  constexpr int R = 4;
  std::vector<std::shared_ptr<Runtime>> rts(R);
  auto out = run_ranks(R, [&](int r) {
    rts[r] = Runtime::acquire(simulated_bootstrap(R, r));
    // The same rank acquired again is the same runtime.
    EXPECT_EQ(Runtime::acquire(simulated_bootstrap(R, r)).get(), rts[r].get());
  });
  for (int r = 0; r < R; ++r) {
    ASSERT_FALSE(out[r].threw) << out[r].message;
    EXPECT_EQ(rts[r]->rank(), r);
    EXPECT_EQ(rts[r]->world_size(), R);
    for (int q = 0; q < r; ++q) EXPECT_NE(rts[r].get(), rts[q].get());
  }
  // A rank of a world with another size fails while this world lives.
  EXPECT_EQ(code_of([] { Runtime::acquire(simulated_bootstrap(2, 1)); }), ErrorCode::kRuntime);
  // Releasing some ranks keeps the world; releasing all frees it.
  rts[0].reset();
  EXPECT_EQ(code_of([] { Runtime::acquire(simulated_bootstrap(2, 1)); }), ErrorCode::kRuntime);
  rts.clear();
  EXPECT_NO_THROW(Runtime::acquire(simulated_bootstrap(2, 1)));
}

TEST(Runtime, SimulatedRanksProvideTheWorkspaceTransportAndErrorFlag) {
  auto rt = Runtime::acquire(simulated_bootstrap(1, 0));
  const uint32_t all = kRuntimeSymmetricWorkspace | kRuntimePeerTransport | kRuntimeDeviceErrorFlag;
  EXPECT_EQ(rt->parts() & all, all);
}

TEST(Runtime, BootstrapChecks) {
  Bootstrap b;
  b.world_size = 0;
  EXPECT_EQ(code_of([&] { Runtime::acquire(b); }), ErrorCode::kInvalidArgument);
  b = simulated_bootstrap(2, 2);
  std::string msg;
  EXPECT_EQ(code_of([&] { Runtime::acquire(b); }, &msg), ErrorCode::kInvalidArgument);
  EXPECT_NE(msg.find("Bootstrap.rank = 2"), std::string::npos) << msg;
  b = Bootstrap{};
  b.world_size = 2;  // single-process with 2 ranks
  EXPECT_EQ(code_of([&] { Runtime::acquire(b); }, &msg), ErrorCode::kInvalidArgument);
  EXPECT_NE(msg.find("single-process"), std::string::npos) << msg;
  b = simulated_bootstrap(2, 0);
  b.timeout_ms = 0;
  EXPECT_EQ(code_of([&] { Runtime::acquire(b); }), ErrorCode::kInvalidArgument);
  // Simulated ranks on a GPU are a world like on the CPU, without a symmetric host workspace
  // (each rank's layer keeps its device window); the device is first touched by Layer::create.
  b = simulated_bootstrap(2, 0);
  b.device = Device::cuda(0);
  {
    auto gpu_rank = Runtime::acquire(b);
    EXPECT_EQ(gpu_rank->parts(), uint32_t{kRuntimePeerTransport | kRuntimeDeviceErrorFlag});
  }
  b = Bootstrap{};
  b.rendezvous = "/tmp/x";  // not used by single-process
  EXPECT_EQ(code_of([&] { Runtime::acquire(b); }), ErrorCode::kInvalidArgument);
}

TEST(Runtime, NcclSourcesAreCheckedThenUnsupported) {
  int fake_comm = 0;
  Bootstrap b;
  b.world_size = 2;
  b.comm = CommSource::kNcclComm;
  EXPECT_EQ(code_of([&] { Runtime::acquire(b); }), ErrorCode::kInvalidArgument);  // null comm
  b.nccl_comm = &fake_comm;
  std::string msg;
  EXPECT_EQ(code_of([&] { Runtime::acquire(b); }, &msg), ErrorCode::kUnsupported);
  EXPECT_NE(msg.find("nccl-comm"), std::string::npos) << msg;

  b = Bootstrap{};
  b.world_size = 2;
  b.comm = CommSource::kUniqueIdFile;
  EXPECT_EQ(code_of([&] { Runtime::acquire(b); }), ErrorCode::kInvalidArgument);  // no path
  b.rendezvous = "/tmp/moe_ep_uid";
  EXPECT_EQ(code_of([&] { Runtime::acquire(b); }), ErrorCode::kUnsupported);

  b.comm = CommSource::kTcpStore;
  b.rendezvous = "localhost";  // no port
  EXPECT_EQ(code_of([&] { Runtime::acquire(b); }), ErrorCode::kInvalidArgument);
  b.rendezvous = "localhost:70000";
  EXPECT_EQ(code_of([&] { Runtime::acquire(b); }), ErrorCode::kInvalidArgument);
  b.rendezvous = "localhost:29500";
  EXPECT_EQ(code_of([&] { Runtime::acquire(b); }), ErrorCode::kUnsupported);
}

}  // namespace
}  // namespace moe_ep
