#include "core/host_memory.h"

#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <limits>
#include <sstream>

#include <fmt/format.h>

#include "core/check.h"

namespace moe_ep::detail {
namespace {

constexpr int64_t kUnknown = -1;

int64_t env_limit() {
  const char* env = std::getenv("MOE_EP_HOST_MEMORY_LIMIT");
  if (!env || !*env) return kUnknown;
  char* end = nullptr;
  const long long v = std::strtoll(env, &end, 10);
  MOE_EP_CHECK(end != env && *end == '\0' && v >= 0,
               "MOE_EP_HOST_MEMORY_LIMIT = '{}' is invalid; expected a byte count >= 0", env);
  return v;
}

int64_t meminfo_available() {
  std::ifstream f("/proc/meminfo");
  std::string key;
  int64_t kib = 0;
  std::string unit;
  while (f >> key >> kib) {
    std::getline(f, unit);
    if (key == "MemAvailable:") return kib * 1024;
  }
  return kUnknown;
}

int64_t read_int(const char* path) {
  std::ifstream f(path);
  std::string s;
  if (!(f >> s) || s == "max") return kUnknown;
  char* end = nullptr;
  const long long v = std::strtoll(s.c_str(), &end, 10);
  return (end != s.c_str() && *end == '\0') ? v : kUnknown;
}

// The free part of this process's cgroup v2 limit (the root cgroup's files in a container).
int64_t cgroup_available() {
  const int64_t max = read_int("/sys/fs/cgroup/memory.max");
  const int64_t current = read_int("/sys/fs/cgroup/memory.current");
  if (max < 0 || current < 0) return kUnknown;
  return max > current ? max - current : 0;
}

struct Figure {
  int64_t bytes;
  std::string source;
};

Figure available() {
  if (const int64_t v = env_limit(); v >= 0) return {v, "MOE_EP_HOST_MEMORY_LIMIT"};
  Figure f{meminfo_available(), "MemAvailable in /proc/meminfo"};
  if (f.bytes < 0) {
    const long pages = sysconf(_SC_AVPHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    if (pages > 0 && page > 0) f = {int64_t{pages} * page, "sysconf(_SC_AVPHYS_PAGES)"};
  }
  const int64_t cg = cgroup_available();
  if (cg >= 0 && (f.bytes < 0 || cg < f.bytes)) f = {cg, "the cgroup limit memory.max - memory.current"};
  return f;
}

std::string gib(int64_t bytes) { return fmt::format("{:.1f} GiB", static_cast<double>(bytes) / (1 << 30)); }

}  // namespace

int64_t available_host_bytes() { return available().bytes; }
std::string available_host_bytes_source() { return available().source; }

int64_t saturating_bytes(std::initializer_list<int64_t> factors) {
  int64_t n = 1;
  for (int64_t f : factors) {
    if (f <= 0) return 0;
    if (__builtin_mul_overflow(n, f, &n)) return std::numeric_limits<int64_t>::max();
  }
  return n;
}

std::string host_allocation_problem(int64_t bytes, std::string_view what, std::string_view driven_by) {
  const Figure avail = available();
  if (avail.bytes < 0 || bytes <= avail.bytes) return "";
  const std::string need = bytes == std::numeric_limits<int64_t>::max()
                               ? std::string("more than 2^63 bytes")
                               : fmt::format("{} bytes ({})", bytes, gib(bytes));
  return fmt::format("{} needs {} of host memory; {} bytes ({}) are available ({}); the size is "
                     "driven by {}", what, need, avail.bytes, gib(avail.bytes), avail.source,
                     driven_by);
}

void require_host_bytes(int64_t bytes, std::string_view what, std::string_view driven_by) {
  const std::string problem = host_allocation_problem(bytes, what, driven_by);
  MOE_EP_CHECK_CODE(problem.empty(), ErrorCode::kUnsupported, "{}", problem);
}

}  // namespace moe_ep::detail
