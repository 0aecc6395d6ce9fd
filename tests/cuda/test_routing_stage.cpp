// The public routing stage (moe_ep/routing_stage.h) on the GPU against the same stage on the CPU
// and the independent path (route_deepseek_v4 then Eplb::remap): ids, weights and load counters
// bitwise, over poisoned device outputs; a captured graph that follows a new placement; bad data
// in device memory raising kErrorRouterInput through check_error_flags.
#include <gtest/gtest.h>

#include <cstring>
#include <numeric>

#include "cuda/device_buffer.h"
#include "cuda/errors.h"
#include "cuda_test_util.h"
#include "moe_ep/error.h"
#include "moe_ep/layer.h"
#include "moe_ep/routing_stage.h"
#include "support/routing_cases.h"

namespace moe_ep {
namespace {

using cudatest::DeviceTensor;
using cudatest::to_device;
using testsupport::RoutingCase;
using testsupport::RoutingInputs;

// One case's tensors on cuda:0, outputs poisoned (ids 0x7F7F7F7F, weights NaN).
struct DeviceCall {
  DeviceTensor logits, bias, tokens, table, logical;
  cuda::DeviceBuffer ids, weights;
  RoutingArgs args;
  DeviceCall(const RoutingCase& c, RoutingInputs& in) : ids(8 * c.T * c.K + 8), weights(4 * c.T * c.K + 4) {
    const RoutingArgs h = testsupport::host_args(c, in, nullptr, nullptr);
    logits = to_device(h.logits);
    bias = to_device(h.bias);
    tokens = to_device(h.token_ids);
    table = to_device(h.hash_table);
    logical = to_device(h.logical_ids);
    args = h;
    args.logits = logits.view;
    args.bias = bias.view;
    args.token_ids = tokens.view;
    args.hash_table = table.view;
    args.logical_ids = logical.view;
    args.topk_ids.data = ids.get();
    args.topk_ids.device = Device::cuda(0);
    if (h.topk_weights.defined()) {
      args.topk_weights.data = weights.get();
      args.topk_weights.device = Device::cuda(0);
    }
    poison();
  }
  void poison() {
    MOE_EP_CUDA_CHECK(cudaMemset(ids.get(), 0x7F, ids.bytes()));
    MOE_EP_CUDA_CHECK(cudaMemset(weights.get(), 0xFF, weights.bytes()));
    MOE_EP_CUDA_CHECK(cudaDeviceSynchronize());
  }
  std::vector<int64_t> ids_out(const RoutingCase& c) const {
    std::vector<int64_t> v(c.T * c.K);
    if (c.ids64) {
      MOE_EP_CUDA_CHECK(cudaMemcpy(v.data(), ids.get(), 8 * v.size(), cudaMemcpyDeviceToHost));
    } else {
      std::vector<int32_t> w(v.size());
      MOE_EP_CUDA_CHECK(cudaMemcpy(w.data(), ids.get(), 4 * w.size(), cudaMemcpyDeviceToHost));
      std::copy(w.begin(), w.end(), v.begin());
    }
    return v;
  }
  std::vector<float> weights_out(const RoutingCase& c) const {
    std::vector<float> v(c.T * c.K);
    MOE_EP_CUDA_CHECK(cudaMemcpy(v.data(), weights.get(), 4 * v.size(), cudaMemcpyDeviceToHost));
    return v;
  }
};

void expect_equal(const RoutingCase& c, const RoutingInputs& in, const DeviceCall& d) {
  const std::vector<int64_t> ids = d.ids_out(c);
  const std::vector<float> w = d.weights_out(c);
  for (int64_t i = 0; i < c.T * c.K; ++i) {
    ASSERT_EQ(ids[i], in.ids[i]) << c.str() << " slot (" << i / c.K << ", " << i % c.K << ")";
    if (!c.router) continue;
    uint32_t a, b;
    std::memcpy(&a, &w[i], 4);
    std::memcpy(&b, &in.weights[i], 4);
    ASSERT_EQ(a, b) << c.str() << " weight (" << i / c.K << ", " << i % c.K << "): " << w[i] << " vs "
                    << in.weights[i];
  }
}

TEST(Sm90RoutingStage, BitwiseTheCpuPathOnEveryKindOfStage) {
  MOE_EP_REQUIRE_CUDA();
  const RoutingCase cases[] = {
      {.T = 300, .L = 256, .K = 8, .structured = true, .seed = 1},
      {.T = 1, .L = 256, .K = 6, .bf16 = true, .ids64 = true, .redundant = 32, .seed = 2},
      {.T = 4097, .L = 384, .K = 6, .redundant = 96, .seed = 3},
      {.T = 77, .L = 64, .K = 4, .structured = true, .redundant = 16, .hash_layers = 3, .layer = 2, .seed = 4},
      {.T = 500, .L = 64, .K = 6, .router = false, .ids64 = true, .redundant = 16, .seed = 5},
      {.T = 0, .L = 16, .K = 4, .redundant = 4, .seed = 6},
  };
  for (const RoutingCase& c : cases) {
    RoutingInputs in = testsupport::make_routing_inputs(c);
    auto stage = RoutingStage::create(testsupport::stage_options(c, in, Device::cuda(0)));
    if (in.placement) stage->set_recording(true);
    DeviceCall d(c, in);
    stage->route(d.args);
    expect_equal(c, in, d);
    EXPECT_EQ(stage->counter_values(), in.counters) << c.str();
    EXPECT_EQ(stage->read_error_flags(), 0u) << c.str();
  }
}

// One captured graph, replayed: recording on, then a new placement copied into the same buffers.
TEST(Sm90RoutingStage, CapturedGraphFollowsANewPlacement) {
  MOE_EP_REQUIRE_CUDA();
  RoutingCase c{.T = 300, .L = 256, .K = 6, .redundant = 32, .seed = 7};
  RoutingInputs in = testsupport::make_routing_inputs(c);
  RoutingCase c2 = c;
  c2.seed = 8;  // same logits (seeded by c), another placement
  const EplbPlacement second = testsupport::hot_placement(c.L, c.redundant, c2.seed, 7);
  RoutingStageOptions o = testsupport::stage_options(c, in, Device::cuda(0));
  o.max_replicas = std::max(in.placement->max_replicas, second.max_replicas);
  auto stage = RoutingStage::create(o);
  DeviceCall d(c, in);
  cudaStream_t s;
  MOE_EP_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  d.args.stream = s;
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  MOE_EP_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  stage->route(d.args);
  MOE_EP_CUDA_CHECK(cudaStreamEndCapture(s, &graph));
  MOE_EP_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));

  stage->set_recording(true);
  MOE_EP_CUDA_CHECK(cudaGraphLaunch(exec, s));
  MOE_EP_CUDA_CHECK(cudaStreamSynchronize(s));
  expect_equal(c, in, d);
  EXPECT_EQ(stage->counter_values(), in.counters);

  // The expected result under the second placement: the same logical ids, remapped by it.
  RoutingInputs want = in;
  RoutingCase logical_case = c;
  logical_case.redundant = 0;
  want.ids = testsupport::make_routing_inputs(logical_case).ids;
  Eplb eplb(second);
  eplb.set_recording(true);
  const TensorView ids = TensorView::contiguous(want.ids.data(), DType::kI64, {c.T, c.K});
  eplb.remap(ids, ids);
  stage->set_placement(second);
  stage->reset_counters();
  d.poison();
  MOE_EP_CUDA_CHECK(cudaGraphLaunch(exec, s));
  MOE_EP_CUDA_CHECK(cudaStreamSynchronize(s));
  expect_equal(c, want, d);
  EXPECT_EQ(stage->counter_values(), eplb.counter_values());
  MOE_EP_CUDA_CHECK(cudaGraphExecDestroy(exec));
  MOE_EP_CUDA_CHECK(cudaGraphDestroy(graph));
  MOE_EP_CUDA_CHECK(cudaStreamDestroy(s));
}

TEST(Sm90RoutingStage, BadDeviceDataRaisesTheFlagNotAnException) {
  MOE_EP_REQUIRE_CUDA();
  RoutingCase c{.T = 4, .L = 16, .K = 4, .hash_layers = 1, .seed = 9};
  RoutingInputs in = testsupport::make_routing_inputs(c);
  in.tokens = {0, 3, 1, 2};
  in.table[3 * c.K + 1] = 16;  // outside [0, L): token 1's slot 1
  auto stage = RoutingStage::create(testsupport::stage_options(c, in, Device::cuda(0)));
  DeviceCall d(c, in);
  stage->route(d.args);
  const std::vector<int64_t> ids = d.ids_out(c);
  EXPECT_EQ(ids[1 * c.K + 1], -1);
  try {
    stage->check_error_flags();
    FAIL() << "a hash-table id outside [0, L) raised no flag";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kDevice) << e.what();
  }
  EXPECT_EQ(stage->read_error_flags(), 0u);  // cleared by check_error_flags
  // A tensor on another device is refused on the host before any launch.
  RoutingArgs a = d.args;
  a.logits.device = Device::cpu();
  EXPECT_THROW(stage->route(a), Error);
}

}  // namespace
}  // namespace moe_ep
