// The NCCL expert-parallel path on one GPU: a real NCCL world of 1 rank (from a unique-id file,
// a TCP store on loopback, and a communicator handed in), its workspace on ncclMemAlloc +
// ncclCommWindowRegister, the device communicator's LSA barrier and the EP kernels with the
// LSA policy, checked against the CPU layer (relative error within the recipe's threshold) and
// the CUDA world-size-1 layer (bit for bit) on the same batch. Then a world of 2 whose second
// rank never starts: the bounded NCCL init must end in kTimeout naming rank and phase.
// Skips with the reason without a GPU or without a usable NCCL 2.28 library.
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "moe_ep/backend.h"
#include "cuda/errors.h"
#include "cuda_test_util.h"
#include "moe_ep/formats.h"

#ifdef MOE_EP_WITH_NCCL
#include <sys/socket.h>
#include <netinet/in.h>

#include "cuda/nccl/nccl_api.h"
#endif

namespace moe_ep::cudatest {
namespace {

using testsupport::Inputs;
using testsupport::Problem;
using testsupport::WeightSet;

#define MOE_EP_REQUIRE_NCCL()                                                               \
  do {                                                                                      \
    MOE_EP_REQUIRE_CUDA();                                                                  \
    if (const std::string why = nccl_unusable(); !why.empty()) GTEST_SKIP() << why;         \
  } while (0)

// The NCCL transport's status line, or why this build has none.
std::string nccl_status() {
  for (const TransportInfo& t : registered_transports())
    if (t.name == "nccl") return t.status;
  return "not in this build (no nccl transport registered)";
}

std::string nccl_unusable() {
  const std::string s = nccl_status();
  if (s.rfind("not in this build", 0) == 0) return "this build has no NCCL: " + s;
  return s.rfind("unusable", 0) == 0 ? "NCCL " + s : std::string();
}

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / fmt::format("moe_ep_{}_{}", name, ::getpid())).string();
}

#ifdef MOE_EP_WITH_NCCL
int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  socklen_t len = sizeof(a);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}
#endif

struct Expected {
  std::vector<double> cpu;
  std::vector<uint16_t> cuda;
};

// References first: a process holds one world at a time, so they run before the NCCL world.
Expected expected_y(const Problem& p, const WeightSet& w, const Inputs& in) {
  Expected e;
  e.cpu = cpu_reference(p, w.pack(), in);
  auto layer = make_gpu_layer(p, w.pack());
  e.cuda = run_on_gpu(*layer, to_device(p, in));
  return e;
}

void run_world_of_one(Bootstrap boot, const std::string& what) {
  // Same GEMM kernels for the reference (T rows) and the local layer (T*K rows): see
  // pinned() in test_ep_sim.cpp.
  for (const std::string family : {"mxfp4", "nvfp4"}) {
    Problem p = testsupport::tiny_problem(family);
    p.max_tokens = 200;
    p.overrides.gemm = GemmKernel::kMma;
    const WeightSet w = testsupport::random_weights(
        p, family == "nvfp4" ? WeightFormat::kNVFP4 : WeightFormat::kMXFP4, 7);
    const Inputs in = testsupport::random_inputs(p, 173, 8, {.skip_fraction = 0.1});
    const Inputs in2 = testsupport::random_inputs(p, 0, 9);
    const Expected e = expected_y(p, w, in);

    auto rt = Runtime::acquire(boot);
    auto layer = Layer::create(rt, p.desc(), w.pack(), p.overrides);
    auto second = Layer::create(rt, p.desc(), w.pack(), p.overrides);  // same workspace
    ASSERT_NE(rt->workspace(), nullptr);
    EXPECT_TRUE(rt->workspace()->on_device());
    EXPECT_EQ(rt->workspace()->bytes(), device_workspace_layout(rt->workspace()->shape()).total_bytes);
    const DeviceInputs d = to_device(p, in);
    std::vector<uint16_t> y = run_on_gpu(*layer, d);
    EXPECT_EQ(layer->read_error_flags(), 0u) << what;
    const double err = relative_error_rows(y, e.cpu, p.hidden);
    EXPECT_LE(err, same_recipe_tolerance(p.recipe)) << what << " " << p.str();
    EXPECT_EQ(y, e.cuda) << what << ": not bitwise equal to the CUDA world-size-1 layer";
    // The second layer on the shared workspace, an empty batch, then the first layer again.
    EXPECT_EQ(run_on_gpu(*second, d), e.cuda) << what << " (second layer)";
    run_on_gpu(*layer, to_device(p, in2));
    EXPECT_EQ(run_on_gpu(*layer, d), e.cuda) << what << " (after T = 0)";
    EXPECT_EQ(second->read_error_flags(), 0u);
    fmt::print("[ ep nccl ] {:<28} {} T={} rel_err={:.3e} bitwise-vs-cuda-ws1={} | {}\n", what,
               family, in.tokens, err, y == e.cuda ? "yes" : "NO", nccl_status());
  }
}

TEST(EpNcclWorldOfOne, UniqueIdFile) {
  MOE_EP_REQUIRE_NCCL();
  Bootstrap b;
  b.device = Device::cuda(0);
  b.comm = CommSource::kUniqueIdFile;
  b.rendezvous = temp_path("uid");
  std::filesystem::remove(b.rendezvous);
  run_world_of_one(b, "unique-id file");
  std::filesystem::remove(b.rendezvous);
}

TEST(EpNcclWorldOfOne, TcpStore) {
  MOE_EP_REQUIRE_NCCL();
#ifdef MOE_EP_WITH_NCCL
  Bootstrap b;
  b.device = Device::cuda(0);
  b.comm = CommSource::kTcpStore;
  b.rendezvous = fmt::format("127.0.0.1:{}", free_port());
  run_world_of_one(b, "tcp store");
#endif
}

TEST(EpNcclWorldOfOne, CommunicatorHandedIn) {
  MOE_EP_REQUIRE_NCCL();
#ifdef MOE_EP_WITH_NCCL
  const auto& api = cuda::nccl::nccl_api();
  MOE_EP_CUDA_CHECK(cudaSetDevice(0));
  ncclUniqueId id;
  ASSERT_EQ(api.GetUniqueId(&id), ncclSuccess);
  ncclComm_t comm = nullptr;
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  ASSERT_EQ(api.CommInitRankConfig(&comm, 1, id, 0, &config), ncclSuccess);
  Bootstrap b;
  b.device = Device::cuda(0);
  b.comm = CommSource::kNcclComm;
  b.nccl_comm = comm;
  run_world_of_one(b, "communicator handed in");
  // The runtime is gone and left the caller's communicator alone: it still works.
  int count = 0;
  EXPECT_EQ(api.CommCount(comm, &count), ncclSuccess);
  EXPECT_EQ(count, 1);
  EXPECT_EQ(api.CommDestroy(comm), ncclSuccess);
#endif
}

TEST(EpNcclWorldOfOne, ASecondRankThatNeverStartsTimesOutInInit) {
  MOE_EP_REQUIRE_NCCL();
  Bootstrap b;
  b.world_size = 2;
  b.device = Device::cuda(0);
  b.comm = CommSource::kUniqueIdFile;
  b.rendezvous = temp_path("uid_timeout");
  b.timeout_ms = 3000;
  std::filesystem::remove(b.rendezvous);
  const auto start = std::chrono::steady_clock::now();
  std::string message;
  ErrorCode code = ErrorCode::kInternal;
  try {
    auto rt = Runtime::acquire(b);
  } catch (const Error& e) {
    message = e.what();
    code = e.code();
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(code, ErrorCode::kTimeout) << message;
  EXPECT_NE(message.find("rank 0 timed out in phase nccl init"), std::string::npos) << message;
  EXPECT_LT(s, 30.0);
  fmt::print("[ ep nccl ] rank 1 never starts: {:.2f} s, {}\n", s, message);
  std::filesystem::remove(b.rendezvous);
}

}  // namespace
}  // namespace moe_ep::cudatest
