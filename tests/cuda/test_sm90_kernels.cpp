// Device checks of the small SM90 kernels against host implementations, bit for bit:
// Q8 and NVFP4 quantization (include/moe_ep/quant.h), the routing permutation, and both in one
// launch.
#include <algorithm>
#include <cmath>
#include <limits>
#include <random>

#include <gtest/gtest.h>

#include "cuda/device_buffer.h"
#include "cuda/errors.h"
#include "cuda/kernels/sm90_nvfp4_quantize.h"
#include "cuda/kernels/sm90_permute.h"
#include "cuda/kernels/sm90_q8_quantize.h"
#include "cuda/kernels/sm90_quantize_route.h"
#include "cuda/tile/fp4_bf16_codec.h"
#include "cuda_test_util.h"
#include "moe_ep/formats.h"
#include "moe_ep/quant.h"

namespace moe_ep::cuda {
namespace {

template <class T>
std::vector<T> download(const DeviceBuffer& b, size_t n) {
  std::vector<T> out(n);
  if (n) MOE_EP_CUDA_CHECK(cudaMemcpy(out.data(), b.get(), n * sizeof(T), cudaMemcpyDeviceToHost));
  return out;
}

// Rows of bf16 values with structure: Gaussian rows at several scales, all zeros, tiny values
// (the 1e-4 amax floor), huge values and infinities (the 254 scale clamp), exact powers of two.
std::vector<float> q8_test_rows(int64_t rows, int64_t cols, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> v(rows * cols);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      float x = normal(rng) * std::ldexp(1.0f, static_cast<int>(r % 13) - 6);
      switch (r % 7) {
        case 1: x = 0.0f; break;
        case 2: x *= 1e-30f; break;
        case 3: x = std::ldexp(1.0f, static_cast<int>(rng() % 40) - 20) * ((rng() & 1) ? 1 : -1); break;
        case 4: if (c % 97 == 5) x = 3e38f; break;
        case 5: if (c == 33) x = -std::numeric_limits<float>::infinity(); break;
        default: break;
      }
      v[r * cols + c] = round_to_bf16(x);
    }
  return v;
}

TEST(Sm90Kernels, Q8QuantizeMatchesTheHostQuantizerBitForBit) {
  MOE_EP_REQUIRE_CUDA();
  const int64_t rows = 77, cols = 4096;
  const std::vector<float> v = q8_test_rows(rows, cols, 5);
  std::vector<uint16_t> x(v.size());
  for (size_t i = 0; i < v.size(); ++i) x[i] = float_to_bf16(v[i]);
  std::vector<uint8_t> want_q(v.size()), want_s(v.size() / 32);
  for (int64_t r = 0; r < rows; ++r)
    quantize_q8(v.data() + r * cols, cols, want_q.data() + r * cols, want_s.data() + r * cols / 32);

  DeviceBuffer dx = DeviceBuffer::upload(x), dq(v.size()), ds(v.size() / 32);
  Q8QuantizeParams p{dx.get<uint16_t>(), rows, cols, dq.get(), ds.get()};
  MOE_EP_CUDA_CHECK(launch_sm90_q8_quantize(p, nullptr));
  MOE_EP_CUDA_CHECK(cudaDeviceSynchronize());
  const auto q = download<uint8_t>(dq, v.size());
  const auto s = download<uint8_t>(ds, v.size() / 32);
  for (size_t i = 0; i < s.size(); ++i) ASSERT_EQ(s[i], want_s[i]) << "scale block " << i << " row " << i / (cols / 32);
  for (size_t i = 0; i < q.size(); ++i)
    ASSERT_EQ(q[i], want_q[i]) << "row " << i / cols << " col " << i % cols << " value " << v[i];

  // With rs_bf16: the same scales, the Q8 values as bf16 (exact) at their rs positions along k,
  // and q left alone.
  DeviceBuffer d16(v.size() * 2);
  MOE_EP_CUDA_CHECK(cudaMemset(d16.get(), 0x5A, d16.bytes()));
  MOE_EP_CUDA_CHECK(cudaMemset(dq.get(), 0x5A, dq.bytes()));
  MOE_EP_CUDA_CHECK(cudaMemset(ds.get(), 0x5A, ds.bytes()));
  p.rs_bf16 = d16.get<uint16_t>();
  MOE_EP_CUDA_CHECK(launch_sm90_q8_quantize(p, nullptr));
  MOE_EP_CUDA_CHECK(cudaDeviceSynchronize());
  EXPECT_EQ(download<uint8_t>(ds, v.size() / 32), want_s);
  EXPECT_EQ(download<uint8_t>(dq, v.size()), std::vector<uint8_t>(v.size(), 0x5A)) << "q written";
  const auto got16 = download<uint16_t>(d16, v.size());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      const size_t i = static_cast<size_t>(r * cols + c);
      const float want = e4m3_to_float(want_q[i]) * std::ldexp(1.0f, want_s[i / 32] - 127);
      const uint16_t got = got16[r * cols + c / 128 * 128 + rs_position_of_k(static_cast<int>(c % 128))];
      if (std::isnan(want)) {
        ASSERT_TRUE(std::isnan(bf16_to_float(got))) << "row " << r << " col " << c;
      } else {
        ASSERT_EQ(got, float_to_bf16(want)) << "row " << r << " col " << c << " value " << v[i];
      }
    }
}

// Finite bf16 values at the top of the range (>= 1.9375 * 2^127 would round to 2^128 in e4m3
// times any scale) saturate to kQ8MaxFinite on the device as on the host: never an Inf code.
TEST(Sm90Kernels, Q8SaturatesTheTopOfTheBf16RangeLikeTheHost) {
  MOE_EP_REQUIRE_CUDA();
  const int64_t rows = 8, cols = 256;
  const float top[] = {0x1.fep+127f, 0x1.f0p+127f, 0x1.e8p+127f, 0x1.e0p+127f, 3.0e38f};
  std::vector<float> v(rows * cols);
  std::mt19937_64 rng(11);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int64_t i = 0; i < rows * cols; ++i) {
    float x = normal(rng);
    if (i % 7 == 3) x = top[(i / 7) % 5] * ((i & 1) ? -1.0f : 1.0f);
    v[i] = round_to_bf16(x);
  }
  std::vector<uint16_t> x(v.size());
  for (size_t i = 0; i < v.size(); ++i) x[i] = float_to_bf16(v[i]);
  std::vector<uint8_t> want_q(v.size()), want_s(v.size() / 32);
  for (int64_t r = 0; r < rows; ++r)
    quantize_q8(v.data() + r * cols, cols, want_q.data() + r * cols, want_s.data() + r * cols / 32);
  for (size_t i = 0; i < v.size(); ++i) {
    const float back = e4m3_to_float(want_q[i]) * std::ldexp(1.0f, want_s[i / 32] - 127);
    ASSERT_TRUE(std::isfinite(back)) << "host: element " << i << " = " << v[i] << " quantizes to " << back;
  }
  DeviceBuffer dx = DeviceBuffer::upload(x), dq(v.size()), ds(v.size() / 32);
  Q8QuantizeParams p{dx.get<uint16_t>(), rows, cols, dq.get(), ds.get()};
  MOE_EP_CUDA_CHECK(launch_sm90_q8_quantize(p, nullptr));
  MOE_EP_CUDA_CHECK(cudaDeviceSynchronize());
  EXPECT_EQ(download<uint8_t>(ds, v.size() / 32), want_s);
  const auto q = download<uint8_t>(dq, v.size());
  for (size_t i = 0; i < q.size(); ++i) ASSERT_EQ(q[i], want_q[i]) << "element " << i << " value " << v[i];
}

TEST(Sm90Kernels, Nvfp4QuantizeMatchesTheHostQuantizerBitForBit) {
  MOE_EP_REQUIRE_CUDA();
  for (bool bf16 : {true, false}) {
    const int64_t rows = 41, cols = 2048;
    std::vector<float> v = q8_test_rows(rows, cols, 9);
    for (float& f : v)
      if (!std::isfinite(f) || std::fabs(f) > 1e30f) f = 1.0f;  // per-row amax must stay finite
    if (!bf16)
      for (size_t i = 0; i < v.size(); ++i) v[i] *= 1.0f + 1e-3f * static_cast<float>(i % 7);
    std::vector<uint8_t> want_p(v.size() / 2), want_s(v.size() / 16);
    std::vector<float> want_g(rows);
    quantize_nvfp4_rows(v.data(), rows, cols, want_p.data(), want_s.data(), want_g.data());

    DeviceBuffer din;
    if (bf16) {
      std::vector<uint16_t> x(v.size());
      for (size_t i = 0; i < v.size(); ++i) x[i] = float_to_bf16(v[i]);
      din = DeviceBuffer::upload(x);
    } else {
      din = DeviceBuffer::upload(v);
    }
    DeviceBuffer dp(v.size() / 2), ds(v.size() / 16), dg(rows * 4);
    Nvfp4QuantizeParams p;
    p.in = din.get();
    p.in_is_bf16 = bf16;
    p.cols = cols;
    p.max_rows = rows;
    p.packed = dp.get();
    p.scales = ds.get();
    p.global = dg.get<float>();
    MOE_EP_CUDA_CHECK(launch_sm90_nvfp4_quantize(p, nullptr));
    MOE_EP_CUDA_CHECK(cudaDeviceSynchronize());
    const auto g = download<float>(dg, rows);
    const auto s = download<uint8_t>(ds, want_s.size());
    const auto q = download<uint8_t>(dp, want_p.size());
    for (int64_t r = 0; r < rows; ++r) ASSERT_EQ(g[r], want_g[r]) << "bf16=" << bf16 << " row " << r;
    for (size_t i = 0; i < s.size(); ++i) ASSERT_EQ(s[i], want_s[i]) << "bf16=" << bf16 << " scale " << i;
    for (size_t i = 0; i < q.size(); ++i) ASSERT_EQ(q[i], want_p[i]) << "bf16=" << bf16 << " byte " << i;
  }
}

// Host model of sm90_permute: rows ordered by (expert, token, slot).
struct Routing {
  std::vector<int32_t> offsets, tile_expert, tile_row_begin, row_token, slot_row;
  std::vector<float> row_weight;
  int32_t num_tiles = 0;
  bool bad_id = false;
};

Routing host_routing(const std::vector<int64_t>& ids, const std::vector<float>& w, int T, int K, int E, int bm) {
  Routing r;
  r.offsets.assign(E + 1, 0);
  r.slot_row.assign(T * K, -1);
  std::vector<std::vector<int>> slots(E);
  for (int i = 0; i < T * K; ++i) {
    if (ids[i] < -1 || ids[i] >= E) r.bad_id = true;
    if (ids[i] >= 0 && ids[i] < E) slots[ids[i]].push_back(i);
  }
  for (int e = 0; e < E; ++e) {
    r.offsets[e + 1] = r.offsets[e] + static_cast<int32_t>(slots[e].size());
    for (size_t j = 0; j < slots[e].size(); ++j) {
      const int row = r.offsets[e] + static_cast<int>(j);
      r.slot_row[slots[e][j]] = row;
      r.row_token.push_back(slots[e][j] / K);
      r.row_weight.push_back(w[slots[e][j]]);
    }
    for (size_t j = 0; j < slots[e].size(); j += bm) {
      r.tile_expert.push_back(e);
      r.tile_row_begin.push_back(r.offsets[e] + static_cast<int32_t>(j));
    }
  }
  r.num_tiles = static_cast<int32_t>(r.tile_expert.size());
  return r;
}

// The routing alone (launch_sm90_permute) and together with Q8 or NVFP4 of x in one launch
// (launch_sm90_quantize_route, launch_sm90_nvfp4_quantize_route: the rows also checked against the
// host quantizers) against the host routing.
TEST(Sm90Kernels, PermuteGroupsRowsByExpertTokenSlotAndFlagsBadIds) {
  MOE_EP_REQUIRE_CUDA();
  struct Case {
    int T, K, E;
    const char* routing;
  };
  const Case cases[] = {{1, 6, 256, "random"},    {7, 4, 16, "random"},     {2500, 6, 256, "random"},
                        {3000, 4, 16, "one-expert"}, {600, 6, 384, "bad-ids"}, {5, 4, 16, "all-skipped"},
                        {900, 8, 1024, "duplicates"}, {8192, 6, 256, "random"}, {6000, 8, 7, "duplicates"},
                        {1500, 6, 384, "bad-ids"},   {50000, 6, 256, "random"}};
  MOE_EP_CUDA_CHECK(configure_sm90_permute(1024));
  MOE_EP_CUDA_CHECK(configure_sm90_quantize_route(1024));
  MOE_EP_CUDA_CHECK(configure_sm90_nvfp4_quantize_route(1024));
  std::mt19937_64 rng(21);
  for (const Case& c : cases) {
    SCOPED_TRACE(::testing::Message() << "T=" << c.T << " K=" << c.K << " E=" << c.E << " " << c.routing);
    const int n = c.T * c.K;
    std::vector<int64_t> ids(n);
    std::vector<float> w(n);
    for (int i = 0; i < n; ++i) {
      w[i] = static_cast<float>(i) * 0.25f + 1.0f;
      const std::string mode = c.routing;
      if (mode == "random") ids[i] = (rng() % 10 == 0) ? -1 : static_cast<int64_t>(rng() % c.E);
      if (mode == "one-expert") ids[i] = i % c.K == 0 ? 3 : -1;
      if (mode == "bad-ids") ids[i] = i == 17 ? c.E : i == 400 ? -7 : static_cast<int64_t>(rng() % c.E);
      if (mode == "all-skipped") ids[i] = -1;
      if (mode == "duplicates") ids[i] = static_cast<int64_t>(rng() % 5);
    }
    const Routing want = host_routing(ids, w, c.T, c.K, c.E, 64);
    // x of the fused launches: T rows of 4096 structured bf16 values (NVFP4: 256 blocks of 16 per
    // row, two passes of its 128-thread row group), and their host quantizations. (Past 8192
    // tokens, the routing alone: the fused launches serve small T.)
    const int64_t cols = 4096;
    const bool with_x = c.T <= 8192;
    const int x_rows = with_x ? c.T : 0;
    const std::vector<float> xv = q8_test_rows(x_rows, cols, static_cast<uint64_t>(c.T));
    std::vector<uint16_t> x(xv.size());
    for (size_t i = 0; i < xv.size(); ++i) x[i] = float_to_bf16(xv[i]);
    std::vector<uint8_t> want_q(xv.size()), want_s(xv.size() / 32);
    for (int64_t r = 0; r < x_rows; ++r)
      quantize_q8(xv.data() + r * cols, cols, want_q.data() + r * cols, want_s.data() + r * cols / 32);
    const DeviceBuffer dx = DeviceBuffer::upload(x);
    // NVFP4 rows: the same values with a finite amax per row (as the NVFP4 test above).
    std::vector<float> nv = xv;
    for (float& f : nv)
      if (!std::isfinite(f) || std::fabs(f) > 1e30f) f = 1.0f;
    std::vector<uint16_t> nvx(nv.size());
    for (size_t i = 0; i < nv.size(); ++i) nvx[i] = float_to_bf16(nv[i]);
    std::vector<uint8_t> want_np(nv.size() / 2), want_ns(nv.size() / 16);
    std::vector<float> want_ng(x_rows);
    quantize_nvfp4_rows(nv.data(), x_rows, cols, want_np.data(), want_ns.data(), want_ng.data());
    const DeviceBuffer dnvx = DeviceBuffer::upload(nvx);
    for (int variant = 0; variant < 8; ++variant) {
      // 0: routing alone, 1: with Q8 of x, 2: with NVFP4 of x, 3: alone with the chunked form's
      // workspace (chunked from kRouteOneBlockMaxSlots slots on)
      const int fused = variant / 2;
      const bool i64 = variant % 2 == 1;
      if ((fused == 1 || fused == 2) && !with_x) continue;
      SCOPED_TRACE(::testing::Message() << (i64 ? "int64 ids" : "int32 ids")
                                        << (fused == 1 ? ", with Q8 of x" : fused == 2 ? ", with NVFP4 of x"
                                            : fused == 3 ? ", chunked" : ""));
      DeviceBuffer dids;
      if (i64) {
        dids = DeviceBuffer::upload(ids);
      } else {
        std::vector<int32_t> ids32(ids.begin(), ids.end());
        dids = DeviceBuffer::upload(ids32);
      }
      DeviceBuffer dw = DeviceBuffer::upload(w);
      const int max_tiles = n / 64 + std::min(n, c.E) + 1;
      DeviceBuffer off((c.E + 1) * 4), nt(4), te(max_tiles * 4), tr(max_tiles * 4),
          rt(std::max(n, 1) * 4), rw(std::max(n, 1) * 4), sr(std::max(n, 1) * 4), flags(4);
      MOE_EP_CUDA_CHECK(cudaMemset(flags.get(), 0, 4));
      DeviceBuffer chunks(std::max(sm90_route_chunks_bound(n), 1) * c.E * 4);
      for (DeviceBuffer* b : {&off, &nt, &te, &tr, &rt, &rw, &sr, &chunks})  // poison: every word is written
        MOE_EP_CUDA_CHECK(cudaMemset(b->get(), 0x5A, b->bytes()));
      PermuteParams p;
      p.topk_ids = dids.get();
      p.ids_are_int64 = i64;
      p.topk_weights = dw.get<float>();
      p.num_tokens = c.T;
      p.top_k = c.K;
      p.num_experts = c.E;
      p.block_m = 64;
      p.expert_offsets = off.get<int32_t>();
      p.num_m_tiles = nt.get<int32_t>();
      p.tile_expert = te.get<int32_t>();
      p.tile_row_begin = tr.get<int32_t>();
      p.row_token = rt.get<int32_t>();
      p.row_weight = rw.get<float>();
      p.slot_row = sr.get<int32_t>();
      p.error_flags = flags.get<uint32_t>();
      if (fused == 3) p.chunk_rows = chunks.get<int32_t>();
      DeviceBuffer dq(xv.size()), ds(xv.size() / 16), dg(std::max(c.T, 1) * 4);  // scales: NVFP4's per 16
      MOE_EP_CUDA_CHECK(cudaMemset(dq.get(), 0xFF, dq.bytes()));
      MOE_EP_CUDA_CHECK(cudaMemset(ds.get(), 0xFF, ds.bytes()));
      MOE_EP_CUDA_CHECK(cudaMemset(dg.get(), 0xFF, dg.bytes()));
      // With Q8 of x, int64 ids: x written as bf16 in the rs order (Q8QuantizeParams::rs_bf16).
      const bool x_bf16 = fused == 1 && i64;
      DeviceBuffer d16(x_bf16 ? xv.size() * 2 : 0);
      if (x_bf16) MOE_EP_CUDA_CHECK(cudaMemset(d16.get(), 0x5A, d16.bytes()));
      if (fused == 1) {
        Q8QuantizeParams q{dx.get<uint16_t>(), c.T, cols, dq.get(), ds.get()};
        if (x_bf16) q.rs_bf16 = d16.get<uint16_t>();
        MOE_EP_CUDA_CHECK(launch_sm90_quantize_route(q, p, nullptr));
      } else if (fused == 2) {
        Nvfp4QuantizeParams q;
        q.in = dnvx.get();
        q.in_is_bf16 = 1;
        q.cols = cols;
        q.max_rows = c.T;
        q.packed = dq.get();
        q.scales = ds.get();
        q.global = dg.get<float>();
        MOE_EP_CUDA_CHECK(launch_sm90_nvfp4_quantize_route(q, p, nullptr));
      } else {
        MOE_EP_CUDA_CHECK(launch_sm90_permute(p, nullptr));
      }
      MOE_EP_CUDA_CHECK(cudaDeviceSynchronize());
      if (fused == 1 && !x_bf16) EXPECT_EQ(download<uint8_t>(dq, xv.size()), want_q);
      if (fused == 1) EXPECT_EQ(download<uint8_t>(ds, xv.size() / 32), want_s);
      if (x_bf16) {
        EXPECT_EQ(download<uint8_t>(dq, xv.size()), std::vector<uint8_t>(xv.size(), 0xFF)) << "q written";
        const auto got16 = download<uint16_t>(d16, xv.size());
        for (size_t i = 0; i < xv.size(); ++i) {
          const float want = e4m3_to_float(want_q[i]) * std::ldexp(1.0f, want_s[i / 32] - 127);
          const uint16_t got = got16[i / 128 * 128 + rs_position_of_k(static_cast<int>(i % 128))];
          if (std::isnan(want))
            ASSERT_TRUE(std::isnan(bf16_to_float(got))) << "x element " << i;
          else
            ASSERT_EQ(got, float_to_bf16(want)) << "x element " << i;
        }
      }
      if (fused == 2) {
        EXPECT_EQ(download<uint8_t>(dq, want_np.size()), want_np);
        EXPECT_EQ(download<uint8_t>(ds, want_ns.size()), want_ns);
        EXPECT_EQ(download<float>(dg, c.T), want_ng);
      }
      const int rows = want.offsets[c.E];
      EXPECT_EQ(download<int32_t>(off, c.E + 1), want.offsets);
      ASSERT_EQ(download<int32_t>(nt, 1)[0], want.num_tiles);
      EXPECT_EQ(download<int32_t>(te, want.num_tiles), want.tile_expert);
      EXPECT_EQ(download<int32_t>(tr, want.num_tiles), want.tile_row_begin);
      EXPECT_EQ(download<int32_t>(rt, rows), want.row_token);
      EXPECT_EQ(download<float>(rw, rows), want.row_weight);
      EXPECT_EQ(download<int32_t>(sr, n), want.slot_row);
      EXPECT_EQ(download<uint32_t>(flags, 1)[0], want.bad_id ? kErrorExpertIdOutOfRange : 0u);
    }
  }
}

}  // namespace
}  // namespace moe_ep::cuda
