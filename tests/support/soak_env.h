// What the soak tests (tests/soak, tests/cuda/test_sm90_soak.cpp) read from the process: integer
// settings from the environment and the resident set size.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <fstream>

namespace moe_ep::testsupport {

inline int64_t env_int(const char* name, int64_t fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::strtoll(v, nullptr, 10) : fallback;
}

inline int64_t resident_bytes() {  // /proc/self/statm, in bytes
  std::ifstream f("/proc/self/statm");
  int64_t size = 0, resident = 0;
  f >> size >> resident;
  return resident * sysconf(_SC_PAGESIZE);
}

}  // namespace moe_ep::testsupport
