// Rendezvous of an NCCL world before its communicator exists: rank 0 makes the unique id (an
// opaque 128-byte blob, ncclUniqueId) and the other ranks receive it, through a file or a small
// TCP store. Framework-free (POSIX files and sockets); NCCL itself is not needed here, so CPU
// machines test all of it.
//
// Every wait is bounded by the bootstrap timeout and fails with kTimeout naming the rank, the
// phase and whom it waited for; malformed input fails with kInvalidArgument / kRuntime naming
// the path or the address and what was expected.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

namespace moe_ep::detail {

inline constexpr size_t kUniqueIdBytes = 128;  // sizeof(ncclUniqueId)
using UniqueId = std::array<uint8_t, kUniqueIdBytes>;
using MakeUniqueId = std::function<UniqueId()>;

struct HostPort {
  std::string host;
  int port = 0;
};
// "host:port" (the last ':' splits; "[::1]:port" for IPv6); throws kInvalidArgument naming
// Bootstrap.rendezvous.
HostPort parse_host_port(std::string_view text);

// ---- unique-id file ----
// One line: "moe_ep-unique-id v1 world_size=<R> <256 lowercase hex digits>\n".
std::string format_unique_id_file(const UniqueId& id, int world_size);
// Throws kRuntime naming `path` when the text is not such a line or its world_size differs.
UniqueId parse_unique_id_file(std::string_view text, int world_size, std::string_view path);

// Rank 0 calls make_id() and publishes the file atomically (a temporary file renamed onto
// `path`, replacing any earlier one: use a fresh path per world); the other ranks poll for it
// until `timeout`. Returns the id on every rank.
UniqueId exchange_unique_id_file(const std::string& path, int rank, int world_size,
                                 std::chrono::milliseconds timeout, const MakeUniqueId& make_id);

// ---- TCP store ----
// Rank 0 listens on host:port, calls make_id() and answers each rank's hello (magic, rank,
// world_size) with the id; it returns once all world_size - 1 ranks were answered, or throws
// kTimeout naming the ranks that never connected. The other ranks connect (retrying while
// rank 0 is not listening yet), send their hello and read the id, all within `timeout`.
// Protocol (network byte order):
//   hello  = "MOEEPUID" u32 rank u32 world_size            (16 bytes)
//   answer = u32 status (0 ok) then 128 id bytes (status 0) | u32 length + message (else)
UniqueId exchange_unique_id_tcp(const std::string& host_port, int rank, int world_size,
                                std::chrono::milliseconds timeout, const MakeUniqueId& make_id);

}  // namespace moe_ep::detail
