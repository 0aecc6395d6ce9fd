// Bad activations (docs/spec.md §11, issue 16): NaN / Inf / huge values in x or topk_weights of one
// token may make that token's output non-finite, and never change another token's output (bit
// for bit) nor the Q8 / NVFP4 block scales of another token's quantized row. Weights with NaN
// or 0xFF scales (and non-finite bf16 weights) are refused at load on every layout the CPU
// families accept, on one rank and on simulated ranks, and by replace_expert_weights.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>

#include <fmt/format.h>

#include "moe_ep/formats.h"
#include "moe_ep/quant.h"
#include "support/ep_harness.h"

namespace moe_ep {
namespace {

using namespace testsupport;

constexpr int64_t kTokens = 6;

struct Poison {
  const char* name;
  bool in_x;  // else in topk_weights
  float value;
};

const Poison kPoisons[] = {
    {"x NaN", true, std::numeric_limits<float>::quiet_NaN()},
    {"x +Inf", true, INFINITY},
    {"x -Inf", true, -INFINITY},
    {"x huge (bf16 max)", true, 3.3895314e38f},
    {"x tiny (subnormal)", true, 1e-40f},
    {"weight NaN", false, std::numeric_limits<float>::quiet_NaN()},
    {"weight +Inf", false, INFINITY},
    {"weight -huge", false, -3.0e38f},
    {"weight huge", false, 1.0e30f},
};

void poison(Inputs& in, const Problem& p, int64_t t, const Poison& what) {
  if (what.in_x) {
    in.x[t * p.hidden + 37] = float_to_bf16(what.value);
  } else {
    for (int64_t k = 0; k < p.top_k; ++k)
      if (in.id(t, k) >= 0) {
        in.weights[t * p.top_k + k] = what.value;
        break;
      }
  }
}

// Rows of y other than `bad` equal in both outputs.
void expect_other_rows_equal(const HostTensor<uint16_t>& clean, const HostTensor<uint16_t>& y,
                             int64_t H, int64_t bad, const std::string& context) {
  for (int64_t t = 0; t < static_cast<int64_t>(y.size()) / H; ++t) {
    if (t == bad) continue;
    ASSERT_EQ(std::memcmp(&clean[t * H], &y[t * H], H * 2), 0)
        << context << ": token " << t << " changed when token " << bad << " was poisoned";
  }
}

class BadActivations : public ::testing::TestWithParam<std::string> {};

TEST_P(BadActivations, OneTokensPoisonStaysInItsRow) {
  Problem p = tiny_problem(GetParam());
  p.max_tokens = kTokens;
  const WeightSet w = random_weights(p, p.traits().native_format, 71);
  auto layer = make_layer(p, w);
  const Inputs clean_in = random_inputs(p, kTokens, 72);
  const HostTensor<uint16_t> clean = run_forward(*layer, p, clean_in);
  int non_finite_rows = 0;
  for (const Poison& what : kPoisons)
    for (int64_t bad : {int64_t{0}, kTokens / 2, kTokens - 1}) {
      Inputs in = clean_in;
      poison(in, p, bad, what);
      const HostTensor<uint16_t> y = run_forward(*layer, p, in);
      expect_other_rows_equal(clean, y, p.hidden, bad, fmt::format("{} {}", p.name(), what.name));
      for (int64_t j = 0; j < p.hidden; ++j)
        if ((y[bad * p.hidden + j] & 0x7F80) == 0x7F80) {
          ++non_finite_rows;
          break;
        }
    }
  // NaN / Inf poison reaches the poisoned token's own output (the poison is not silently
  // dropped: the contract lets it through, it must not spread).
  EXPECT_GT(non_finite_rows, 0);
  // And the layer is unharmed.
  EXPECT_EQ(run_forward(*layer, p, clean_in).values(), clean.values());
}

// On simulated ranks the quantized rows travel through the workspace: every other token's
// received codes and block scales are byte-identical with and without the poison.
TEST_P(BadActivations, PoisonChangesNoOtherTokensQuantizedRowOnSimulatedRanks) {
  Problem p = tiny_problem(GetParam());
  p.max_tokens = kTokens;
  const bool nv = p.recipe == Recipe::kNvfp4;
  const WeightSet w = random_weights(p, nv ? WeightFormat::kNVFP4 : WeightFormat::kMXFP4, 73);
  constexpr int R = 2;
  const int64_t code_bytes = nv ? p.hidden / 2 : p.hidden;
  const int64_t scale_bytes = nv ? p.hidden / kNvBlock : p.hidden / kMxBlock;
  // Every token routed to both ranks (experts 0 and 8, slots 2 and 3 holes), so each rank
  // receives every row of both ranks in source order.
  std::vector<Inputs> clean(R);
  for (int r = 0; r < R; ++r) {
    clean[r] = random_inputs(p, kTokens, 74 + r);
    for (int64_t t = 0; t < kTokens; ++t) {
      clean[r].set_id(t, 0, (t + r) % 8);
      clean[r].set_id(t, 1, 8 + (t * 3 + r) % 8);
      clean[r].set_id(t, 2, -1);
      clean[r].set_id(t, 3, -1);
    }
  }
  struct Seen {
    std::vector<uint8_t> codes, scales;  // [src rank, row] as received
    HostTensor<uint16_t> y;
  };
  auto run = [&](const std::vector<Inputs>& in) {
    std::vector<Seen> seen(R);
    auto out = run_ranks(R, [&](int r) {
      auto rt = Runtime::acquire(simulated_bootstrap(R, r));
      auto layer = Layer::create(rt, p.desc(), slice_experts(w.pack(), r * 8, 8), p.overrides);
      seen[r].y = run_forward(*layer, p, in[r]);
      const Workspace& ws = *rt->workspace();
      const auto* codes = reinterpret_cast<const uint8_t*>(ws.region(r, WorkspaceRegionId::kRecvCodes));
      const auto* scales = reinterpret_cast<const uint8_t*>(ws.region(r, WorkspaceRegionId::kRecvScales));
      seen[r].codes.assign(codes, codes + R * p.max_tokens * code_bytes);
      seen[r].scales.assign(scales, scales + R * p.max_tokens * scale_bytes);
    });
    for (auto& o : out) EXPECT_FALSE(o.threw) << outcomes_str(out);
    return seen;
  };
  const std::vector<Seen> base = run(clean);
  for (const Poison& what : kPoisons) {
    if (!what.in_x) continue;
    constexpr int kBadRank = 1;
    constexpr int64_t kBad = 2;
    std::vector<Inputs> in = clean;
    poison(in[kBadRank], p, kBad, what);
    const std::vector<Seen> seen = run(in);
    for (int r = 0; r < R; ++r) {
      for (int src = 0; src < R; ++src)
        for (int64_t t = 0; t < kTokens; ++t) {
          if (src == kBadRank && t == kBad) continue;
          const int64_t row = src * p.max_tokens + t;
          ASSERT_EQ(std::memcmp(&seen[r].scales[row * scale_bytes], &base[r].scales[row * scale_bytes], scale_bytes), 0)
              << p.name() << " " << what.name << ": rank " << r << " received changed scales of rank "
              << src << " token " << t;
          ASSERT_EQ(std::memcmp(&seen[r].codes[row * code_bytes], &base[r].codes[row * code_bytes], code_bytes), 0)
              << p.name() << " " << what.name << ": codes of rank " << src << " token " << t;
        }
      expect_other_rows_equal(base[r].y, seen[r].y, p.hidden, r == kBadRank ? kBad : -1,
                              fmt::format("{} {} rank {}", p.name(), what.name, r));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Families, BadActivations, ::testing::Values("mxfp4", "nvfp4"));

// ---- Bad weights: refused at load on every layout, one rank and simulated ranks ----

struct BadWeight {
  std::string name;
  WeightFormat format;
  std::function<void(WeightSet&)> spoil;
  const char* message_part;
};

std::vector<BadWeight> bad_weights() {
  auto nan_f = std::numeric_limits<float>::quiet_NaN();
  return {
      {"mxfp4 w13_scale 0xFF", WeightFormat::kMXFP4, [](WeightSet& w) { w.w13_scale[100] = 0xFF; }, "w13_scale"},
      {"mxfp4 w2_scale 0xFF", WeightFormat::kMXFP4, [](WeightSet& w) { w.w2_scale.values().back() = 0xFF; }, "w2_scale"},
      {"nvfp4 w13_scale 0x7F", WeightFormat::kNVFP4, [](WeightSet& w) { w.w13_scale[7] = 0x7F; }, "w13_scale"},
      {"nvfp4 w2_scale 0xFF", WeightFormat::kNVFP4, [](WeightSet& w) { w.w2_scale[9] = 0xFF; }, "w2_scale"},
      {"nvfp4 w13_global NaN", WeightFormat::kNVFP4, [=](WeightSet& w) { w.w13_global[1] = nan_f; }, "w13_global"},
      {"nvfp4 w2_global Inf", WeightFormat::kNVFP4, [](WeightSet& w) { w.w2_global[0] = INFINITY; }, "w2_global"},
      {"nvfp4 w2_global 0", WeightFormat::kNVFP4, [](WeightSet& w) { w.w2_global[0] = 0.0f; }, "w2_global"},
      {"bf16 w13 NaN", WeightFormat::kBF16, [](WeightSet& w) { w.w13_bf16[5] = 0x7FC0; }, "w13"},
      {"bf16 w13 -Inf", WeightFormat::kBF16, [](WeightSet& w) { w.w13_bf16[6] = 0xFF80; }, "w13"},
      {"bf16 w2 NaN", WeightFormat::kBF16, [](WeightSet& w) { w.w2_bf16.values().back() = 0xFFC1; }, "w2"},
  };
}

bool family_accepts(const std::string& family, WeightFormat f) {
  return f == WeightFormat::kBF16 || f == WeightFormat::kMXFP4 ||
         (family == "nvfp4" && f == WeightFormat::kNVFP4);
}

TEST(BadWeights, RefusedAtLoadOnEveryLayoutAndFamily) {
  int cases = 0;
  for (const std::string family : {"mxfp4", "nvfp4"})
    for (const BadWeight& bad : bad_weights()) {
      if (!family_accepts(family, bad.format)) continue;
      Problem p = tiny_problem(family);
      p.max_tokens = 4;
      WeightSet w = random_weights(p, bad.format, 81);
      // Unspoiled, the layer loads; spoiled, it is refused naming the tensor.
      ASSERT_NO_THROW(make_layer(p, w)) << family << " " << bad.name;
      bad.spoil(w);
      try {
        make_layer(p, w);
        ADD_FAILURE() << family << " " << bad.name << ": accepted";
      } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
        EXPECT_NE(e.message().find(bad.message_part), std::string::npos) << e.what();
      }
      ++cases;
    }
  EXPECT_EQ(cases, 15);  // mxfp4: 2 mxfp4 + 3 bf16; nvfp4: 2 + 5 nvfp4 + 3
}

TEST(BadWeights, RefusedByReplaceExpertWeights) {
  for (const std::string family : {"mxfp4", "nvfp4"}) {
    Problem p = tiny_problem(family);
    p.max_tokens = 4;
    const WeightFormat fmt = family == "nvfp4" ? WeightFormat::kNVFP4 : WeightFormat::kMXFP4;
    const WeightSet w = random_weights(p, fmt, 82);
    auto layer = make_layer(p, w);
    WeightSet one = gather_experts(w, {3});
    if (fmt == WeightFormat::kMXFP4) one.w13_scale[0] = 0xFF;
    else one.w2_scale[0] = 0x7F;
    const Inputs in = random_inputs(p, 4, 83);
    const HostTensor<uint16_t> before = run_forward(*layer, p, in);
    EXPECT_THROW(layer->replace_expert_weights(3, one.pack()), Error) << family;
    EXPECT_EQ(run_forward(*layer, p, in).values(), before.values()) << family << ": layer changed";
  }
}

TEST(BadWeights, OneRanksBadScaleFailsCreateOnEveryRank) {
  Problem p = tiny_problem("mxfp4");
  p.max_tokens = 4;
  const WeightSet w = random_weights(p, WeightFormat::kMXFP4, 84);
  WeightSet spoiled = w;
  constexpr int R = 2;
  // Expert 12 lives on rank 1.
  spoiled.w13_scale[(12 * 2 * p.intermediate + 3) * (p.hidden / kMxBlock)] = 0xFF;
  const auto start = std::chrono::steady_clock::now();
  auto out = run_ranks(R, [&](int r) {
    auto rt = Runtime::acquire(simulated_bootstrap(R, r, 20000));
    Layer::create(rt, p.desc(), slice_experts(spoiled.pack(), r * 8, 8), p.overrides);
  });
  // Rank 0 learns of rank 1's bad weights at once; it does not wait out the 20 s timeout.
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
  for (int r = 0; r < R; ++r) {
    ASSERT_TRUE(out[r].threw) << "rank " << r;
    EXPECT_NE(out[r].message.find("w13_scale[4, 3, 0] = 0xFF"), std::string::npos) << out[r].message;
  }
  EXPECT_NE(out[0].message.find("rank 1 failed"), std::string::npos) << out[0].message;
}

}  // namespace
}  // namespace moe_ep
