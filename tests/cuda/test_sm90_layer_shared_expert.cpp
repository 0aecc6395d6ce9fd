// The SM90 layer with its shared expert (MoeDesc::shared_intermediate_size): the shared expert
// runs on a second stream beside the routed experts and the combine adds its output. Checked
// against the CPU layer with the same shared expert (both ways of the shared kernels: dot
// products below T = 64, tensor cores from it), bitwise against the routed GPU layer followed by
// the standalone Sm90SharedExpert::add_to (the combine's add keeps add_to's two roundings), and
// under graph capture (the side stream is a parallel branch of the graph) against eager runs.
#include <fmt/format.h>

#include <gtest/gtest.h>

#include "cuda/errors.h"
#include "cuda/sm90_shared_expert.h"
#include "cuda_test_util.h"
#include "moe_ep/formats.h"

namespace moe_ep::cudatest {
namespace {

using testsupport::Inputs;
using testsupport::Problem;
using testsupport::WeightSet;

constexpr int64_t kSharedIntermediate = 128;  // H = 256, Is = 128: both kernel ways fit

Problem with_shared(const std::string& family, int64_t max_tokens) {
  Problem p = testsupport::tiny_problem(family);
  p.max_tokens = max_tokens;
  p.shared_intermediate = kSharedIntermediate;
  return p;
}

class Sm90LayerSharedExpert : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override { MOE_EP_REQUIRE_CUDA(); }
};

TEST_P(Sm90LayerSharedExpert, MatchesTheCpuLayerWithItsSharedExpert) {
  const Problem p = with_shared(GetParam(), 512);
  const WeightSet w = testsupport::random_weights(p, p.traits().native_format, 21);
  for (int64_t T : {1, 7, 64, 300}) {
    Inputs in = testsupport::random_inputs(p, T, 200 + T, {.skip_fraction = 0.2});
    for (int64_t k = 0; k < p.top_k; ++k) in.set_id(0, k, -1);  // token 0: the shared expert alone
    const std::vector<double> ref = cpu_reference(p, w.pack(), in);
    auto layer = make_gpu_layer(p, w.pack());
    const std::vector<uint16_t> y = run_on_gpu(*layer, to_device(p, in));
    EXPECT_EQ(layer->read_error_flags(), 0u);
    const double err = relative_error_rows(y, ref, p.hidden);
    EXPECT_LE(err, same_recipe_tolerance(p.recipe)) << p.str() << " T=" << T;
    double row0 = 0.0;
    for (int64_t j = 0; j < p.hidden; ++j) row0 += std::abs(bf16_to_float(y[j]));
    EXPECT_GT(row0, 0.0) << "token 0 (no routed slot) must carry the shared expert's output";
    fmt::print("[ sm90    ] {} + shared expert Is={} T={:<4} rel_err={:.3e}\n", p.name(), p.shared_intermediate, T, err);
  }
}

TEST_P(Sm90LayerSharedExpert, BitwiseTheRoutedLayerThenTheStandaloneAddTo) {
  const Problem p = with_shared(GetParam(), 512);
  Problem routed = p;
  routed.shared_intermediate = 0;
  const WeightSet w = testsupport::random_weights(p, p.traits().native_format, 22);
  const WeightSet wr = testsupport::without_shared_expert(w);
  auto layer = make_gpu_layer(p, w.pack());
  auto routed_layer = make_gpu_layer(routed, wr.pack());
  cuda::Sm90SharedExpert shared(p.hidden, p.shared_intermediate, p.clamp, w.shared_w13.view(), w.shared_w2.view(),
                                p.max_tokens, 0);
  for (int64_t T : {1, 300}) {
    const Inputs in = testsupport::random_inputs(p, T, 300 + T, {.skip_fraction = 0.1});
    const DeviceInputs d = to_device(p, in);
    const std::vector<uint16_t> y = run_on_gpu(*layer, d);
    run_on_gpu(*routed_layer, d);
    shared.add_to(d.x.view.ptr<const uint16_t>(), d.y.get<uint16_t>(), T, nullptr);
    MOE_EP_CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<uint16_t> expected(y.size());
    MOE_EP_CUDA_CHECK(cudaMemcpy(expected.data(), d.y.get(), expected.size() * 2, cudaMemcpyDeviceToHost));
    size_t first = y.size();
    for (size_t i = 0; i < y.size() && first == y.size(); ++i)
      if (y[i] != expected[i]) first = i;
    EXPECT_EQ(first, y.size()) << "T=" << T << ": first difference at row " << first / p.hidden << " column "
                               << first % p.hidden;
  }
}

// y written over x: the shared expert (second stream) and the quantization read x before the
// combine writes y.
TEST_P(Sm90LayerSharedExpert, InPlaceForwardEqualsOutOfPlace) {
  const Problem p = with_shared(GetParam(), 512);
  const WeightSet w = testsupport::random_weights(p, p.traits().native_format, 24);
  auto layer = make_gpu_layer(p, w.pack());
  for (int64_t T : {1, 300}) {
    const Inputs in = testsupport::random_inputs(p, T, 500 + T, {.skip_fraction = 0.2});
    const DeviceInputs d = to_device(p, in);
    const std::vector<uint16_t> want = run_on_gpu(*layer, d);
    ForwardArgs a = d.args(nullptr);
    MOE_EP_CUDA_CHECK(cudaMemcpy(a.y.data, a.x.data, want.size() * 2, cudaMemcpyDeviceToDevice));
    a.x = a.y;
    layer->forward(a);
    MOE_EP_CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<uint16_t> got(want.size());
    MOE_EP_CUDA_CHECK(cudaMemcpy(got.data(), a.y.data, got.size() * 2, cudaMemcpyDeviceToHost));
    EXPECT_EQ(hash_bits(got), hash_bits(want)) << "T=" << T;
  }
}

TEST_P(Sm90LayerSharedExpert, GraphReplayEqualsEagerOnEveryStream) {
  const Problem p = with_shared(GetParam(), 512);
  const WeightSet w = testsupport::random_weights(p, p.traits().native_format, 23);
  auto layer = make_gpu_layer(p, w.pack());
  bool described = false;
  for (const ConfigEntry& e : layer->info().config.entries) described |= e.key == "shared_expert";
  EXPECT_TRUE(described) << layer->info().config.str();
  for (int64_t T : {3, 200}) {
    const Inputs in = testsupport::random_inputs(p, T, 400 + T, {.skip_fraction = 0.2});
    const DeviceInputs d = to_device(p, in);
    const std::vector<uint16_t> eager_default = run_on_gpu(*layer, d);  // the legacy default stream
    cudaStream_t stream;
    MOE_EP_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    ASSERT_EQ(hash_bits(run_on_gpu(*layer, d, stream)), hash_bits(eager_default)) << "T=" << T;

    const auto replays = replay_forward_graph(*layer, d, stream, 3);
    for (size_t rep = 0; rep < replays.size(); ++rep)
      ASSERT_EQ(hash_bits(replays[rep]), hash_bits(eager_default)) << "T=" << T << " graph replay " << rep;
    MOE_EP_CUDA_CHECK(cudaStreamDestroy(stream));
  }
  EXPECT_EQ(layer->read_error_flags(), 0u);
}

INSTANTIATE_TEST_SUITE_P(Recipes, Sm90LayerSharedExpert, ::testing::Values("mxfp4", "nvfp4"));

}  // namespace
}  // namespace moe_ep::cudatest
