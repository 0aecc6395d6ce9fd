// The NCCL unique-id rendezvous without NCCL (core/rendezvous.h): host:port parsing, the
// unique-id file format, and both exchanges between threads of this process: the file, and the
// TCP store on real loopback sockets, including ranks that never come (kTimeout naming rank and
// phase) and ranks that disagree (refused with the reason).
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include <netinet/in.h>
#include <sys/socket.h>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "core/rendezvous.h"
#include "moe_ep/error.h"
#include "support/sim_ranks.h"

namespace moe_ep::detail {
namespace {

using namespace std::chrono_literals;
using testsupport::run_ranks;

UniqueId sample_id(uint8_t seed) {
  UniqueId id;
  for (size_t i = 0; i < id.size(); ++i) id[i] = static_cast<uint8_t>(seed * 31 + i * 7);
  return id;
}

std::string temp_path(const std::string& name) {
  static std::atomic<int> n{0};
  return (std::filesystem::temp_directory_path() /
          fmt::format("moe_ep_test_{}_{}_{}", name, ::getpid(), n++)).string();
}

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

template <class Fn>
std::pair<ErrorCode, std::string> error_of(Fn&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return {e.code(), e.what()};
  }
  return {ErrorCode::kInternal, "no error"};
}

TEST(Rendezvous, HostPortParsing) {
  EXPECT_EQ(parse_host_port("localhost:29500").host, "localhost");
  EXPECT_EQ(parse_host_port("localhost:29500").port, 29500);
  EXPECT_EQ(parse_host_port("[::1]:80").host, "::1");
  EXPECT_EQ(parse_host_port("10.0.0.1:1").port, 1);
  for (const char* bad : {"localhost", ":29500", "host:", "host:0", "host:65536", "host:12x", "[]:5"}) {
    const auto [code, msg] = error_of([&] { parse_host_port(bad); });
    EXPECT_EQ(code, ErrorCode::kInvalidArgument) << bad;
    EXPECT_NE(msg.find("Bootstrap.rendezvous"), std::string::npos) << msg;
  }
}

TEST(Rendezvous, UniqueIdFileFormatRoundTripsAndRejectsWhatIsNotOurs) {
  const UniqueId id = sample_id(3);
  const std::string text = format_unique_id_file(id, 4);
  EXPECT_EQ(text.rfind("moe_ep-unique-id v1 world_size=4 ", 0), 0u) << text;
  EXPECT_EQ(parse_unique_id_file(text, 4, "f"), id);
  auto fails_with = [](const std::string& t, int world, const std::string& expect) {
    const auto [code, msg] = error_of([&] { parse_unique_id_file(t, world, "/tmp/f"); });
    EXPECT_EQ(code, ErrorCode::kRuntime) << msg;
    EXPECT_NE(msg.find(expect), std::string::npos) << msg;
    EXPECT_NE(msg.find("/tmp/f"), std::string::npos) << msg;
  };
  fails_with(text, 8, "world_size = 4; this rank has world_size = 8");
  fails_with("hello world", 4, "not a moe_ep rendezvous file");
  fails_with("moe_ep-unique-id v1 world_size=x " + std::string(256, '0'), 4, "malformed world_size");
  fails_with("moe_ep-unique-id v1 world_size=4 abc", 4, "3 hex digits; expected 256");
  fails_with("moe_ep-unique-id v1 world_size=4 " + std::string(254, '0') + "zz", 4, "not hexadecimal");
}

TEST(Rendezvous, FileExchangeGivesEveryRankRankZerosId) {
  const std::string path = temp_path("uid");
  const UniqueId id = sample_id(9);
  std::vector<UniqueId> got(4);
  int made = 0;
  const auto out = run_ranks(4, [&](int r) {
    if (r == 0) std::this_thread::sleep_for(50ms);  // the others wait for the file
    got[r] = exchange_unique_id_file(path, r, 4, 5000ms, [&] {
      ++made;
      return id;
    });
  });
  for (int r = 0; r < 4; ++r) {
    EXPECT_FALSE(out[r].threw) << testsupport::outcomes_str(out);
    EXPECT_EQ(got[r], id) << "rank " << r;
  }
  EXPECT_EQ(made, 1);  // only rank 0 makes the id
  std::filesystem::remove(path);
}

TEST(Rendezvous, FileExchangeTimesOutNamingRankAndPhase) {
  const std::string path = temp_path("uid_missing");
  const auto start = std::chrono::steady_clock::now();
  const auto [code, msg] = error_of([&] { exchange_unique_id_file(path, 2, 3, 150ms, {}); });
  EXPECT_EQ(code, ErrorCode::kTimeout);
  EXPECT_NE(msg.find("rank 2 timed out in phase unique-id file rendezvous"), std::string::npos) << msg;
  EXPECT_NE(msg.find("waiting for rank 0"), std::string::npos) << msg;
  EXPECT_LT(std::chrono::steady_clock::now() - start, 3s);
  // A file of another world is refused, not used.
  std::ofstream(path) << format_unique_id_file(sample_id(1), 2);
  const auto [code2, msg2] = error_of([&] { exchange_unique_id_file(path, 1, 4, 150ms, {}); });
  EXPECT_EQ(code2, ErrorCode::kRuntime);
  EXPECT_NE(msg2.find("world_size = 2"), std::string::npos) << msg2;
  std::filesystem::remove(path);
}

TEST(Rendezvous, TcpStoreGivesEveryRankRankZerosId) {
  const std::string addr = fmt::format("127.0.0.1:{}", free_port());
  const UniqueId id = sample_id(5);
  std::vector<UniqueId> got(5);
  const auto out = run_ranks(5, [&](int r) {
    if (r == 0) std::this_thread::sleep_for(100ms);  // clients retry until rank 0 listens
    got[r] = exchange_unique_id_tcp(addr, r, 5, 5000ms, [&] { return id; });
  });
  for (int r = 0; r < 5; ++r) {
    EXPECT_FALSE(out[r].threw) << testsupport::outcomes_str(out);
    EXPECT_EQ(got[r], id) << "rank " << r;
  }
}

TEST(Rendezvous, TcpStoreRankZeroTimesOutNamingTheRanksThatNeverConnected) {
  const std::string addr = fmt::format("127.0.0.1:{}", free_port());
  const auto out = run_ranks(3, [&](int r) {
    if (r == 2) return;  // never connects
    exchange_unique_id_tcp(addr, r, 4, 400ms, [] { return sample_id(1); });
  });
  EXPECT_TRUE(out[0].threw);
  EXPECT_EQ(out[0].code, ErrorCode::kTimeout) << out[0].message;
  EXPECT_NE(out[0].message.find("rank 0 timed out in phase tcp-store rendezvous"), std::string::npos)
      << out[0].message;
  EXPECT_NE(out[0].message.find("rank(s) 2, 3 never connected"), std::string::npos) << out[0].message;
  EXPECT_FALSE(out[1].threw) << out[1].message;  // rank 1 got its answer at once
}

TEST(Rendezvous, TcpStoreClientTimesOutWithoutRankZero) {
  const std::string addr = fmt::format("127.0.0.1:{}", free_port());
  const auto start = std::chrono::steady_clock::now();
  const auto [code, msg] = error_of([&] { exchange_unique_id_tcp(addr, 3, 4, 200ms, {}); });
  EXPECT_EQ(code, ErrorCode::kTimeout) << msg;
  EXPECT_NE(msg.find("rank 3 timed out in phase tcp-store connect to rank 0 at 127.0.0.1:"),
            std::string::npos) << msg;
  EXPECT_LT(std::chrono::steady_clock::now() - start, 3s);
}

TEST(Rendezvous, TcpStoreRefusesARankOfAnotherWorld) {
  const std::string addr = fmt::format("127.0.0.1:{}", free_port());
  std::pair<ErrorCode, std::string> client;
  const auto out = run_ranks(2, [&](int r) {
    if (r == 0) {
      exchange_unique_id_tcp(addr, 0, 2, 600ms, [] { return sample_id(2); });
    } else {
      client = error_of([&] { exchange_unique_id_tcp(addr, 1, 3, 2000ms, {}); });
    }
  });
  EXPECT_EQ(client.first, ErrorCode::kRuntime) << client.second;
  EXPECT_NE(client.second.find("rank 1 says world_size = 3, rank 0 has world_size = 2"),
            std::string::npos) << client.second;
  EXPECT_EQ(out[0].code, ErrorCode::kTimeout) << out[0].message;  // rank 1 of world 2 never came
  EXPECT_NE(out[0].message.find("refused: rank 1 says world_size = 3"), std::string::npos) << out[0].message;
}

}  // namespace
}  // namespace moe_ep::detail
