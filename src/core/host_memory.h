// Size checks before large host allocations (docs/spec.md §11: a request too large ends in an error
// that says how many bytes were needed, for what, how many are available, and which flag or
// parameter drove the size; never in std::bad_alloc or the OOM killer).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>

namespace moe_ep::detail {

// Bytes this process can still allocate: MemAvailable of /proc/meminfo, lowered to the free
// part of a cgroup v2 memory limit (memory.max - memory.current) when one is set; else
// sysconf(_SC_AVPHYS_PAGES) * page size. -1 when nothing can be read (then no check refuses).
// MOE_EP_HOST_MEMORY_LIMIT (bytes) overrides it, for tests.
int64_t available_host_bytes();
// Where available_host_bytes() got its figure ("MemAvailable in /proc/meminfo", ...).
std::string available_host_bytes_source();

// Product of non-negative factors; INT64_MAX when it does not fit in int64.
int64_t saturating_bytes(std::initializer_list<int64_t> factors);

// "" when `bytes` fit in the available host memory, else the reason: "<what> needs N bytes
// (X GiB) of host memory; Y bytes (Z GiB) are available (<source>); the size is driven by
// <driven_by>". bytes = INT64_MAX reads "more than 2^63 bytes".
std::string host_allocation_problem(int64_t bytes, std::string_view what, std::string_view driven_by);
// Throws kUnsupported with host_allocation_problem() when it is not "".
void require_host_bytes(int64_t bytes, std::string_view what, std::string_view driven_by);

}  // namespace moe_ep::detail
