// Building blocks of the CPU reference: the fixed-order dot product, the decoders, the
// clamped SwiGLU, the thread pool, and the per-expert compute used by dispatch/combine.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>

#include "cpu/expert_compute.h"
#include "cpu/reference_math.h"
#include "core/thread_pool.h"
#include "moe_ep/formats.h"
#include "moe_ep/quant.h"
#include "support/layer_problem.h"

namespace moe_ep::cpu {
namespace {

std::vector<float> random_floats(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = normal(rng);
  return v;
}

// The documented order, written out: 16 strided partial sums, then halving pairwise.
float documented_dot(const std::vector<float>& a, const std::vector<float>& b) {
  std::vector<float> partial(16, 0.0f);
  for (size_t i = 0; i < a.size(); ++i) partial[i % 16] = partial[i % 16] + a[i] * b[i];
  for (size_t width = 8; width >= 1; width /= 2)
    for (size_t j = 0; j < width; ++j) partial[j] = partial[j] + partial[j + width];
  return partial[0];
}

TEST(CpuMath, DotProductFollowsTheDocumentedOrder) {
  int differs_from_sequential = 0;
  for (uint64_t seed = 0; seed < 100; ++seed) {
    const size_t n = 16 * (1 + seed % 40);
    const auto a = random_floats(n, seed), b = random_floats(n, seed + 1000);
    const float got = dot_fp32(a.data(), b.data(), static_cast<int64_t>(n));
    ASSERT_EQ(got, documented_dot(a, b)) << "n=" << n << " seed=" << seed;
    float sequential = 0.0f;
    for (size_t i = 0; i < n; ++i) sequential += a[i] * b[i];
    differs_from_sequential += sequential != got;
  }
  EXPECT_GT(differs_from_sequential, 10) << "inputs too tame to tell summation orders apart";
}

TEST(CpuMath, FourRowDotGivesEachRowsDotBitForBit) {
  for (uint64_t seed = 0; seed < 40; ++seed) {
    const int64_t n = 16 * (1 + seed % 24), stride = n + 16 * (seed % 3);
    const auto a = random_floats(n, seed), b = random_floats(4 * stride, seed + 500);
    float got[4];
    dot_fp32_x4(a.data(), b.data(), stride, n, got);
    for (int r = 0; r < 4; ++r)
      ASSERT_EQ(std::bit_cast<uint32_t>(got[r]), std::bit_cast<uint32_t>(dot_fp32(a.data(), b.data() + r * stride, n)))
          << "n=" << n << " row " << r << " seed=" << seed;
  }
}

TEST(CpuMath, FourRowFp4DotsGiveTheDecodedRowsDotsBitForBit) {
  std::mt19937_64 rng(11);
  const int64_t rows = 9, k = 96;
  std::vector<uint8_t> packed(rows * k / 2), mx_scales(rows * k / 32), nv_scales(rows * k / 16);
  for (auto& b : packed) b = uint8_t(rng());
  for (auto& s : mx_scales) s = uint8_t(100 + rng() % 50);
  for (auto& s : nv_scales) s = uint8_t(rng() % 0x7F);
  const auto a = random_floats(k, 3);
  std::vector<float> decoded(4 * k);
  float got[4];
  for (int64_t first = 0; first + 4 <= rows; ++first) {
    decode_mxfp4_rows(packed.data(), mx_scales.data(), first, 4, k, decoded.data());
    dot_mxfp4_rows_x4(a.data(), packed.data(), mx_scales.data(), first, k, got);
    for (int r = 0; r < 4; ++r)
      ASSERT_EQ(std::bit_cast<uint32_t>(got[r]), std::bit_cast<uint32_t>(dot_fp32(a.data(), decoded.data() + r * k, k)))
          << "mxfp4 row " << first + r;
    decode_nvfp4_rows(packed.data(), nv_scales.data(), first, 4, k, decoded.data());
    dot_nvfp4_rows_x4(a.data(), packed.data(), nv_scales.data(), first, k, got);
    for (int r = 0; r < 4; ++r)
      ASSERT_EQ(std::bit_cast<uint32_t>(got[r]), std::bit_cast<uint32_t>(dot_fp32(a.data(), decoded.data() + r * k, k)))
          << "nvfp4 row " << first + r;
  }
}

TEST(CpuMath, DecodersMatchTheLibraryDequantizers) {
  std::mt19937_64 rng(7);
  const int64_t rows = 6, k = 64;
  std::vector<uint8_t> packed(rows * k / 2), mx_scales(rows * k / 32), nv_scales(rows * k / 16);
  for (auto& b : packed) b = uint8_t(rng());
  for (auto& s : mx_scales) s = uint8_t(rng() % 255);  // every byte but 0xFF
  for (auto& s : nv_scales) s = uint8_t(rng() % 0x7F);  // positive, no NaN
  std::vector<float> want(rows * k), got(3 * k);
  dequantize_mxfp4(packed.data(), mx_scales.data(), rows, k, want.data());
  decode_mxfp4_rows(packed.data(), mx_scales.data(), 2, 3, k, got.data());
  for (int64_t i = 0; i < 3 * k; ++i) ASSERT_EQ(got[i], want[2 * k + i]) << i;
  dequantize_nvfp4(packed.data(), nv_scales.data(), 1.0f, rows, k, want.data());
  decode_nvfp4_rows(packed.data(), nv_scales.data(), 2, 3, k, got.data());
  for (int64_t i = 0; i < 3 * k; ++i) ASSERT_EQ(got[i], want[2 * k + i]) << i;
}

// Every code byte (both nibbles) under every scale byte but NaN, bit for bit against e2m1 times
// the scale as the format functions give them (signed zeros included), whichever decode path the
// machine runs (AVX2 or scalar).
TEST(CpuMath, DecodersGiveEveryCodeUnderEveryScaleBitForBit) {
  const int64_t k = 512;  // each row: the 256 code bytes in order
  std::vector<uint8_t> packed(256 * k / 2);
  for (size_t i = 0; i < packed.size(); ++i) packed[i] = static_cast<uint8_t>(i % 256);
  auto check = [&](const char* recipe, int64_t block, auto decode, auto scale_of, bool (*nan)(uint8_t)) {
    std::vector<uint8_t> scales(256 * k / block);
    for (size_t i = 0; i < scales.size(); ++i) scales[i] = static_cast<uint8_t>(i / (k / block));  // row r: byte r
    std::vector<float> got(256 * k);
    decode(packed.data(), scales.data(), 0, 256, k, got.data());
    for (int r = 0; r < 256; ++r) {
      if (nan(static_cast<uint8_t>(r))) continue;
      const float scale = scale_of(static_cast<uint8_t>(r));
      for (int64_t i = 0; i < k; ++i) {
        const uint8_t byte = packed[(r * k + i) / 2];
        const float want = e2m1_to_float(static_cast<uint8_t>(i % 2 ? byte >> 4 : byte & 0xF)) * scale;
        ASSERT_EQ(std::bit_cast<uint32_t>(got[r * k + i]), std::bit_cast<uint32_t>(want))
            << recipe << " scale byte " << r << " element " << i;
      }
    }
  };
  check("mxfp4", 32, &decode_mxfp4_rows, &e8m0_to_float, [](uint8_t b) { return b == 0xFF; });
  check("nvfp4", 16, &decode_nvfp4_rows, &e4m3_to_float, [](uint8_t b) { return (b & 0x7F) == 0x7F; });
}

TEST(CpuMath, RoundTripsMatchTheLibraryQuantizers) {
  const auto v = random_floats(128, 8);
  std::vector<uint8_t> q(128), s(4), p(64), ns(8);
  std::vector<float> want(128), got(128);
  quantize_q8(v.data(), 128, q.data(), s.data());
  dequantize_q8(q.data(), s.data(), 128, want.data());
  q8_roundtrip_row(v.data(), 128, got.data());
  EXPECT_EQ(got, want);
  float g = 0.0f;
  quantize_nvfp4_rows(v.data(), 1, 128, p.data(), ns.data(), &g);
  dequantize_nvfp4(p.data(), ns.data(), g, 1, 128, want.data());
  EXPECT_EQ(nvfp4_roundtrip_row(v.data(), 128, got.data()), g);
  for (int i = 0; i < 128; ++i) ASSERT_EQ(got[i] / g, want[i]) << i;
}

TEST(CpuMath, ClampedSwiGLU) {
  auto silu = [](float v) { return v / (1.0f + std::exp(-v)); };
  // The gate is clamped from above only, the up half on both sides.
  EXPECT_EQ(clamped_swiglu(-20.0f, 3.0f, 10.0f, 0.5f), silu(-20.0f) * 3.0f * 0.5f);
  EXPECT_EQ(clamped_swiglu(15.0f, 3.0f, 10.0f, 1.0f), silu(10.0f) * 3.0f);
  EXPECT_EQ(clamped_swiglu(2.0f, 15.0f, 10.0f, 1.0f), silu(2.0f) * 10.0f);
  EXPECT_EQ(clamped_swiglu(2.0f, -15.0f, 10.0f, 1.0f), silu(2.0f) * -10.0f);
  EXPECT_EQ(clamped_swiglu(50.0f, 60.0f, INFINITY, 1.0f), silu(50.0f) * 60.0f);
  EXPECT_EQ(clamped_swiglu(3.0f, 4.0f, 0.0f, 1.0f), 0.0f);
}

TEST(ThreadPool, RunsEveryTaskOnceAndRethrows) {
  ThreadPool pool(4);
  std::vector<std::atomic<int>> hits(1000);
  pool.parallel_for(1000, [&](int64_t i) { hits[i].fetch_add(1); });
  for (auto& h : hits) ASSERT_EQ(h.load(), 1);
  EXPECT_THROW(pool.parallel_for(100, [](int64_t i) {
    if (i == 37) throw std::runtime_error("task 37");
  }), std::runtime_error);
  // Several failing tasks: the lowest one's exception, whatever the thread timing, and every task
  // below it ran (the checkpoint loaders rely on this for a thread-count-independent message).
  for (int run = 0; run < 20; ++run) {
    std::vector<std::atomic<int>> ran(1000);
    try {
      pool.parallel_for(1000, [&](int64_t i) {
        ran[i].fetch_add(1);
        if (i > 100 && i % 7 == 3) throw std::runtime_error("task " + std::to_string(i));
      });
      ADD_FAILURE() << "no exception";
    } catch (const std::runtime_error& e) {
      EXPECT_STREQ(e.what(), "task 101");
    }
    for (int i = 0; i <= 101; ++i) ASSERT_EQ(ran[i].load(), 1) << "task " << i;
  }
  // Concurrent and nested submissions complete.
  std::atomic<int64_t> total{0};
  std::vector<std::thread> callers;
  for (int c = 0; c < 3; ++c)
    callers.emplace_back([&] {
      pool.parallel_for(20, [&](int64_t) {
        pool.parallel_for(10, [&](int64_t j) { total.fetch_add(j); });
      });
    });
  for (auto& t : callers) t.join();
  EXPECT_EQ(total.load(), 3 * 20 * 45);
}

TEST(ExpertCompute, EntryOrderAndThreadCountDoNotChangeAnyBit) {
  using namespace testsupport;
  for (const char* fam : {"mxfp4", "nvfp4"}) {
    const Problem p = tiny_problem(fam);
    const WeightSet ws = random_weights(p, std::string(fam) == "mxfp4" ? WeightFormat::kMXFP4 : WeightFormat::kNVFP4, 61);
    const ExpertShape shape{p.num_experts, p.hidden, p.intermediate};
    const HostExpertWeights w = prepare_host_weights(parse_recipe(fam), ws.pack(), shape);
    Inputs in = random_inputs(p, 10, 62);
    quantize_inputs_for_caller(p, in);
    const QuantizedRows rows{10, in.a.values().data(), in.a_scale.values().data(),
                             in.a_global.empty() ? nullptr : in.a_global.values().data()};
    std::vector<ExpertEntry> entries;
    std::mt19937_64 rng(63);
    for (int n = 0; n < 37; ++n)
      entries.push_back({int64_t(rng() % 10), int64_t(rng() % 4), 0.1f + float(rng() % 9) / 10});
    const ExpertProblem problem{&w, 10.0f};
    ThreadPool one(1), five(5);
    std::vector<uint16_t> a(entries.size() * p.hidden), b(a.size());
    compute_expert_outputs(problem, rows, entries, a.data(), one);
    std::vector<size_t> perm(entries.size());
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    std::vector<ExpertEntry> shuffled;
    for (size_t i : perm) shuffled.push_back(entries[i]);
    compute_expert_outputs(problem, rows, shuffled, b.data(), five);
    for (size_t n = 0; n < perm.size(); ++n)
      for (int64_t j = 0; j < p.hidden; ++j)
        ASSERT_EQ(b[n * p.hidden + j], a[perm[n] * p.hidden + j]) << fam << " entry " << n;
    compute_expert_outputs(problem, rows, {}, nullptr, five);  // no entries: nothing to do
  }
}

}  // namespace
}  // namespace moe_ep::cpu
