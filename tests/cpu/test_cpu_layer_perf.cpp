// Timing of the CPU reference on the deepseek-v4-flash preset (H=4096, I=2048, E=256, K=6,
// clamp 10). Disabled by default (6.4 GB of host memory, seconds per forward); run with
//   moe_ep_tests --gtest_also_run_disabled_tests --gtest_filter='*Perf*' (all hardware threads)
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>

#include <fmt/format.h>

#include "core/thread_pool.h"
#include "support/layer_problem.h"

namespace moe_ep::testsupport {
namespace {

// Random fp4 codes with scale bytes drawn from a narrow band (a realistic dynamic range).
WeightSet random_code_weights(const Problem& p, WeightFormat format, uint64_t seed) {
  uint64_t state = seed * 0x9E3779B97F4A7C15ull + 1;
  auto next = [&] {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    return state;
  };
  const bool mx = format == WeightFormat::kMXFP4;
  const int64_t E = p.num_experts, H = p.hidden, I = p.intermediate, block = mx ? 32 : 16;
  WeightSet w;
  w.format = format;
  auto fill = [&](HostTensor<uint8_t>& packed, HostTensor<uint8_t>& scales, int64_t rows, int64_t k,
                  uint8_t scale_base) {
    packed = HostTensor<uint8_t>(DType::kU8, {E, rows, k / 2});
    scales = HostTensor<uint8_t>(DType::kU8, {E, rows, k / block});
    for (size_t i = 0; i < packed.size(); i += 8) {
      const uint64_t r = next();
      for (size_t j = 0; j < 8 && i + j < packed.size(); ++j) packed[i + j] = uint8_t(r >> (8 * j));
    }
    for (size_t i = 0; i < scales.size(); ++i) scales[i] = uint8_t(scale_base + next() % 4);
  };
  // MXFP4: 2^-7..2^-4 (byte 120..123); NVFP4: e4m3 block scales 0x38..0x3B (1.0..1.375).
  fill(w.w13, w.w13_scale, 2 * I, H, mx ? 120 : 0x38);
  fill(w.w2, w.w2_scale, H, I, mx ? 120 : 0x38);
  if (!mx) {
    w.w13_global = HostTensor<float>(DType::kF32, {E, 2}, 1.0f / 512);
    w.w2_global = HostTensor<float>(DType::kF32, {E}, 1.0f / 512);
  }
  return w;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

TEST(DISABLED_CpuLayerPerf, DeepseekV4Flash) {
  for (const char* family : {"mxfp4", "nvfp4"}) {
    Problem p;
    p.recipe = parse_recipe(family);
    p.num_experts = 256;
    p.hidden = 4096;
    p.intermediate = 2048;
    p.top_k = 6;
    p.max_tokens = 128;
    p.clamp = 10.0f;
    auto t0 = std::chrono::steady_clock::now();
    const WeightSet w = random_code_weights(
        p, family == std::string("mxfp4") ? WeightFormat::kMXFP4 : WeightFormat::kNVFP4, 7);
    const double gen_s = seconds_since(t0);
    t0 = std::chrono::steady_clock::now();
    auto layer = make_layer(p, w);
    const double load_s = seconds_since(t0);
    fmt::print("[ perf ] {} threads={} weights generated {:.2f} s, Layer::create {:.2f} s\n",
               p.str(), resolve_num_threads(0), gen_s, load_s);
    for (int64_t T : {1, 128}) {
      const Inputs in = random_inputs(p, T, 11);
      t0 = std::chrono::steady_clock::now();
      const HostTensor<uint16_t> y = run_forward(*layer, p, in);
      const double s = seconds_since(t0);
      bool finite = true;
      for (uint16_t v : y.values()) finite = finite && std::isfinite(to_double_bf16(v));
      EXPECT_TRUE(finite) << p.str() << " T=" << T;
      fmt::print("[ perf ] {} T={}: forward {:.3f} s\n", family, T, s);
    }
  }
}

}  // namespace
}  // namespace moe_ep::testsupport
