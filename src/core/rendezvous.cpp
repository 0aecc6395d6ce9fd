#include "core/rendezvous.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>
#include <thread>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/check.h"

namespace moe_ep::detail {
namespace {

using Clock = std::chrono::steady_clock;

constexpr std::string_view kFileMagic = "moe_ep-unique-id v1";
constexpr char kHelloMagic[8] = {'M', 'O', 'E', 'E', 'P', 'U', 'I', 'D'};
constexpr size_t kHelloBytes = 16;

int64_t ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(b - a).count();
}

int ms_left(Clock::time_point deadline) {
  const int64_t left = ms_between(Clock::now(), deadline);
  return left <= 0 ? 0 : static_cast<int>(std::min<int64_t>(left, 1 << 30));
}

std::string errno_str(int err) { return fmt::format("{} ({})", std::strerror(err), err); }

// An owned file descriptor.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() { reset(); }
  Fd(Fd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  Fd& operator=(Fd&& o) noexcept {
    std::swap(fd_, o.fd_);
    return *this;
  }
  int get() const { return fd_; }
  void reset() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
};

void put_u32(uint8_t* p, uint32_t v) {
  const uint32_t n = htonl(v);
  std::memcpy(p, &n, 4);
}
uint32_t get_u32(const uint8_t* p) {
  uint32_t n;
  std::memcpy(&n, p, 4);
  return ntohl(n);
}

// Moves n bytes through fd, each wait bounded by the deadline; false on timeout or a closed
// peer (then *error says which).
bool transfer_all(int fd, uint8_t* data, size_t n, bool sending, Clock::time_point deadline, std::string* error) {
  const char* what = sending ? "send" : "recv";
  size_t done = 0;
  while (done < n) {
    pollfd p{fd, static_cast<short>(sending ? POLLOUT : POLLIN), 0};
    const int r = ::poll(&p, 1, ms_left(deadline));
    if (r == 0) {
      *error = sending ? "timed out while sending" : "timed out while receiving";
      return false;
    }
    if (r < 0) {
      if (errno == EINTR) continue;
      *error = "poll failed: " + errno_str(errno);
      return false;
    }
    const ssize_t moved = sending ? ::send(fd, data + done, n - done, MSG_NOSIGNAL) : ::recv(fd, data + done, n - done, 0);
    if (moved == 0 && !sending) {
      *error = "the peer closed the connection";
      return false;
    }
    if (moved < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      *error = std::string(what) + " failed: " + errno_str(errno);
      return false;
    }
    done += static_cast<size_t>(moved);
  }
  return true;
}

bool send_all(int fd, const uint8_t* data, size_t n, Clock::time_point deadline, std::string* error) {
  return transfer_all(fd, const_cast<uint8_t*>(data), n, true, deadline, error);  // send only reads it
}

bool recv_all(int fd, uint8_t* data, size_t n, Clock::time_point deadline, std::string* error) {
  return transfer_all(fd, data, n, false, deadline, error);
}

struct AddrInfoFree {
  void operator()(addrinfo* a) const { ::freeaddrinfo(a); }
};

std::unique_ptr<addrinfo, AddrInfoFree> resolve(const HostPort& hp, bool passive, int rank) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = passive ? AI_PASSIVE : 0;
  addrinfo* res = nullptr;
  const std::string port = std::to_string(hp.port);
  const char* host = hp.host == "*" ? nullptr : hp.host.c_str();
  const int rc = ::getaddrinfo(host, port.c_str(), &hints, &res);
  MOE_EP_CHECK_CODE(rc == 0 && res != nullptr, ErrorCode::kRuntime,
                    "rank {}: tcp-store address '{}:{}' does not resolve: {}", rank, hp.host,
                    hp.port, ::gai_strerror(rc));
  return std::unique_ptr<addrinfo, AddrInfoFree>(res);
}

void set_nonblocking(int fd) { ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL, 0) | O_NONBLOCK); }

std::string hex(const UniqueId& id) {
  static const char* digits = "0123456789abcdef";
  std::string s(2 * id.size(), '0');
  for (size_t i = 0; i < id.size(); ++i) {
    s[2 * i] = digits[id[i] >> 4];
    s[2 * i + 1] = digits[id[i] & 15];
  }
  return s;
}

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// ---- TCP store, rank 0 ----
UniqueId serve_unique_id(const HostPort& hp, int world_size, Clock::time_point start,
                         Clock::time_point deadline, const MakeUniqueId& make_id) {
  auto addrs = resolve(hp, true, 0);
  Fd listener;
  std::string last_error = "no address";
  for (addrinfo* a = addrs.get(); a != nullptr; a = a->ai_next) {
    Fd fd(::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol));
    if (fd.get() < 0) {
      last_error = "socket: " + errno_str(errno);
      continue;
    }
    const int one = 1;
    ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(fd.get(), a->ai_addr, a->ai_addrlen) != 0 || ::listen(fd.get(), 128) != 0) {
      last_error = errno_str(errno);
      continue;
    }
    listener = std::move(fd);
    break;
  }
  MOE_EP_CHECK_CODE(listener.get() >= 0, ErrorCode::kRuntime,
                    "rank 0 cannot listen on tcp-store address {}:{}: {}", hp.host, hp.port,
                    last_error);
  set_nonblocking(listener.get());
  const UniqueId id = make_id();

  std::vector<char> answered(world_size, 0);
  answered[0] = 1;
  int num_answered = 1;
  std::vector<std::string> refused;
  while (num_answered < world_size) {
    pollfd p{listener.get(), POLLIN, 0};
    const int r = ::poll(&p, 1, ms_left(deadline));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      std::string missing;
      for (int q = 1; q < world_size; ++q)
        if (!answered[q]) missing += fmt::format("{}{}", missing.empty() ? "" : ", ", q);
      MOE_EP_FAIL(ErrorCode::kTimeout,
                  "rank 0 timed out in phase tcp-store rendezvous on {}:{} after {} ms: rank(s) {} "
                  "never connected{}", hp.host, hp.port, ms_between(start, Clock::now()), missing,
                  refused.empty() ? "" : fmt::format(" (refused: {})", fmt::join(refused, "; ")));
    }
    Fd conn(::accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC));
    if (conn.get() < 0) continue;
    uint8_t hello[kHelloBytes];
    std::string error;
    // A connected peer gets a short, bounded slice of the deadline to say hello.
    const auto hello_deadline = std::min(deadline, Clock::now() + std::chrono::seconds(10));
    if (!recv_all(conn.get(), hello, kHelloBytes, hello_deadline, &error)) {
      refused.push_back("a connection without a hello: " + error);
      continue;
    }
    const uint32_t q = get_u32(hello + 8), n = get_u32(hello + 12);
    std::string why;
    if (std::memcmp(hello, kHelloMagic, 8) != 0)
      why = "not a moe_ep tcp-store hello (wrong magic)";
    else if (static_cast<int>(n) != world_size)
      why = fmt::format("rank {} says world_size = {}, rank 0 has world_size = {}", q, n, world_size);
    else if (q == 0 || static_cast<int>(q) >= world_size)
      why = fmt::format("rank {} is outside 1..{}", q, world_size - 1);
    else if (answered[q])
      why = fmt::format("rank {} connected twice", q);
    std::vector<uint8_t> answer;
    if (why.empty()) {
      answer.resize(4 + kUniqueIdBytes);
      put_u32(answer.data(), 0);
      std::memcpy(answer.data() + 4, id.data(), kUniqueIdBytes);
    } else {
      answer.resize(8 + why.size());
      put_u32(answer.data(), 1);
      put_u32(answer.data() + 4, static_cast<uint32_t>(why.size()));
      std::memcpy(answer.data() + 8, why.data(), why.size());
      refused.push_back(why);
    }
    if (!send_all(conn.get(), answer.data(), answer.size(), hello_deadline, &error)) {
      if (why.empty()) refused.push_back(fmt::format("rank {}: {}", q, error));
      continue;
    }
    if (why.empty()) {
      answered[q] = 1;
      ++num_answered;
    }
  }
  return id;
}

// ---- TCP store, ranks 1.. ----
UniqueId fetch_unique_id(const HostPort& hp, int rank, int world_size, Clock::time_point start,
                         Clock::time_point deadline) {
  std::string last_error = "no attempt";
  while (true) {
    auto addrs = resolve(hp, false, rank);
    for (addrinfo* a = addrs.get(); a != nullptr; a = a->ai_next) {
      Fd fd(::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol));
      if (fd.get() < 0) {
        last_error = "socket: " + errno_str(errno);
        continue;
      }
      set_nonblocking(fd.get());
      if (::connect(fd.get(), a->ai_addr, a->ai_addrlen) != 0) {
        if (errno != EINPROGRESS) {
          last_error = errno_str(errno);
          continue;
        }
        pollfd p{fd.get(), POLLOUT, 0};
        if (::poll(&p, 1, std::min(ms_left(deadline), 1000)) <= 0) {
          last_error = "connect did not complete";
          continue;
        }
        int err = 0;
        socklen_t len = sizeof(err);
        ::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
        if (err != 0) {
          last_error = errno_str(err);
          continue;
        }
      }
      uint8_t hello[kHelloBytes];
      std::memcpy(hello, kHelloMagic, 8);
      put_u32(hello + 8, static_cast<uint32_t>(rank));
      put_u32(hello + 12, static_cast<uint32_t>(world_size));
      std::string error;
      uint8_t status[4];
      if (!send_all(fd.get(), hello, kHelloBytes, deadline, &error) ||
          !recv_all(fd.get(), status, 4, deadline, &error)) {
        MOE_EP_FAIL(error.find("timed out") != std::string::npos ? ErrorCode::kTimeout
                                                                 : ErrorCode::kRuntime,
                    "rank {} failed in phase tcp-store rendezvous with rank 0 at {}:{} after {} "
                    "ms: {}", rank, hp.host, hp.port, ms_between(start, Clock::now()), error);
      }
      if (get_u32(status) != 0) {
        uint8_t len_bytes[4];
        std::string message = "(no reason given)";
        if (recv_all(fd.get(), len_bytes, 4, deadline, &error)) {
          const uint32_t len = std::min<uint32_t>(get_u32(len_bytes), 4096);
          std::string m(len, '\0');
          if (recv_all(fd.get(), reinterpret_cast<uint8_t*>(m.data()), len, deadline, &error))
            message = m;
        }
        MOE_EP_FAIL(ErrorCode::kRuntime, "rank {}: rank 0's tcp-store at {}:{} refused this rank: {}",
                    rank, hp.host, hp.port, message);
      }
      UniqueId id;
      if (!recv_all(fd.get(), id.data(), kUniqueIdBytes, deadline, &error))
        MOE_EP_FAIL(ErrorCode::kRuntime, "rank {}: reading the unique id from {}:{} failed: {}", rank,
                    hp.host, hp.port, error);
      return id;
    }
    if (ms_left(deadline) == 0)
      MOE_EP_FAIL(ErrorCode::kTimeout,
                  "rank {} timed out in phase tcp-store connect to rank 0 at {}:{} after {} ms "
                  "(last error: {}); is rank 0 running with the same rendezvous?",
                  rank, hp.host, hp.port, ms_between(start, Clock::now()), last_error);
    std::this_thread::sleep_for(std::chrono::milliseconds(std::min(ms_left(deadline), 50)));
  }
}

}  // namespace

HostPort parse_host_port(std::string_view text) {
  const auto colon = text.rfind(':');
  MOE_EP_CHECK(colon != std::string_view::npos && colon > 0 && colon + 1 < text.size(),
               "Bootstrap.rendezvous = '{}' is invalid; tcp-store expects host:port", text);
  std::string_view host = text.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  int port = 0;
  const char* first = text.data() + colon + 1;
  const char* last = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(first, last, port);
  MOE_EP_CHECK(ec == std::errc() && ptr == last && port >= 1 && port <= 65535,
               "Bootstrap.rendezvous = '{}' is invalid; tcp-store expects host:port with a port "
               "in 1..65535", text);
  MOE_EP_CHECK(!host.empty(), "Bootstrap.rendezvous = '{}' is invalid; the host is empty", text);
  return {std::string(host), port};
}

std::string format_unique_id_file(const UniqueId& id, int world_size) {
  return fmt::format("{} world_size={} {}\n", kFileMagic, world_size, hex(id));
}

UniqueId parse_unique_id_file(std::string_view text, int world_size, std::string_view path) {
  std::istringstream in{std::string(text)};
  std::string magic_a, magic_b, ws, digits;
  in >> magic_a >> magic_b >> ws >> digits;
  MOE_EP_CHECK_CODE(magic_a + " " + magic_b == kFileMagic, ErrorCode::kRuntime,
                    "unique-id file '{}' does not start with '{}'; it is not a moe_ep rendezvous "
                    "file", path, kFileMagic);
  int file_world = -1;
  if (ws.rfind("world_size=", 0) == 0) {
    const char* first = ws.data() + 11;
    const auto [ptr, ec] = std::from_chars(first, ws.data() + ws.size(), file_world);
    if (ec != std::errc() || ptr != ws.data() + ws.size()) file_world = -1;
  }
  MOE_EP_CHECK_CODE(file_world >= 1, ErrorCode::kRuntime,
                    "unique-id file '{}': malformed world_size field '{}'; expected world_size=<R>",
                    path, ws);
  MOE_EP_CHECK_CODE(file_world == world_size, ErrorCode::kRuntime,
                    "unique-id file '{}' was written for world_size = {}; this rank has "
                    "world_size = {} (a stale file of another world? use a fresh path)",
                    path, file_world, world_size);
  MOE_EP_CHECK_CODE(digits.size() == 2 * kUniqueIdBytes, ErrorCode::kRuntime,
                    "unique-id file '{}': the id has {} hex digits; expected {}", path,
                    digits.size(), 2 * kUniqueIdBytes);
  UniqueId id;
  for (size_t i = 0; i < kUniqueIdBytes; ++i) {
    const int hi = hex_digit(digits[2 * i]), lo = hex_digit(digits[2 * i + 1]);
    MOE_EP_CHECK_CODE(hi >= 0 && lo >= 0, ErrorCode::kRuntime,
                      "unique-id file '{}': '{}' at digit {} is not hexadecimal", path,
                      digits.substr(2 * i, 2), 2 * i);
    id[i] = static_cast<uint8_t>(hi * 16 + lo);
  }
  return id;
}

UniqueId exchange_unique_id_file(const std::string& path, int rank, int world_size,
                                 std::chrono::milliseconds timeout, const MakeUniqueId& make_id) {
  const auto start = Clock::now();
  if (rank == 0) {
    const UniqueId id = make_id();
    const std::string tmp = fmt::format("{}.tmp.{}", path, ::getpid());
    {
      std::ofstream out(tmp, std::ios::trunc);
      out << format_unique_id_file(id, world_size);
      out.flush();
      MOE_EP_CHECK_CODE(out.good(), ErrorCode::kRuntime,
                        "rank 0 cannot write the unique-id file '{}': {}", tmp, errno_str(errno));
    }
    MOE_EP_CHECK_CODE(::rename(tmp.c_str(), path.c_str()) == 0, ErrorCode::kRuntime,
                      "rank 0 cannot publish the unique-id file '{}': {}", path, errno_str(errno));
    return id;
  }
  const auto deadline = start + timeout;
  while (true) {
    std::ifstream in(path);
    if (in.good()) {
      std::stringstream text;
      text << in.rdbuf();
      // Publication is a rename, so a file that exists is complete.
      return parse_unique_id_file(text.str(), world_size, path);
    }
    MOE_EP_CHECK_CODE(Clock::now() < deadline, ErrorCode::kTimeout,
                      "rank {} timed out in phase unique-id file rendezvous after {} ms waiting "
                      "for rank 0 to write '{}'", rank, ms_between(start, Clock::now()), path);
    std::this_thread::sleep_for(std::chrono::milliseconds(std::min(ms_left(deadline), 20)));
  }
}

UniqueId exchange_unique_id_tcp(const std::string& host_port, int rank, int world_size,
                                std::chrono::milliseconds timeout, const MakeUniqueId& make_id) {
  const HostPort hp = parse_host_port(host_port);
  const auto start = Clock::now();
  const auto deadline = start + timeout;
  if (rank == 0) return serve_unique_id(hp, world_size, start, deadline, make_id);
  return fetch_unique_id(hp, rank, world_size, start, deadline);
}

}  // namespace moe_ep::detail
