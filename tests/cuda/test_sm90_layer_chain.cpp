// Layers of one runtime on one GPU: they share the runtime's one scratch (cuda/layer_scratch.h)
// and run back to back on one stream, eagerly and as one captured CUDA graph; each layer's y
// matches the CPU layer on that layer's device input, and a graph replay gives the eager bits.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <functional>
#include <thread>

#include "cuda/errors.h"
#include "cuda/layer_scratch.h"
#include "cuda_test_util.h"

namespace moe_ep {
namespace {

using testsupport::HostTensor;

TEST(Sm90LayerChain, LayersShareTheScratchAndChainInOneGraph) {
  MOE_EP_REQUIRE_CUDA();
  for (const char* recipe : {"mxfp4", "nvfp4"}) {
    testsupport::Problem p = testsupport::tiny_problem(recipe);
    p.max_tokens = 128;
    const int N = 3;
    const int64_t T = 70, H = p.hidden;
    const WeightFormat format = p.recipe == Recipe::kMxfp4 ? WeightFormat::kMXFP4 : WeightFormat::kNVFP4;
    std::vector<testsupport::WeightSet> w;
    for (int l = 0; l < N; ++l) w.push_back(testsupport::random_weights(p, format, 40 + l));
    const testsupport::Inputs in = testsupport::random_inputs(p, T, 9, {.skip_fraction = 0.1});
    std::vector<std::vector<uint16_t>> eager(N);
    std::vector<uint16_t> replay;
    {
      auto rt = cudatest::gpu_runtime();
      std::vector<std::unique_ptr<Layer>> layers;
      for (int l = 0; l < N; ++l) layers.push_back(Layer::create(rt, p.desc(), w[l].pack(), p.overrides));
      for (const auto& layer : layers) {
        bool shared = false;
        for (const ConfigEntry& e : layer->info().config.entries)
          shared = shared || (e.key == "scratch_bytes" && e.value.find("shared") != std::string::npos);
        EXPECT_TRUE(shared) << recipe << ": " << layer->info().config.str();
      }
      // One scratch for all N: asking again for 0 bytes gives the buffer the layers hold.
      const auto scratch = cuda::shared_layer_scratch(rt.get(), 0, 0);
      EXPECT_EQ(scratch.use_count(), 2 * N + 1) << "the N layers (layer and engine) and this copy";
      // Each layer reports that buffer's size (what `moe_ep run --layers N` prints).
      for (const auto& layer : layers)
        for (const ConfigEntry& e : layer->info().config.entries)
          if (e.key == "scratch_bytes") EXPECT_EQ(std::stoll(e.value), static_cast<long long>(scratch->buffer().bytes()));
      cudatest::DeviceInputs d = cudatest::to_device(p, in);
      std::vector<cuda::DeviceBuffer> y;
      for (int l = 0; l < N; ++l) y.emplace_back(T * H * 2);
      auto poison = [&] {
        for (auto& b : y) MOE_EP_CUDA_CHECK(cudaMemset(b.get(), 0xFF, b.bytes()));
        MOE_EP_CUDA_CHECK(cudaDeviceSynchronize());
      };
      cudaStream_t s;
      MOE_EP_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
      auto chain = [&] {
        for (int l = 0; l < N; ++l) {
          ForwardArgs a = d.args(s);
          if (l > 0) a.x = TensorView::contiguous(y[l - 1].get(), DType::kBF16, {T, H}, Device::cuda(0));
          a.y = TensorView::contiguous(y[l].get(), DType::kBF16, {T, H}, Device::cuda(0));
          layers[l]->forward(a);
        }
      };
      poison();
      chain();
      MOE_EP_CUDA_CHECK(cudaStreamSynchronize(s));
      for (int l = 0; l < N; ++l) {
        eager[l].resize(T * H);
        MOE_EP_CUDA_CHECK(cudaMemcpy(eager[l].data(), y[l].get(), T * H * 2, cudaMemcpyDeviceToHost));
        EXPECT_EQ(layers[l]->read_error_flags(true), 0u);
      }
      cudaGraph_t graph;
      cudaGraphExec_t exec;
      MOE_EP_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
      chain();
      MOE_EP_CUDA_CHECK(cudaStreamEndCapture(s, &graph));
      MOE_EP_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
      poison();
      for (int i = 0; i < 3; ++i) MOE_EP_CUDA_CHECK(cudaGraphLaunch(exec, s));
      MOE_EP_CUDA_CHECK(cudaStreamSynchronize(s));
      replay.resize(T * H);
      MOE_EP_CUDA_CHECK(cudaMemcpy(replay.data(), y[N - 1].get(), T * H * 2, cudaMemcpyDeviceToHost));
      MOE_EP_CUDA_CHECK(cudaGraphExecDestroy(exec));
      MOE_EP_CUDA_CHECK(cudaGraphDestroy(graph));
      MOE_EP_CUDA_CHECK(cudaStreamDestroy(s));
    }
    EXPECT_EQ(cudatest::hash_bits(replay), cudatest::hash_bits(eager[N - 1])) << recipe << ": graph replay";
    for (int l = 0; l < N; ++l) {
      testsupport::Inputs in_l = in;
      if (l > 0) in_l.x.values() = eager[l - 1];
      const std::vector<double> ref = cudatest::cpu_reference(p, w[l].pack(), in_l);
      const double err = cudatest::relative_error_rows(eager[l], ref, H);
      EXPECT_LE(err, cudatest::same_recipe_tolerance(p.recipe)) << recipe << " layer " << l << " " << p.str();
      fmt::print("[ chain    ] {} layer {}: rel_err {:.3e} vs the cpu layer\n", recipe, l, err);
    }
  }
}

// Two layers sharing the scratch, forwarded from two threads on two unordered streams at once:
// the scratch orders them (LayerScratch::Use), so each y equals its layer's y run alone. T is
// large enough that an overlap of one layer's routing with the other's GEMMs would show.
TEST(Sm90LayerChain, TwoLayersOnTwoStreamsFromTwoThreadsDoNotRace) {
  MOE_EP_REQUIRE_CUDA();
  testsupport::Problem p = testsupport::tiny_problem("mxfp4");
  p.max_tokens = 256;
  const int64_t T = 256, H = p.hidden;
  const testsupport::WeightSet w0 = testsupport::random_weights(p, WeightFormat::kMXFP4, 50);
  const testsupport::WeightSet w1 = testsupport::random_weights(p, WeightFormat::kMXFP4, 51);
  const testsupport::Inputs in0 = testsupport::random_inputs(p, T, 52), in1 = testsupport::random_inputs(p, T, 53);
  auto rt = cudatest::gpu_runtime();
  auto l0 = Layer::create(rt, p.desc(), w0.pack(), p.overrides);
  auto l1 = Layer::create(rt, p.desc(), w1.pack(), p.overrides);
  const cudatest::DeviceInputs d0 = cudatest::to_device(p, in0), d1 = cudatest::to_device(p, in1);
  const std::vector<uint16_t> alone0 = cudatest::run_on_gpu(*l0, d0), alone1 = cudatest::run_on_gpu(*l1, d1);
  cudaStream_t s0, s1;
  MOE_EP_CUDA_CHECK(cudaStreamCreateWithFlags(&s0, cudaStreamNonBlocking));
  MOE_EP_CUDA_CHECK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
  int mismatches = 0;
  for (int round = 0; round < 20; ++round) {
    MOE_EP_CUDA_CHECK(cudaMemset(d0.y.get(), 0xFF, d0.y.bytes()));
    MOE_EP_CUDA_CHECK(cudaMemset(d1.y.get(), 0xFF, d1.y.bytes()));
    MOE_EP_CUDA_CHECK(cudaDeviceSynchronize());
    auto forwards = [](Layer& l, const cudatest::DeviceInputs& d, cudaStream_t s) {
      for (int i = 0; i < 4; ++i) l.forward(d.args(s));
    };
    std::thread a(forwards, std::ref(*l0), std::cref(d0), s0), b(forwards, std::ref(*l1), std::cref(d1), s1);
    a.join();
    b.join();
    MOE_EP_CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<uint16_t> y0(T * H), y1(T * H);
    MOE_EP_CUDA_CHECK(cudaMemcpy(y0.data(), d0.y.get(), T * H * 2, cudaMemcpyDeviceToHost));
    MOE_EP_CUDA_CHECK(cudaMemcpy(y1.data(), d1.y.get(), T * H * 2, cudaMemcpyDeviceToHost));
    mismatches += (y0 != alone0) + (y1 != alone1);
  }
  MOE_EP_CUDA_CHECK(cudaStreamDestroy(s0));
  MOE_EP_CUDA_CHECK(cudaStreamDestroy(s1));
  EXPECT_EQ(mismatches, 0) << "forwards of layers sharing the scratch overlapped";
}

}  // namespace
}  // namespace moe_ep
