// Fault injection for the expert-parallel tests (tests/cpu/test_ep_faults.cpp,
// tests/cuda/test_ep_sim_faults.cpp): the EP layers call fault_point(rank, point) at named
// points of a forward; a test installs a hook that throws, sleeps or makes the rank leave there.
// Without a hook a point costs one atomic load.
//
//   point        CPU ranks (src/cpu/ep_layer.cpp)        simulated GPU ranks (src/cuda/ep/sim_layer.cpp)
//   "dispatch"   inside dispatch, after the rows for     after the rank's rows are prepared on its
//                rank 0 were written, before the others  stream, before the "prepare" meeting
//   "combine"    after the dispatch barrier, before the  after rank 0 launched dispatch, experts and
//                experts run and the combine barrier     combine, before the "launch" meeting
#pragma once

#include <string_view>

namespace moe_ep::detail {

class FaultHook {
 public:
  virtual ~FaultHook() = default;
  virtual void at(int rank, std::string_view point) = 0;
};

// The hook stays owned by the caller; install and remove it while no forward runs.
void set_fault_hook(FaultHook* hook);
void fault_point(int rank, std::string_view point);

}  // namespace moe_ep::detail
