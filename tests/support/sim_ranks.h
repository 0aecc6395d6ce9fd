// Runs a function on R simulated ranks, one thread each, and collects what each rank threw.
#pragma once

#include <exception>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "moe_ep/error.h"
#include "moe_ep/runtime.h"

namespace moe_ep::testsupport {

struct RankOutcome {
  bool threw = false;
  ErrorCode code = ErrorCode::kInternal;
  std::string message;  // what() of the exception
};

inline std::vector<RankOutcome> run_ranks(int world_size, const std::function<void(int)>& body) {
  std::vector<RankOutcome> out(world_size);
  std::vector<std::thread> threads;
  for (int r = 0; r < world_size; ++r)
    threads.emplace_back([&, r] {
      try {
        body(r);
      } catch (const Error& e) {
        out[r] = {true, e.code(), e.what()};
      } catch (const std::exception& e) {
        out[r] = {true, ErrorCode::kInternal, std::string("non-moe_ep exception: ") + e.what()};
      }
    });
  for (auto& t : threads) t.join();
  return out;
}

inline Bootstrap simulated_bootstrap(int world_size, int rank, int64_t timeout_ms = 5000) {
  Bootstrap b;
  b.world_size = world_size;
  b.rank = rank;
  b.comm = CommSource::kSimulated;
  b.timeout_ms = timeout_ms;
  return b;
}

// A short summary of the outcomes, for failure messages.
inline std::string outcomes_str(const std::vector<RankOutcome>& out) {
  std::string s;
  for (size_t r = 0; r < out.size(); ++r)
    s += "rank " + std::to_string(r) + ": " + (out[r].threw ? out[r].message : "ok") + "\n";
  return s;
}

}  // namespace moe_ep::testsupport
