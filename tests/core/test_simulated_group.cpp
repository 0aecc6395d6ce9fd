// The public SimulatedEpGroup (moe_ep/simulated_group.h) where it has behaviour of its own,
// without a GPU: bad options give kInvalidArgument naming the field on every device and build;
// a device whose backend has no group (the CPU, a GPU this build or machine cannot use) gives
// kUnsupported with the reason. The group itself runs in tests/cuda/test_ep_sim.cpp.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "moe_ep/error.h"
#include "moe_ep/simulated_group.h"
#include "support/ep_harness.h"
#include "support/layer_problem.h"

namespace moe_ep::testsupport {
namespace {

SimulatedGroupOptions options(const Problem& p, int R, Device device) {
  SimulatedGroupOptions o;
  o.world_size = R;
  o.device = device;
  o.desc = p.desc();
  return o;
}

std::vector<WeightPack> rank_packs(const Problem& p, const WeightSet& w, int R) {
  std::vector<WeightPack> packs;
  const int64_t E_loc = p.num_experts / R;
  for (int r = 0; r < R; ++r) packs.push_back(slice_experts(w.pack(), r * E_loc, E_loc));
  return packs;
}

// The error of create, or "" when it succeeds.
std::string create_error(const SimulatedGroupOptions& o, std::span<const WeightPack> packs, ErrorCode* code) {
  try {
    SimulatedEpGroup::create(o, packs);
  } catch (const Error& e) {
    *code = e.code();
    return e.message();
  }
  return "";
}

TEST(SimulatedGroup, BadOptionsNameTheFieldOnEveryDevice) {
  const Problem p = tiny_problem("mxfp4");
  const WeightSet w = random_weights(p, WeightFormat::kMXFP4, 1);
  const std::vector<WeightPack> two = rank_packs(p, w, 2);
  for (Device device : {Device::cpu(), Device::cuda(0), Device::cuda(999)}) {
    struct Case {
      std::function<void(SimulatedGroupOptions&)> change;
      size_t packs;
      const char* expected;
    };
    const Case cases[] = {
        {[](SimulatedGroupOptions& o) { o.world_size = 0; }, 0, "world_size = 0"},
        {[](SimulatedGroupOptions&) {}, 1, "weights has 1 entries; expected one per rank (world_size = 2)"},
        {[](SimulatedGroupOptions& o) { o.timeout_ms = 0; }, 2, "timeout_ms = 0"},
        {[](SimulatedGroupOptions& o) { o.world_size = 3; }, 3, "not divisible by world_size = 3"},
        {[](SimulatedGroupOptions& o) { o.desc.top_k = 0; }, 2, "top_k"},
    };
    for (const Case& c : cases) {
      SimulatedGroupOptions o = options(p, 2, device);
      c.change(o);
      std::vector<WeightPack> packs(c.packs, two[0]);
      ErrorCode code = ErrorCode::kInternal;
      const std::string m = create_error(o, packs, &code);
      EXPECT_EQ(code, ErrorCode::kInvalidArgument) << device.str() << ": " << m;
      EXPECT_NE(m.find(c.expected), std::string::npos) << device.str() << ": '" << m << "' lacks '" << c.expected << "'";
    }
  }
}

TEST(SimulatedGroup, TheCpuHasNoneAndSaysWhatToUseInstead) {
  const Problem p = tiny_problem("nvfp4");
  const WeightSet w = random_weights(p, WeightFormat::kNVFP4, 2);
  ErrorCode code = ErrorCode::kInternal;
  const std::string m = create_error(options(p, 2, Device::cpu()), rank_packs(p, w, 2), &code);
  EXPECT_EQ(code, ErrorCode::kUnsupported) << m;
  EXPECT_NE(m.find("backend 'cpu' has none"), std::string::npos) << m;
  EXPECT_NE(m.find("CommSource::kSimulated"), std::string::npos) << m;
}

// cuda:999 exists on no machine: a build without CUDA has no backend for it, a CUDA build cannot
// read its compute capability. Either way the reason names the device.
TEST(SimulatedGroup, AGpuThisBuildOrMachineCannotUseIsUnsupported) {
  const Problem p = tiny_problem("mxfp4");
  const WeightSet w = random_weights(p, WeightFormat::kMXFP4, 3);
  ErrorCode code = ErrorCode::kInternal;
  const std::string m = create_error(options(p, 2, Device::cuda(999)), rank_packs(p, w, 2), &code);
  EXPECT_EQ(code, ErrorCode::kUnsupported) << m;
  EXPECT_NE(m.find("a simulated EP group on cuda:999"), std::string::npos) << m;
  const bool no_backend = m.find("this build has no backend for the device") != std::string::npos;
  const bool unusable = m.find("the device has none (it cannot be used)") != std::string::npos;
  EXPECT_TRUE(no_backend || unusable) << m;
}

}  // namespace
}  // namespace moe_ep::testsupport
