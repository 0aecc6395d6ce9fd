// The device routing stage (cuda/sm90_routing.h) against the CPU router and CPU Eplb: ids,
// weights and load counters bitwise equal on random logits, crafted ties, hash layers and
// placements with replicas of hot experts; a captured graph that follows the recording flag and
// a new placement; device-side bad input raising the sticky flag.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <tuple>

#include <fmt/format.h>

#include "cuda/device_buffer.h"
#include "cuda/errors.h"
#include "cuda/sm90_routing.h"
#include "cuda_test_util.h"
#include "moe_ep/eplb.h"
#include "moe_ep/error.h"
#include "moe_ep/formats.h"
#include "moe_ep/layer.h"
#include "moe_ep/router.h"
#include "route_bounds_probe.h"
#include "support/routing_cases.h"

namespace moe_ep {
namespace {

using cuda::DeviceBuffer;

struct Case {
  int64_t T = 1, L = 16, K = 4;
  bool bf16 = false, bias = true, ids64 = false;
  int ties = 0;  // 0: N(0, 2) logits; n > 0: logits drawn from n levels (many exact ties)
  float scale = 1.5f;
  uint64_t seed = 1;
  bool wide = false;  // logits over every octave the score sees (near the exp cut-off, huge, tiny)
  std::string str() const {
    return fmt::format("T={} L={} K={} bf16={} bias={} ids64={} ties={} wide={} seed={}", T, L, K, bf16,
                       bias, ids64, ties, wide, seed);
  }
};

struct HostRouting {
  std::vector<float> logits_f32;      // widened values the CPU router sees
  std::vector<uint16_t> logits_bf16;  // when bf16
  std::vector<float> bias;
  std::vector<int64_t> ids;
  std::vector<float> weights;
};

HostRouting make_logits(const Case& c) {
  HostRouting h;
  std::mt19937_64 rng(c.seed);
  std::normal_distribution<float> n(0.0f, 2.0f);
  std::uniform_int_distribution<int> level(0, std::max(c.ties, 1) - 1);
  h.logits_f32.resize(c.T * c.L);
  for (float& v : h.logits_f32) v = c.ties ? 0.25f * static_cast<float>(level(rng)) - 0.5f : n(rng);
  if (c.wide) {
    const float edges[] = {-86.0f, 86.0f, -87.5f, -20.0f, -6.93f, 0.0f, 1e-30f, -1e-30f, 3e38f, -3e38f};
    std::uniform_int_distribution<int> pick(0, 3);
    std::uniform_int_distribution<int> edge(0, static_cast<int>(std::size(edges)) - 1);
    std::uniform_real_distribution<float> octave(-40.0f, 40.0f);
    for (float& v : h.logits_f32) {
      const int kind = pick(rng);
      if (kind == 0) v = edges[edge(rng)] * (1.0f + 1e-6f * n(rng));
      if (kind == 1) v = std::copysign(std::exp2(octave(rng)), n(rng));
    }
  }
  if (c.bf16) {
    h.logits_bf16.resize(h.logits_f32.size());
    for (size_t i = 0; i < h.logits_f32.size(); ++i) {
      h.logits_bf16[i] = float_to_bf16(h.logits_f32[i]);
      h.logits_f32[i] = bf16_to_float(h.logits_bf16[i]);
    }
  }
  if (c.bias) {
    h.bias.resize(c.L);
    std::normal_distribution<float> b(0.0f, 0.1f);
    // With ties, a bias of a few levels keeps s + bias tied too.
    for (float& v : h.bias) v = c.ties ? 0.125f * static_cast<float>(level(rng) % 2) : b(rng);
  }
  return h;
}

// The CPU router on h's logits (layer_idx, optional hash tensors), then the CPU Eplb.
void cpu_route(const Case& c, HostRouting& h, int64_t layer, int64_t hash_layers,
               const std::vector<int32_t>* tokens, const std::vector<int32_t>* table, int64_t vocab) {
  RouterConfig rc{c.L, c.K, c.scale, hash_layers};
  h.ids.assign(c.T * c.K, -7);
  h.weights.assign(c.T * c.K, NAN);
  RouterArgs a;
  a.layer_idx = layer;
  if (c.bf16)
    a.logits = TensorView::contiguous(h.logits_bf16.data(), DType::kBF16, {c.T, c.L});
  else
    a.logits = TensorView::contiguous(h.logits_f32.data(), DType::kF32, {c.T, c.L});
  if (c.bias) a.bias = TensorView::contiguous(h.bias.data(), DType::kF32, {c.L});
  if (tokens) {
    a.token_ids = TensorView::contiguous(const_cast<int32_t*>(tokens->data()), DType::kI32, {c.T});
    a.hash_table = TensorView::contiguous(const_cast<int32_t*>(table->data()), DType::kI32, {vocab, c.K});
  }
  a.topk_ids = TensorView::contiguous(h.ids.data(), DType::kI64, {c.T, c.K});
  a.topk_weights = TensorView::contiguous(h.weights.data(), DType::kF32, {c.T, c.K});
  route_deepseek_v4(rc, a);
}

template <class T>
std::vector<T> download(const DeviceBuffer& b, size_t n) {
  std::vector<T> v(n);
  if (n) MOE_EP_CUDA_CHECK(cudaMemcpy(v.data(), b.get(), n * sizeof(T), cudaMemcpyDeviceToHost));
  return v;
}

std::vector<int64_t> download_ids(const DeviceBuffer& b, size_t n, bool ids64) {
  if (ids64) return download<int64_t>(b, n);
  const std::vector<int32_t> v = download<int32_t>(b, n);
  return {v.begin(), v.end()};
}

// Device output buffers poisoned with 0xFF bytes (ids -1 would hide a missed write: 0x7F).
struct DeviceOut {
  DeviceBuffer ids, weights;
  DeviceOut(const Case& c) : ids(8 * c.T * c.K + 8), weights(4 * c.T * c.K + 4) { poison(); }
  void poison() {
    MOE_EP_CUDA_CHECK(cudaMemset(ids.get(), 0x7F, ids.bytes()));
    MOE_EP_CUDA_CHECK(cudaMemset(weights.get(), 0xFF, weights.bytes()));
    MOE_EP_CUDA_CHECK(cudaDeviceSynchronize());  // before launches on non-blocking streams
  }
};

struct DeviceLogits {
  DeviceBuffer logits, bias;
  cuda::RouteBinding binding(const Case& c, const HostRouting& h, DeviceOut& out) {
    logits = c.bf16 ? DeviceBuffer::upload(h.logits_bf16) : DeviceBuffer::upload(h.logits_f32);
    if (c.bias) bias = DeviceBuffer::upload(h.bias);
    cuda::RouteBinding b;
    b.num_tokens = c.T;
    b.logits = logits.get();
    b.logits_bf16 = c.bf16;
    b.bias = c.bias ? bias.get<float>() : nullptr;
    b.topk_ids = out.ids.get();
    b.topk_ids_int64 = c.ids64;
    b.topk_weights = out.weights.get<float>();
    return b;
  }
};

void expect_bitwise(const Case& c, const std::vector<int64_t>& want_ids, const std::vector<float>& want_w,
                    const std::vector<int64_t>& ids, const std::vector<float>& w) {
  for (int64_t i = 0; i < c.T * c.K; ++i) {
    ASSERT_EQ(ids[i], want_ids[i]) << c.str() << " slot (" << i / c.K << ", " << i % c.K << ")";
    uint32_t a, b;
    std::memcpy(&a, &w[i], 4);
    std::memcpy(&b, &want_w[i], 4);
    ASSERT_EQ(a, b) << c.str() << " weight (" << i / c.K << ", " << i % c.K << "): " << w[i]
                    << " vs cpu " << want_w[i];
  }
}

// The device router against the CPU router on c's logits (edited by `edit` when given).
HostRouting check_router_case(const Case& c, void (*edit)(HostRouting&) = nullptr) {
  HostRouting h = make_logits(c);
  if (edit) edit(h);
  cpu_route(c, h, 0, 0, nullptr, nullptr, 0);
  RouterConfig rc{c.L, c.K, c.scale, 0};
  cuda::Sm90Router router(&rc, c.L, c.K, 0);
  DeviceOut out(c);
  DeviceLogits dl;
  router.route(dl.binding(c, h, out), nullptr, nullptr);
  MOE_EP_CUDA_CHECK(cudaDeviceSynchronize());
  expect_bitwise(c, h.ids, h.weights, download_ids(out.ids, c.T * c.K, c.ids64),
                 download<float>(out.weights, c.T * c.K));
  EXPECT_EQ(router.read_error_flags(true), 0u) << c.str();
  return h;
}

TEST(Sm90Routing, RouterBitwiseOnRandomLogits) {
  MOE_EP_REQUIRE_CUDA();
  uint64_t seed = 10;
  for (int64_t L : {16, 256, 384})
    for (int64_t K : {1, 4, 6, 8})
      for (int64_t T : {1, 7, 300})
        for (bool bf16 : {false, true}) {
          Case c{T, L, K, bf16, (seed % 3) != 0, (seed % 2) == 0, 0, 2.5f, seed++};
          check_router_case(c);
          if (HasFatalFailure()) return;
        }
}

TEST(Sm90Routing, RouterBitwiseOnCraftedTies) {
  MOE_EP_REQUIRE_CUDA();
  uint64_t seed = 100;
  for (int64_t L : {16, 256})
    for (int ties : {1, 2, 3, 5})
      for (bool bias : {false, true}) {
        for (int64_t T : {64, 300}) {  // a block per token, then a warp per token (pre-filtered)
          Case c{T, L, 6, false, bias, true, ties, 1.0f, seed++};
          check_router_case(c);
          if (HasFatalFailure()) return;
        }
      }
  // Very negative logits: softplus 0, sum floored, weights 0 (and ids 0..K-1 by the tie rule).
  for (int64_t T : {3, 100}) {  // both kernels
    const HostRouting h = check_router_case(Case{T, 16, 4, false, false, false, 0, 1.0f, 7}, [](HostRouting& r) {
      for (float& v : r.logits_f32) v = -200.0f;
    });
    EXPECT_EQ(h.ids[0], 0);
    EXPECT_EQ(h.weights[0], 0.0f);
  }
}

// Logits across the whole range of the score (the exp cut-off at -86, overflow-sized, tiny,
// subnormal-adjacent): the warp kernel's cheap bounds must never drop an element of the top K.
TEST(Sm90Routing, RouterBitwiseOnWideRangeLogits) {
  MOE_EP_REQUIRE_CUDA();
  uint64_t seed = 300;
  for (int64_t L : {16, 256, 384})
    for (int64_t T : {5, 300})
      for (bool bias : {false, true}) {
        Case c{T, L, 6, false, bias, false, 0, 1.0f, seed++, true};
        check_router_case(c);
        if (HasFatalFailure()) return;
      }
}

TEST(Sm90RouteBounds, ApproximateScoreIsWithinItsMarginForEveryFiniteLogit) {
  MOE_EP_REQUIRE_CUDA();
  cuda::test::RouteBoundsSweep r;
  MOE_EP_CUDA_CHECK(cuda::test::run_route_bounds_sweep(r));
  EXPECT_EQ(r.finite, (uint64_t{1} << 32) - (uint64_t{1} << 24));  // all but exponent 0xff (inf, NaN)
  EXPECT_EQ(r.violations, 0u) << fmt::format("first violating logit bits 0x{:08x}", r.first_violation_bits);
  EXPECT_LT(r.worst_ratio, 1.0f);
  float worst_v;
  std::memcpy(&worst_v, &r.worst_bits, 4);
  fmt::print("[ route   ] bounds: {} finite logits, worst |exact - approx| / margin = {:.3e} at v = {:.9g}\n",
             r.finite, r.worst_ratio, worst_v);
}

TEST(Sm90Routing, HashLayersTakeIdsFromTheDeviceTable) {
  MOE_EP_REQUIRE_CUDA();
  const Case c{200, 256, 6, true, true, false, 0, 1.5f, 31};
  const int64_t vocab = 1000, num_hash = 3;
  std::mt19937_64 rng(5);
  std::vector<int32_t> table(vocab * c.K), tokens(c.T);
  for (int32_t& v : table) v = static_cast<int32_t>(rng() % c.L);
  table[17 * c.K + 1] = table[17 * c.K];  // one row naming an expert twice
  for (int32_t& v : tokens) v = static_cast<int32_t>(rng() % vocab);
  tokens[0] = 17;
  RouterConfig rc{c.L, c.K, c.scale, num_hash};
  cuda::Sm90Router router(&rc, c.L, c.K, 0);
  DeviceBuffer d_table = DeviceBuffer::upload(table), d_tokens = DeviceBuffer::upload(tokens);
  for (int64_t layer : {0, 2, 3}) {
    HostRouting h = make_logits(c);
    const bool hashed = layer < num_hash;
    cpu_route(c, h, layer, num_hash, hashed ? &tokens : nullptr, hashed ? &table : nullptr, vocab);
    DeviceOut out(c);
    DeviceLogits dl;
    cuda::RouteBinding b = dl.binding(c, h, out);
    b.layer_idx = layer;
    if (hashed) {
      b.token_ids = d_tokens.get();
      b.hash_table = d_table.get<int32_t>();
      b.vocab = vocab;
    }
    router.route(b, nullptr, nullptr);
    expect_bitwise(c, h.ids, h.weights, download_ids(out.ids, c.T * c.K, false),
                   download<float>(out.weights, c.T * c.K));
    if (hashed) {
      EXPECT_EQ(h.ids[0], h.ids[1]);
    }
  }
  EXPECT_EQ(router.read_error_flags(true), 0u);
}

using testsupport::hot_placement;

TEST(Sm90Routing, RouterAndEplbRemapAndCountersBitwise) {
  MOE_EP_REQUIRE_CUDA();
  for (auto [L, redundant, T] : {std::tuple<int64_t, int64_t, int64_t>{16, 8, 33}, {256, 32, 1},
                                 {256, 32, 8192}, {384, 96, 500}}) {
    const Case c{T, L, 6, false, true, (T % 2) == 1, 0, 2.5f, static_cast<uint64_t>(L + T)};
    const EplbPlacement placement = hot_placement(L, redundant, c.seed, 37);
    ASSERT_GT(*std::max_element(placement.replica_count.begin(), placement.replica_count.end()), 2)
        << "the case must replicate hot experts several times";
    HostRouting h = make_logits(c);
    cpu_route(c, h, 0, 0, nullptr, nullptr, 0);
    Eplb cpu_eplb(placement);
    cpu_eplb.set_recording(true);
    std::vector<int64_t> phys(h.ids.size());
    cpu_eplb.remap(TensorView::contiguous(h.ids.data(), DType::kI64, {T, c.K}),
                   TensorView::contiguous(phys.data(), DType::kI64, {T, c.K}));

    cuda::DeviceEplb eplb(placement, 0);
    eplb.set_recording(true);
    RouterConfig rc{c.L, c.K, c.scale, 0};
    cuda::Sm90Router router(&rc, c.L, c.K, 0);
    DeviceOut out(c);
    DeviceLogits dl;
    router.route(dl.binding(c, h, out), &eplb, nullptr);
    expect_bitwise(c, phys, h.weights, download_ids(out.ids, T * c.K, c.ids64),
                   download<float>(out.weights, T * c.K));
    EXPECT_EQ(eplb.counter_values(), cpu_eplb.counter_values()) << c.str();
  }
}

TEST(Sm90Routing, RemapOnlyWithHolesAndOutOfRangeIds) {
  MOE_EP_REQUIRE_CUDA();
  const int64_t L = 64, K = 6, T = 777;
  const EplbPlacement placement = hot_placement(L, 16, 3, 37);
  std::mt19937_64 rng(9);
  std::vector<int32_t> logical(T * K);
  for (int32_t& v : logical) {
    const uint64_t r = rng() % 100;
    v = r < 5 ? -1 : r < 8 ? static_cast<int32_t>(L + rng() % 5) : static_cast<int32_t>(rng() % L);
  }
  Eplb cpu_eplb(placement);
  cpu_eplb.set_recording(true);
  std::vector<int32_t> phys(T * K);
  cpu_eplb.remap(TensorView::contiguous(logical.data(), DType::kI32, {T, K}),
                 TensorView::contiguous(phys.data(), DType::kI32, {T, K}));
  cuda::DeviceEplb eplb(placement, 0);
  eplb.set_recording(true);
  cuda::Sm90Router remap(nullptr, L, K, 0);
  DeviceBuffer d_logical = DeviceBuffer::upload(logical), d_out(sizeof(int32_t) * T * K);
  MOE_EP_CUDA_CHECK(cudaMemset(d_out.get(), 0x7F, d_out.bytes()));
  cuda::RouteBinding b;
  b.num_tokens = T;
  b.logical_ids = d_logical.get();
  b.topk_ids = d_out.get();
  remap.route(b, &eplb, nullptr);
  EXPECT_EQ(download<int32_t>(d_out, T * K), phys);
  EXPECT_EQ(eplb.counter_values(), cpu_eplb.counter_values());
  EXPECT_EQ(remap.read_error_flags(true), 0u);  // out-of-range logical ids are skipped silently
}

// One captured graph, replayed: recording off then on (the device flag), then a new placement
// copied in place; each replay equal to the CPU with the same flag and placement.
TEST(Sm90Routing, CapturedGraphFollowsRecordingFlagAndPlacement) {
  MOE_EP_REQUIRE_CUDA();
  const Case c{300, 256, 6, false, true, false, 0, 1.5f, 77};
  const EplbPlacement first = hot_placement(c.L, 32, 1, 37);
  EplbPlacement second = hot_placement(c.L, 32, 2, 41, 3);
  ASSERT_NE(first.logical_to_physical, second.logical_to_physical);
  HostRouting h = make_logits(c);
  cpu_route(c, h, 0, 0, nullptr, nullptr, 0);
  cuda::DeviceEplb eplb(first, 0, std::max(first.max_replicas, second.max_replicas));
  RouterConfig rc{c.L, c.K, c.scale, 0};
  cuda::Sm90Router router(&rc, c.L, c.K, 0);
  DeviceOut out(c);
  DeviceLogits dl;
  const cuda::RouteBinding b = dl.binding(c, h, out);
  cudaStream_t s;
  MOE_EP_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  MOE_EP_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  router.route(b, &eplb, s);
  MOE_EP_CUDA_CHECK(cudaStreamEndCapture(s, &graph));
  MOE_EP_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));

  auto expect_replay = [&](const EplbPlacement& p, bool recording, int replays) {
    Eplb cpu(p);
    cpu.set_recording(recording);
    std::vector<int64_t> phys(h.ids.size());
    for (int i = 0; i < replays; ++i)
      cpu.remap(TensorView::contiguous(h.ids.data(), DType::kI64, {c.T, c.K}),
                TensorView::contiguous(phys.data(), DType::kI64, {c.T, c.K}));
    eplb.reset_counters();
    eplb.set_recording(recording);
    out.poison();
    for (int i = 0; i < replays; ++i) MOE_EP_CUDA_CHECK(cudaGraphLaunch(exec, s));
    MOE_EP_CUDA_CHECK(cudaStreamSynchronize(s));
    expect_bitwise(c, phys, h.weights, download_ids(out.ids, c.T * c.K, false),
                   download<float>(out.weights, c.T * c.K));
    EXPECT_EQ(eplb.counter_values(), cpu.counter_values()) << "recording " << recording;
  };
  expect_replay(first, false, 1);
  expect_replay(first, true, 3);
  eplb.set_placement(second);
  expect_replay(second, true, 2);
  const std::vector<int64_t> counters = eplb.counter_values();
  EXPECT_EQ(std::accumulate(counters.begin(), counters.end(), int64_t{0}), 2 * c.T * c.K);
  MOE_EP_CUDA_CHECK(cudaGraphExecDestroy(exec));
  MOE_EP_CUDA_CHECK(cudaGraphDestroy(graph));
  MOE_EP_CUDA_CHECK(cudaStreamDestroy(s));
  // A placement of another shape would need new buffers: refused.
  EXPECT_THROW(eplb.set_placement(hot_placement(c.L, 16, 3, 37)), Error);
}

TEST(Sm90Routing, DeviceBadInputRaisesTheStickyFlag) {
  MOE_EP_REQUIRE_CUDA();
  const Case c{4, 16, 4, false, false, false, 0, 1.0f, 3};
  RouterConfig rc{c.L, c.K, c.scale, 1};
  cuda::Sm90Router router(&rc, c.L, c.K, 0);
  HostRouting h = make_logits(c);
  std::vector<int32_t> table(8 * c.K, 1), tokens{0, 9, -1, 3};  // 9 and -1 outside [0, 8)
  table[3 * c.K + 2] = 16;                                        // outside [0, L)
  DeviceBuffer d_table = DeviceBuffer::upload(table), d_tokens = DeviceBuffer::upload(tokens);
  DeviceOut out(c);
  DeviceLogits dl;
  cuda::RouteBinding b = dl.binding(c, h, out);
  b.token_ids = d_tokens.get();
  b.hash_table = d_table.get<int32_t>();
  b.vocab = 8;
  router.route(b, nullptr, nullptr);
  EXPECT_EQ(router.read_error_flags(true), static_cast<uint32_t>(kErrorRouterInput));
  const std::vector<int64_t> ids = download_ids(out.ids, c.T * c.K, false);
  for (int k = 0; k < c.K; ++k) {
    EXPECT_EQ(ids[0 * c.K + k], 1);
    EXPECT_EQ(ids[1 * c.K + k], -1);
    EXPECT_EQ(ids[2 * c.K + k], -1);
    EXPECT_EQ(ids[3 * c.K + k], k == 2 ? -1 : 1);
  }
  EXPECT_EQ(router.read_error_flags(true), 0u) << "cleared";
  // Non-finite logits: flagged, not a host sync.
  b.layer_idx = 1;
  b.token_ids = nullptr;
  b.hash_table = nullptr;
  h.logits_f32[5] = NAN;
  MOE_EP_CUDA_CHECK(cudaMemcpy(dl.logits.get(), h.logits_f32.data(), 4 * h.logits_f32.size(),
                               cudaMemcpyHostToDevice));
  router.route(b, nullptr, nullptr);
  EXPECT_EQ(router.read_error_flags(true), static_cast<uint32_t>(kErrorRouterInput));
  {  // the same through the warp-per-token kernel (T > kRouteBlockPerTokenMaxTokens), +inf too
    const Case w{100, 16, 4, false, false, false, 0, 1.0f, 4};
    HostRouting hw = make_logits(w);
    hw.logits_f32[7 * w.L + 3] = NAN;
    hw.logits_f32[50 * w.L + 9] = INFINITY;
    DeviceOut wout(w);
    DeviceLogits wl;
    cuda::RouteBinding bw = wl.binding(w, hw, wout);
    bw.layer_idx = 1;  // a router layer
    router.route(bw, nullptr, nullptr);
    EXPECT_EQ(router.read_error_flags(true), static_cast<uint32_t>(kErrorRouterInput));
    const std::vector<int64_t> wids = download_ids(wout.ids, w.T * w.K, false);
    EXPECT_EQ(wids[50 * w.K], 9) << "an infinite logit is the top score";
  }
  // Host-side facts are checked before the launch, naming the parameter.
  b.layer_idx = 0;
  try {
    router.route(b, nullptr, nullptr);
    FAIL() << "a hash layer without token ids must be refused";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("routes by hash"), std::string::npos) << e.what();
  }
  EXPECT_THROW(cuda::Sm90Router(&rc, 17, 4, 0), Error);
}

}  // namespace
}  // namespace moe_ep
