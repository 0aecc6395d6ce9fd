// Soak: many forwards of the tiny preset (H=256, I=128, E=16, K=4) on one CPU layer with random
// T in [0, max_tokens_per_rank], random -1 holes and, in about 1 call of 20, an out-of-range id.
// Checked: the call fails (kInvalidArgument naming topk_ids) exactly when an out-of-range id was
// present, the sticky error flags stay 0 (host ids are checked before the forward), resident
// memory is flat (/proc/self/statm after a warm-up vs at the end), and a fixed probe input gives
// a bitwise-identical y at the start, every 10,000 forwards and at the end.
//
//   MOE_EP_SOAK_FORWARDS    forwards (default 2000; the full soak is 100000)
//   MOE_EP_SOAK_MAX_TOKENS  FleetParams.max_tokens_per_rank (default 32)
//   MOE_EP_SOAK_SEED        seed (default 16)
#include <gtest/gtest.h>

#include <chrono>
#include <random>

#include <fmt/format.h>

#include "moe_ep/error.h"
#include "support/layer_problem.h"
#include "support/soak_env.h"

namespace moe_ep {
namespace {

using namespace testsupport;

#if defined(__SANITIZE_ADDRESS__)
constexpr bool kUnderAsan = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool kUnderAsan = true;
#else
constexpr bool kUnderAsan = false;
#endif
#else
constexpr bool kUnderAsan = false;
#endif

TEST(Soak, TinyPresetForwardsStayFlatAndDeterministic) {
  const int64_t forwards = env_int("MOE_EP_SOAK_FORWARDS", 2000);
  Problem p = tiny_problem("mxfp4");
  p.max_tokens = env_int("MOE_EP_SOAK_MAX_TOKENS", 32);
  std::mt19937_64 rng(env_int("MOE_EP_SOAK_SEED", 16));
  const WeightSet w = random_weights(p, WeightFormat::kMXFP4, 161);
  auto layer = make_layer(p, w);
  const int64_t T_max = p.max_tokens, H = p.hidden, K = p.top_k, E = p.num_experts;

  std::vector<Inputs> pool;
  for (int i = 0; i < 8; ++i) pool.push_back(random_inputs(p, T_max, 162 + i, {0.1}));
  const Inputs probe = random_inputs(p, T_max, 170, {0.2});
  const HostTensor<uint16_t> probe_y = run_forward(*layer, p, probe);

  std::vector<int64_t> ids(T_max * K);
  std::vector<uint16_t> y(T_max * H);
  std::uniform_int_distribution<int64_t> tokens(0, T_max);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  int64_t bad_calls = 0, errors = 0, wrong = 0, probes = 0, rss_warm = 0;
  const auto start = std::chrono::steady_clock::now();
  for (int64_t n = 0; n < forwards; ++n) {
    if (n == std::min<int64_t>(200, forwards / 2)) rss_warm = resident_bytes();
    const Inputs& in = pool[n % pool.size()];
    const int64_t T = n < 8 ? T_max : tokens(rng);  // the largest batch first: buffers at full size
    for (int64_t i = 0; i < T * K; ++i) ids[i] = unit(rng) < 0.1 ? -1 : in.ids64[i];
    const bool bad = T > 0 && unit(rng) < 0.05;
    if (bad) {
      const int64_t values[] = {E, E + 1, -2, 1 << 30};
      ids[std::uniform_int_distribution<int64_t>(0, T * K - 1)(rng)] = values[n % 4];
      ++bad_calls;
    }
    ForwardArgs args;
    args.x = view_of(const_cast<uint16_t*>(in.x.values().data()), DType::kBF16, {T, H});
    args.topk_ids = view_of(ids.data(), DType::kI64, {T, K});
    args.topk_weights = view_of(const_cast<float*>(in.weights.values().data()), DType::kF32, {T, K});
    args.y = view_of(y.data(), DType::kBF16, {T, H});
    bool threw = false;
    try {
      layer->forward(args);
    } catch (const Error& e) {
      threw = true;
      ++errors;
      if (e.code() != ErrorCode::kInvalidArgument || e.message().find("topk_ids[") == std::string::npos)
        ADD_FAILURE() << "forward " << n << ": unexpected error " << e.what();
    }
    wrong += threw != bad;
    if (layer->read_error_flags(true) != 0) ADD_FAILURE() << "forward " << n << ": error flags raised";
    if ((n + 1) % 10000 == 0 || n + 1 == forwards) {
      ++probes;
      ASSERT_EQ(run_forward(*layer, p, probe).values(), probe_y.values())
          << "the probe output changed after " << n + 1 << " forwards";
    }
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const int64_t rss_end = resident_bytes();
  fmt::print("soak: {} forwards (T in [0, {}], tiny preset) in {:.1f} s ({:.0f} forwards/s); {} with "
             "an out-of-range id, {} errors raised, {} mismatches; {} probe checks bitwise equal; "
             "resident {} KiB after warm-up, {} KiB at the end ({:+} KiB)\n",
             forwards, T_max, seconds, forwards / seconds, bad_calls, errors, wrong, probes,
             rss_warm / 1024, rss_end / 1024, (rss_end - rss_warm) / 1024);
  EXPECT_EQ(wrong, 0) << "errors must be raised exactly when an out-of-range id was present";
  EXPECT_GT(bad_calls, 0);
  if (kUnderAsan) {
    fmt::print("soak: ASan build: freed memory stays in ASan's quarantine, so resident memory is "
               "not compared (LeakSanitizer checks for leaks at exit)\n");
  } else {
    EXPECT_LT(rss_end - rss_warm, int64_t{8} << 20) << "resident memory grew";
  }
}

}  // namespace
}  // namespace moe_ep
