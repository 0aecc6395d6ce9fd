// GPU soak: many forwards of one deepseek-v4-flash layer (the default numerics, so the decode,
// mma and wgmma buckets all run) with random T in [0, max_tokens_per_rank], random -1 holes
// and, in about 1 call of 20, an out-of-range id on the device. Checked: the sticky error flag
// is raised exactly after a call with an out-of-range id and is cleared by read_error_flags;
// device memory (cudaMemGetInfo) and resident host memory are flat after a warm-up; a fixed
// probe is within the recipe's threshold of the CPU layer and bitwise identical at the start,
// every 5,000 forwards and at the end.
//
//   MOE_EP_GPU_SOAK_FORWARDS    forwards (default 300; the full soak is 20000)
//   MOE_EP_GPU_SOAK_MAX_TOKENS  max_tokens_per_rank of the layer (default 512)
#include <algorithm>
#include <chrono>
#include <random>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "cuda/errors.h"
#include "cuda_test_util.h"
#include "support/soak_env.h"

namespace moe_ep::cudatest {
namespace {

using testsupport::env_int;
using testsupport::resident_bytes;

size_t device_free_bytes() {
  size_t free = 0, total = 0;
  MOE_EP_CUDA_CHECK(cudaMemGetInfo(&free, &total));
  return free;
}

TEST(Sm90Soak, FlashForwardsStayFlatDeterministicAndFlagOutOfRangeIds) {
  MOE_EP_REQUIRE_CUDA();
  const int64_t forwards = env_int("MOE_EP_GPU_SOAK_FORWARDS", 300);
  testsupport::Problem p = preset_problem("deepseek-v4-flash", "mxfp4", env_int("MOE_EP_GPU_SOAK_MAX_TOKENS", 512));
  p.exact_accumulation = false;
  const testing::HostWeights w = preset_weights(p, WeightFormat::kMXFP4, 2027);
  const int64_t T_max = p.max_tokens, H = p.hidden, K = p.top_k, E = p.num_experts;

  const testsupport::Inputs probe_in = testsupport::random_inputs(p, 64, 31, {0.1});
  const std::vector<int64_t> probe_rows = {0, 17, 40, 63};
  const std::vector<double> probe_ref = cpu_reference(p, w.pack(), probe_in, probe_rows);
  const testsupport::Inputs pool_in = testsupport::random_inputs(p, T_max, 32, {0.0});

  auto layer = make_gpu_layer(p, w.pack());
  const DeviceInputs probe = to_device(p, probe_in);
  const DeviceInputs pool = to_device(p, pool_in);
  const std::vector<uint16_t> probe_y = run_on_gpu(*layer, probe);
  ASSERT_LT(relative_error_rows(probe_y, probe_ref, H, probe_rows), wgmma_recipe_tolerance());

  cuda::DeviceBuffer ids_dev(static_cast<size_t>(T_max * K) * sizeof(int64_t));
  std::vector<int64_t> ids(static_cast<size_t>(T_max * K));
  std::mt19937_64 rng(20);
  std::uniform_int_distribution<int64_t> tokens(0, T_max), expert(0, E - 1);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  int64_t bad_calls = 0, wrong = 0, probes = 0, rss_warm = 0;
  size_t free_warm = 0;
  const auto start = std::chrono::steady_clock::now();
  for (int64_t n = 0; n < forwards; ++n) {
    if (n == std::min<int64_t>(100, forwards / 2)) {
      rss_warm = resident_bytes();
      free_warm = device_free_bytes();
    }
    const int64_t T = n < 4 ? T_max : tokens(rng);  // the largest batch first
    for (int64_t t = 0; t < T; ++t)  // K distinct experts per token, some slots -1
      for (int64_t k = 0; k < K; ++k) {
        int64_t id;
        do id = expert(rng); while (std::find(&ids[t * K], &ids[t * K + k], id) != &ids[t * K + k]);
        ids[t * K + k] = unit(rng) < 0.05 ? -1 : id;
      }
    const bool bad = T > 0 && unit(rng) < 0.05;
    if (bad) {
      const int64_t values[] = {E, E + 1, -2, int64_t{1} << 40};
      ids[std::uniform_int_distribution<int64_t>(0, T * K - 1)(rng)] = values[n % 4];
      ++bad_calls;
    }
    MOE_EP_CUDA_CHECK(cudaMemcpy(ids_dev.get(), ids.data(), T * K * sizeof(int64_t), cudaMemcpyHostToDevice));
    ForwardArgs args = pool.args(nullptr);
    for (TensorView* t : {&args.x, &args.topk_ids, &args.topk_weights, &args.y}) t->shape[0] = T;
    args.topk_ids = TensorView::contiguous(ids_dev.get(), DType::kI64, {T, K}, Device::cuda(0));
    layer->forward(args);
    const uint32_t flags = layer->read_error_flags(true);
    if ((flags != 0) != bad) {
      ++wrong;
      ADD_FAILURE() << "forward " << n << " (T = " << T << "): error flags 0x" << std::hex << flags
                    << std::dec << (bad ? " not raised for an out-of-range id" : " raised without one");
    }
    if ((n + 1) % 5000 == 0 || n + 1 == forwards) {
      ++probes;
      ASSERT_EQ(run_on_gpu(*layer, probe), probe_y) << "the probe output changed after " << n + 1 << " forwards";
      ASSERT_EQ(layer->read_error_flags(true), 0u);
    }
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const int64_t rss_end = resident_bytes();
  const size_t free_end = device_free_bytes();
  fmt::print("gpu soak: {} deepseek-v4-flash forwards (T in [0, {}]) in {:.1f} s; {} with an "
             "out-of-range id, {} flag mismatches; {} probe checks bitwise equal; resident {} KiB "
             "after warm-up, {} KiB at the end ({:+} KiB); device free {} MiB after warm-up, {} MiB "
             "at the end\n",
             forwards, T_max, seconds, bad_calls, wrong, probes, rss_warm / 1024, rss_end / 1024,
             (rss_end - rss_warm) / 1024, free_warm >> 20, free_end >> 20);
  EXPECT_EQ(wrong, 0);
  EXPECT_GT(bad_calls, 0);
  EXPECT_LT(rss_end - rss_warm, int64_t{16} << 20) << "resident memory grew";
  EXPECT_GE(free_end + (size_t{2} << 20), free_warm) << "device memory grew";
}

}  // namespace
}  // namespace moe_ep::cudatest
