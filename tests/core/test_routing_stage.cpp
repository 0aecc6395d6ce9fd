// The public routing stage (moe_ep/routing_stage.h) on the CPU against the independent path
// (route_deepseek_v4, then Eplb::remap): ids, weights and load counters equal on random and
// structured logits, hash layers and remap-only stages, over poisoned outputs; a new placement;
// every refusal naming its parameter.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <optional>

#include "moe_ep/backend.h"
#include "moe_ep/error.h"
#include "moe_ep/routing_stage.h"
#include "support/routing_cases.h"

namespace moe_ep {
namespace {

using testsupport::RoutingCase;
using testsupport::RoutingInputs;

struct Out {
  std::vector<int64_t> ids64;
  std::vector<int32_t> ids32;
  std::vector<float> weights;
  Out(const RoutingCase& c) : ids64(c.T * c.K, 0x7F7F7F7F), ids32(c.T * c.K, 0x7F7F7F7F), weights(c.T * c.K, NAN) {}
  void* ids(const RoutingCase& c) { return c.ids64 ? static_cast<void*>(ids64.data()) : ids32.data(); }
  int64_t id(const RoutingCase& c, size_t i) const { return c.ids64 ? ids64[i] : ids32[i]; }
};

void expect_case(const RoutingCase& c) {
  RoutingInputs in = testsupport::make_routing_inputs(c);
  auto stage = RoutingStage::create(testsupport::stage_options(c, in, Device::cpu()));
  if (in.placement) stage->set_recording(true);
  Out out(c);
  stage->route(testsupport::host_args(c, in, out.ids(c), out.weights.data()));
  for (size_t i = 0; i < in.ids.size(); ++i) {
    ASSERT_EQ(out.id(c, i), in.ids[i]) << c.str() << " slot " << i;
    if (c.router) {
      uint32_t a, b;
      std::memcpy(&a, &out.weights[i], 4);
      std::memcpy(&b, &in.weights[i], 4);
      ASSERT_EQ(a, b) << c.str() << " weight " << i;
    }
  }
  EXPECT_EQ(stage->counter_values(), in.counters) << c.str();
  EXPECT_EQ(stage->read_error_flags(), 0u);
}

TEST(RoutingStage, RouterAloneEqualsTheRouter) {
  for (bool bf16 : {false, true})
    for (bool structured : {false, true})
      expect_case({.T = 41, .L = 24, .K = 6, .bf16 = bf16, .ids64 = bf16, .structured = structured, .seed = 3});
}

TEST(RoutingStage, RouterThenRemapEqualsRouterThenEplb) {
  for (int64_t T : {0, 1, 77})
    expect_case({.T = T, .L = 32, .K = 6, .structured = T == 77, .redundant = 12, .seed = static_cast<uint64_t>(T)});
}

TEST(RoutingStage, HashLayersTakeTheTable) {
  expect_case({.T = 29, .L = 16, .K = 4, .redundant = 4, .hash_layers = 2, .layer = 1});
  expect_case({.T = 29, .L = 16, .K = 4, .redundant = 4, .hash_layers = 2, .layer = 2});  // past them
}

TEST(RoutingStage, RemapOnlyKeepsHolesAndSkipsOutOfRangeIds) {
  expect_case({.T = 123, .L = 40, .K = 5, .router = false, .ids64 = true, .redundant = 9});
}

TEST(RoutingStage, NewPlacementKeepsTheCountersAndTheCapacity) {
  RoutingCase c{.T = 50, .L = 32, .K = 4, .redundant = 8};
  RoutingInputs in = testsupport::make_routing_inputs(c);
  RoutingStageOptions o = testsupport::stage_options(c, in, Device::cpu());
  o.max_replicas = in.placement->max_replicas + 2;
  auto stage = RoutingStage::create(o);
  stage->set_recording(true);
  Out out(c);
  stage->route(testsupport::host_args(c, in, out.ids(c), out.weights.data()));
  const EplbPlacement second = testsupport::hot_placement(c.L, 8, 99, 7);
  stage->set_placement(second);
  EXPECT_EQ(stage->options().placement->logical_to_physical, second.logical_to_physical);
  stage->route(testsupport::host_args(c, in, out.ids(c), out.weights.data()));
  int64_t total = 0;
  for (int64_t v : stage->counter_values()) total += v;
  EXPECT_EQ(total, 2 * c.T * c.K);  // structured-free routes never skip a slot
  stage->reset_counters();
  EXPECT_EQ(stage->counter_values(), std::vector<int64_t>(second.num_physical, 0));
  try {
    stage->set_placement(testsupport::hot_placement(c.L, 4, 1, 7));  // other E
    FAIL() << "a placement of another E was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.parameter(), "placement") << e.what();
  }
}

// The code of the Error that f throws; none when it returns.
std::optional<ErrorCode> code_of(const std::function<void()>& f, std::string* param = nullptr) {
  try {
    f();
  } catch (const Error& e) {
    if (param) *param = e.parameter();
    return e.code();
  }
  return std::nullopt;
}

TEST(RoutingStage, RefusalsNameTheParameter) {
  RoutingCase c{.T = 8, .L = 16, .K = 4, .redundant = 4};
  RoutingInputs in = testsupport::make_routing_inputs(c);
  const RoutingStageOptions good = testsupport::stage_options(c, in, Device::cpu());
  std::string param;
  auto refused = [&](RoutingStageOptions o, const char* want) {
    EXPECT_EQ(code_of([&] { RoutingStage::create(o); }, &param), ErrorCode::kInvalidArgument) << want;
    EXPECT_EQ(param, want);
  };
  RoutingStageOptions o = good;
  o.router.reset();
  o.placement.reset();
  refused(o, "router");
  o = good;
  o.top_k = 17;
  refused(o, "top_k");
  o = good;
  o.router->top_k = 3;
  refused(o, "router");
  o = good;
  o.max_replicas = -1;
  refused(o, "max_replicas");

  auto stage = RoutingStage::create(good);
  Out out(c);
  auto refused_call = [&](auto edit, const char* want) {
    RoutingArgs a = testsupport::host_args(c, in, out.ids(c), out.weights.data());
    edit(a);
    EXPECT_EQ(code_of([&] { stage->route(a); }, &param), ErrorCode::kInvalidArgument) << want;
    EXPECT_EQ(param, want);
  };
  refused_call([](RoutingArgs& a) { a.logits.device = Device::cuda(0); }, "logits");
  refused_call([](RoutingArgs& a) { a.topk_weights = {}; }, "topk_weights");
  refused_call([](RoutingArgs& a) { a.topk_ids.shape[1] = 3; }, "topk_ids");
  refused_call([&](RoutingArgs& a) { a.logical_ids = a.topk_ids; }, "logical_ids");
  refused_call([&](RoutingArgs& a) { a.token_ids = a.bias; }, "token_ids");  // not a hash layer
  refused_call([](RoutingArgs& a) { a.layer_idx = -1; }, "layer_idx");
  // Non-finite logits throw on the CPU, naming the entry.
  in.logits_f32[5] = NAN;
  EXPECT_EQ(code_of([&] { stage->route(testsupport::host_args(c, in, out.ids(c), out.weights.data())); }),
            ErrorCode::kInvalidArgument);

  RoutingStageOptions router_only = good;
  router_only.placement.reset();
  auto no_eplb = RoutingStage::create(router_only);
  EXPECT_EQ(code_of([&] { no_eplb->set_recording(true); }, &param), ErrorCode::kInvalidArgument);
  EXPECT_EQ(param, "recording");
  EXPECT_TRUE(no_eplb->counter_values().empty());
  EXPECT_EQ(no_eplb->num_physical(), c.L);
}

// A device without a routing stage in this build, or a GPU this build's kernel does not run on,
// is refused as unsupported, never accepted and failed later.
TEST(RoutingStage, DeviceWithoutAStageIsUnsupported) {
  if (device_compute_capability(Device::cuda(0)) == 90)
    GTEST_SKIP() << "cuda:0 is an SM90 GPU: the GPU tests (Sm90RoutingStage.*) run the stage there";
  RoutingCase c{.T = 8, .L = 16, .K = 4};
  RoutingInputs in = testsupport::make_routing_inputs(c);
  EXPECT_EQ(code_of([&] { RoutingStage::create(testsupport::stage_options(c, in, Device::cuda(0))); }),
            ErrorCode::kUnsupported);
}

}  // namespace
}  // namespace moe_ep
