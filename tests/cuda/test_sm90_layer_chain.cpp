// Layers of one runtime on one GPU: they share the runtime's one scratch (cuda/layer_scratch.h)
// and run back to back on one stream, eagerly and as one captured CUDA graph; each layer's y
// matches the CPU layer on that layer's device input, and a graph replay gives the eager bits.
#include <gtest/gtest.h>

#include <fmt/format.h>

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
          shared = shared || (e.key == "workspace_bytes" && e.value.find("shared") != std::string::npos);
        EXPECT_TRUE(shared) << recipe << ": " << layer->info().config.str();
      }
      // One scratch for all N: asking again for 0 bytes gives the buffer the layers hold.
      const auto scratch = cuda::shared_layer_scratch(rt.get(), 0, 0);
      EXPECT_EQ(scratch.use_count(), N + 1) << "the N layers and this copy";
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

}  // namespace
}  // namespace moe_ep
