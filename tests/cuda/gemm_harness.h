// The kernel-level harness of the grouped-GEMM device tests (test_sm90_wgmma.cpp: the mxfp4
// forms against mma.sync; test_sm90_nvfp4_kernels.cpp: the nvfp4 forms against each other;
// test_sm90_gemm_timing.cpp: opt-in kernel times): shapes, device weights and routed problems, a
// run of routing + GEMM 1 + GEMM 2 on the forms of one choice (cuda/policy/sm90_forms.h, launched
// through sm90_form_kernels; outputs NaN-poisoned at creation), the error metrics, and
// random-byte problems at the flash size.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "core/thread_pool.h"
#include "core/weight_prep.h"
#include "cuda/device_buffer.h"
#include "cuda/errors.h"
#include "cuda/kernels/sm90_grouped_gemm.h"
#include "cuda/kernels/sm90_nvfp4_quantize.h"
#include "cuda/kernels/sm90_permute.h"
#include "cuda/policy/sm90_forms.h"
#include "cuda/weight_layout.h"
#include "cuda_test_util.h"
#include "moe_ep/formats.h"
#include "moe_ep/quant.h"
#include "testing/synthetic.h"

namespace moe_ep::cuda::gemmtest {

template <class T>
std::vector<T> download(const DeviceBuffer& b, size_t n) {
  std::vector<T> out(n);
  if (n) MOE_EP_CUDA_CHECK(cudaMemcpy(out.data(), b.get(), n * sizeof(T), cudaMemcpyDeviceToHost));
  return out;
}

struct Shape {
  std::string name;
  int64_t E, H, I, K;
};

// One GEMM's weights on the device: the tiles (the same for both scale forms), E8M0 block
// scales (mma.sync) and folded shifts + column factors (wgmma).
struct DeviceGemmWeights {
  DeviceBuffer tiles, e8m0_scales, shifts, col_scale;
};

struct DeviceWeights {
  DeviceGemmWeights w13, w2;
};

inline DeviceGemmWeights upload_gemm(const KernelWeightTensor& plain, const KernelWeightTensor& folded) {
  EXPECT_TRUE(folded.folded) << "the synthetic weights must lie inside the FP8 window";
  EXPECT_EQ(plain.tiles, folded.tiles);
  DeviceGemmWeights d;
  d.tiles = DeviceBuffer::upload(plain.tiles);
  d.e8m0_scales = DeviceBuffer::upload(plain.scales);
  d.shifts = DeviceBuffer::upload(folded.scales);
  d.col_scale = DeviceBuffer::upload(folded.row_factors());
  return d;
}

inline DeviceWeights make_device_weights(const Shape& s, uint64_t seed) {
  testing::WeightSpec spec;
  spec.hidden_size = s.H;
  spec.intermediate_size = s.I;
  spec.format = WeightFormat::kMXFP4;
  spec.seed = seed;
  spec.num_slots = s.E;
  const testing::HostWeights hw = testing::make_weights(spec);
  auto pool = shared_thread_pool(resolve_num_threads(0));
  const ParallelFor parallel = parallel_for_of(*pool);
  const HostExpertWeights canonical = prepare_host_weights(Recipe::kMxfp4, hw.pack(), {s.E, s.H, s.I}, parallel);
  const KernelWeights plain = make_kernel_weights(canonical, parallel, Fp8Fold::kNever);
  const KernelWeights folded = make_kernel_weights(canonical, parallel, Fp8Fold::kWhenInside);
  DeviceWeights d;
  d.w13 = upload_gemm(plain.w13, folded.w13);
  d.w2 = upload_gemm(plain.w2, folded.w2);
  return d;
}

// One weight set per (shape, seed) for the whole process (the flash shape takes seconds).
inline const DeviceWeights& cached_device_weights(const Shape& s, uint64_t seed) {
  static std::map<std::pair<std::string, uint64_t>, std::unique_ptr<DeviceWeights>> cache;
  auto& slot = cache[{s.name, seed}];
  if (!slot) slot = std::make_unique<DeviceWeights>(make_device_weights(s, seed));
  return *slot;
}

// Routed problem on the device: Q8 activations, ids, weights.
struct DeviceProblem {
  int64_t T = 0;
  DeviceBuffer a, a_scale, ids, topk_weights;
};

inline DeviceProblem make_problem(const Shape& s, const testing::HostInputs& in) {
  DeviceProblem p;
  p.T = in.num_tokens;
  std::vector<float> row(s.H);
  std::vector<uint8_t> q(in.num_tokens * s.H), sc(in.num_tokens * s.H / 32);
  for (int64_t t = 0; t < in.num_tokens; ++t) {
    for (int64_t j = 0; j < s.H; ++j) row[j] = bf16_to_float(in.x[t * s.H + j]);
    quantize_q8(row.data(), s.H, q.data() + t * s.H, sc.data() + t * s.H / 32);
  }
  p.a = DeviceBuffer::upload(q);
  p.a_scale = DeviceBuffer::upload(sc);
  p.ids = DeviceBuffer::upload(in.topk_ids);
  p.topk_weights = DeviceBuffer::upload(in.topk_weights);
  return p;
}

struct DeviceRouting {
  DeviceBuffer offsets, num_tiles, tile_expert, tile_row_begin, row_token, row_weight, slot_row, flags;
  int64_t rows = 0;
  int64_t max_tiles = 0;  // the m-tile bound of the routing (the decode kernels' grid)
  GroupedGemmSchedule schedule() const {
    return {num_tiles.get<int32_t>(), tile_expert.get<int32_t>(), tile_row_begin.get<int32_t>(),
            offsets.get<int32_t>(), static_cast<int32_t>(offsets.bytes() / 4 - 1)};
  }
};

// Routes T tokens' ids / weights (device) into m tiles of block_m rows.
inline DeviceRouting route(const Shape& s, int64_t T, const DeviceBuffer& ids, const DeviceBuffer& topk_weights, int block_m) {
  const int64_t n = T * s.K, max_tiles = n / block_m + std::min(n, s.E) + 1;
  DeviceRouting r;
  r.max_tiles = max_tiles;
  r.offsets = DeviceBuffer((s.E + 1) * 4);
  r.num_tiles = DeviceBuffer(4);
  r.tile_expert = DeviceBuffer(max_tiles * 4);
  r.tile_row_begin = DeviceBuffer(max_tiles * 4);
  r.row_token = DeviceBuffer(std::max<int64_t>(n, 1) * 4);
  r.row_weight = DeviceBuffer(std::max<int64_t>(n, 1) * 4);
  r.slot_row = DeviceBuffer(std::max<int64_t>(n, 1) * 4);
  r.flags = DeviceBuffer(4);
  MOE_EP_CUDA_CHECK(cudaMemset(r.flags.get(), 0, 4));
  MOE_EP_CUDA_CHECK(configure_sm90_permute(static_cast<int>(s.E)));
  PermuteParams pp;
  pp.topk_ids = ids.get();
  pp.topk_weights = topk_weights.get<float>();
  pp.num_tokens = static_cast<int32_t>(T);
  pp.top_k = static_cast<int32_t>(s.K);
  pp.num_experts = static_cast<int32_t>(s.E);
  pp.block_m = block_m;
  pp.expert_offsets = r.offsets.get<int32_t>();
  pp.num_m_tiles = r.num_tiles.get<int32_t>();
  pp.tile_expert = r.tile_expert.get<int32_t>();
  pp.tile_row_begin = r.tile_row_begin.get<int32_t>();
  pp.row_token = r.row_token.get<int32_t>();
  pp.row_weight = r.row_weight.get<float>();
  pp.slot_row = r.slot_row.get<int32_t>();
  pp.error_flags = r.flags.get<uint32_t>();
  MOE_EP_CUDA_CHECK(launch_sm90_permute(pp, nullptr));
  MOE_EP_CUDA_CHECK(cudaDeviceSynchronize());
  r.rows = download<int32_t>(r.offsets, s.E + 1)[s.E];
  return r;
}

struct GemmOutputs {
  std::vector<uint8_t> h, h_scale;  // [rows, I], [rows, I/32]
  std::vector<uint16_t> o;          // [rows, H]
};

// The forms of one run (cuda/policy/sm90_forms.h): GEMM 1's and GEMM 2's (the same form unless
// GEMM 1's is a GEMM 1 form only), routed in m tiles of GEMM 1's list_block_m rows (both forms
// share it). folded: the weights as folded shifts + column factors (every form but mma.sync, which
// runs on the E8M0 block scales as the unfolded reference).
struct Kernels {
  Sm90Form gemm1 = Sm90Form::kMxfp4Mma, gemm2 = Sm90Form::kMxfp4Mma;
  bool folded = false;

  Kernels() = default;
  explicit Kernels(Sm90Form form) : Kernels(form, form) {}
  Kernels(Sm90Form g1, Sm90Form g2)
      : gemm1(g1), gemm2(g2), folded(g1 != Sm90Form::kMxfp4Mma || g2 != Sm90Form::kMxfp4Mma) {}

  std::string name() const {
    return gemm1 == gemm2 ? std::string(sm90_form_name(gemm1))
                          : fmt::format("{} + {}", sm90_form_name(gemm1), sm90_form_name(gemm2));
  }
};

// The mxfp4 forms on folded weights that every comparison runs against mma.sync: FP8 wgmma,
// rs-fp8 (weights in registers, four consumers), rs-fp8 with narrow tail tiles, and GEMM 1 on the
// bf16 pairs form (128-token tiles over 64-row list tiles) with GEMM 2 on rs-fp8.
inline const std::vector<Kernels>& wgmma_variants() {
  static const std::vector<Kernels> v = {Kernels(Sm90Form::kMxfp4WgmmaFp8), Kernels(Sm90Form::kMxfp4RsFp8),
                                         Kernels(Sm90Form::kMxfp4RsFp8Tails),
                                         Kernels(Sm90Form::kMxfp4RsBf16Pairs, Sm90Form::kMxfp4RsFp8)};
  return v;
}

// Blocks per SM of a run's two kernels (configure1 of GEMM 1's form at k = H, configure2 of GEMM
// 2's at k = I) and their grids: a persistent form's is blocks per SM x SMs, a decode form's the
// routing's m-tile bound.
struct FormGrids {
  int grid1 = 0, grid2 = 0;
};

inline FormGrids configure_forms(Sm90Form gemm1, Sm90Form gemm2, int64_t H, int64_t I, int64_t max_tiles) {
  const Sm90FormKernels& k1 = sm90_form_kernels(gemm1);
  const Sm90FormKernels& k2 = sm90_form_kernels(gemm2);
  EXPECT_TRUE(k1.configure1 && k1.launch1) << sm90_form_name(gemm1);
  EXPECT_TRUE(k2.configure2 && k2.launch2) << sm90_form_name(gemm2) << " has no GEMM 2";
  EXPECT_EQ(sm90_form(gemm1).list_block_m, sm90_form(gemm2).list_block_m) << "the two forms walk one routing list";
  int sms = 0, per_sm1 = 0, per_sm2 = 0;
  MOE_EP_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  if (k1.configure1) MOE_EP_CUDA_CHECK(k1.configure1(static_cast<int>(H), &per_sm1));
  if (k2.configure2) MOE_EP_CUDA_CHECK(k2.configure2(static_cast<int>(I), &per_sm2));
  EXPECT_GE(per_sm1, 1) << sm90_form_name(gemm1);
  EXPECT_GE(per_sm2, 1) << sm90_form_name(gemm2);
  // Every block count works (persistent walk); this is the layer's choice.
  auto grid = [&](Sm90Form f, int per_sm) {
    return sm90_form(f).persistent ? sms * std::max(per_sm, 1) : static_cast<int>(max_tiles);
  };
  return {grid(gemm1, per_sm1), grid(gemm2, per_sm2)};
}

// Routing + GEMM 1 + GEMM 2 of one problem with one kernel choice; outputs NaN-poisoned at
// creation. gemm2(h) runs GEMM 2 on this run's h or on another run's (same routed rows).
class GemmRun {
 public:
  GemmRun(const Shape& s, const DeviceProblem& p, const DeviceWeights& w, const Kernels& k)
      : s_(s), p_(p), w_(w), k_(k) {
    EXPECT_EQ(sm90_form(k.gemm1).recipe, Recipe::kMxfp4) << k.name();
    EXPECT_EQ(sm90_form(k.gemm2).recipe, Recipe::kMxfp4) << k.name();
    r_ = route(s, p.T, p.ids, p.topk_weights, sm90_form(k.gemm1).list_block_m);
    const int64_t max_rows = std::max<int64_t>(p.T * s.K, 1);
    h_ = DeviceBuffer(max_rows * s.I);
    h_scale_ = DeviceBuffer(max_rows * s.I / 32);
    o_ = DeviceBuffer(max_rows * s.H * 2);
    if (sm90_form(k.gemm1).x_16bit) x_16bit_ = DeviceBuffer(std::max<int64_t>(p.T, 1) * s.H * 2);
    if (sm90_form(k.gemm2).h_16bit) h_16bit_ = DeviceBuffer(max_rows * s.I * 2);
    poison();
    const FormGrids g = configure_forms(k.gemm1, k.gemm2, s.H, s.I, r_.max_tiles);
    grid1_ = g.grid1;
    grid2_ = g.grid2;
  }

  void poison() {
    MOE_EP_CUDA_CHECK(cudaMemset(h_.get(), 0xFF, h_.bytes()));              // e4m3 NaN
    MOE_EP_CUDA_CHECK(cudaMemset(h_scale_.get(), 0xFF, h_scale_.bytes()));  // E8M0 NaN
    MOE_EP_CUDA_CHECK(cudaMemset(o_.get(), 0xFF, o_.bytes()));              // bf16 NaN
    for (DeviceBuffer* b : {&x_16bit_, &h_16bit_})
      if (b->bytes()) MOE_EP_CUDA_CHECK(cudaMemset(b->get(), 0xFF, b->bytes()));
  }

  void gemm1() {
    Gemm1Params g1;
    g1.schedule = r_.schedule();
    g1.op.n = static_cast<int32_t>(2 * s_.I);
    g1.op.k = static_cast<int32_t>(s_.H);
    g1.op.a = p_.a.get();
    g1.op.a_row_bytes = s_.H;
    g1.op.a_scale = p_.a_scale.get();
    g1.op.a_scale_row_bytes = s_.H / 32;
    g1.op.a_row_index = r_.row_token.get<int32_t>();
    g1.op.w = w_.w13.tiles.get();
    g1.op.w_scale = k_.folded ? w_.w13.shifts.get() : w_.w13.e8m0_scales.get();
    g1.op.w_col_scale = k_.folded ? w_.w13.col_scale.get<float>() : nullptr;
    g1.epilogue.row_weight = r_.row_weight.get<float>();
    g1.epilogue.clamp = 10.0f;
    g1.epilogue.intermediate = static_cast<int32_t>(s_.I);
    g1.epilogue.h_q = h_.get();
    g1.epilogue.h_scale = h_scale_.get();
    if (sm90_form(k_.gemm1).x_16bit) use_bf16_activations(g1.op, p_.a, p_.a_scale, p_.T, x_16bit_);
    MOE_EP_CUDA_CHECK(sm90_form_kernels(k_.gemm1).launch1(g1, grid1_, nullptr));
  }

  void gemm2(const GemmRun* input = nullptr) {
    const GemmRun& in = input ? *input : *this;
    Gemm2Params g2;
    g2.schedule = r_.schedule();
    g2.op.n = static_cast<int32_t>(s_.H);
    g2.op.k = static_cast<int32_t>(s_.I);
    g2.op.a = in.h_.get();
    g2.op.a_row_bytes = s_.I;
    g2.op.a_scale = in.h_scale_.get();
    g2.op.a_scale_row_bytes = s_.I / 32;
    g2.op.w = w_.w2.tiles.get();
    g2.op.w_scale = k_.folded ? w_.w2.shifts.get() : w_.w2.e8m0_scales.get();
    g2.op.w_col_scale = k_.folded ? w_.w2.col_scale.get<float>() : nullptr;
    g2.epilogue.out = o_.get<uint16_t>();
    if (sm90_form(k_.gemm2).h_16bit) use_bf16_activations(g2.op, in.h_, in.h_scale_, r_.rows, h_16bit_);
    MOE_EP_CUDA_CHECK(sm90_form_kernels(k_.gemm2).launch2(g2, grid2_, nullptr));
  }

  GemmOutputs outputs() const {
    MOE_EP_CUDA_CHECK(cudaDeviceSynchronize());
    MOE_EP_CUDA_CHECK(cudaGetLastError());
    EXPECT_EQ(download<uint32_t>(r_.flags, 1)[0], 0u);
    GemmOutputs out;
    out.h = download<uint8_t>(h_, r_.rows * s_.I);
    out.h_scale = download<uint8_t>(h_scale_, r_.rows * s_.I / 32);
    out.o = download<uint16_t>(o_, r_.rows * s_.H);
    return out;
  }

  int64_t rows() const { return r_.rows; }

  // Experts with at least one row: each streams its weights once per m tile.
  int64_t active_experts() const {
    const std::vector<int32_t> off = download<int32_t>(r_.offsets, s_.E + 1);
    int64_t n = 0;
    for (int64_t e = 0; e < s_.E; ++e) n += off[e + 1] > off[e];
    return n;
  }

 private:
  // `rows` Q8 rows of op.k values (q, scales) converted to bf16 in the register-operand order into
  // `out`, which becomes the GEMM's A.
  static void use_bf16_activations(GroupedGemmOperands& op, const DeviceBuffer& q, const DeviceBuffer& scales,
                                   int64_t rows, DeviceBuffer& out) {
    MOE_EP_CUDA_CHECK(launch_sm90_q8_to_rs_bf16(q.get(), scales.get(), rows, nullptr, op.k, out.get<uint16_t>(), nullptr));
    set_16bit_activations(op, out.get<uint16_t>());
  }

  const Shape& s_;
  const DeviceProblem& p_;
  const DeviceWeights& w_;
  Kernels k_;
  DeviceRouting r_;
  DeviceBuffer h_, h_scale_, o_;
  DeviceBuffer x_16bit_, h_16bit_;  // the bf16 activations of forms that read them
  int grid1_ = 0, grid2_ = 0;
};

// ||y - ref|| / ||ref|| in float64 over n values given by two accessors; NaN gives +inf.
template <class Y, class R>
double rel_err_of(size_t n, Y&& y, R&& ref) {
  double d2 = 0.0, r2 = 0.0;
  for (size_t i = 0; i < n; ++i) {
    const double a = y(i), b = ref(i);
    if (!std::isfinite(a) || !std::isfinite(b)) return INFINITY;
    d2 += (a - b) * (a - b);
    r2 += b * b;
  }
  return r2 > 0.0 ? std::sqrt(d2 / r2) : std::sqrt(d2);
}

// h dequantized: e4m3 * 2^(E8M0 - 127) (E8M0 0xFF = NaN).
inline double rel_err_h(const GemmOutputs& y, const GemmOutputs& ref) {
  if (y.h.size() != ref.h.size() || y.h_scale.size() != ref.h_scale.size()) return INFINITY;
  static const auto tables = [] {
    std::pair<std::vector<double>, std::vector<double>> t{std::vector<double>(256), std::vector<double>(256)};
    for (int i = 0; i < 256; ++i) {
      t.first[i] = e4m3_to_float(static_cast<uint8_t>(i));
      t.second[i] = i == 0xFF ? NAN : std::ldexp(1.0, i - 127);
    }
    return t;
  }();
  auto value = [&](const GemmOutputs& g) {
    return [&](size_t i) { return tables.first[g.h[i]] * tables.second[g.h_scale[i / 32]]; };
  };
  return rel_err_of(y.h.size(), value(y), value(ref));
}

inline double rel_err_o(const GemmOutputs& y, const GemmOutputs& ref) {
  if (y.o.size() != ref.o.size()) return INFINITY;
  auto value = [](const GemmOutputs& g) { return [&](size_t i) { return static_cast<double>(bf16_to_float(g.o[i])); }; };
  return rel_err_of(y.o.size(), value(y), value(ref));
}

template <class T>
double equal_share(const std::vector<T>& a, const std::vector<T>& b) {
  if (a.empty() || a.size() != b.size()) return a.size() == b.size() ? 1.0 : 0.0;
  int64_t same = 0;
  for (size_t i = 0; i < a.size(); ++i) same += a[i] == b[i];
  return static_cast<double>(same) / static_cast<double>(a.size());
}

struct RoutingCase {
  std::string name;
  int64_t T;
  double holes;
  int idle_expert = -1;        // its slots become -1
  int only_expert = -1;        // slot 0 of every token goes here, other slots -1
};

inline testing::HostInputs make_inputs(const Shape& s, const RoutingCase& c, uint64_t seed) {
  testing::HostInputs in = testing::make_inputs({c.T, s.H, s.E, s.K, c.holes, 1.0f, seed, 0});
  for (int64_t t = 0; t < c.T; ++t)
    for (int64_t k = 0; k < s.K; ++k) {
      int32_t& id = in.topk_ids[t * s.K + k];
      if (c.idle_expert >= 0 && id == c.idle_expert) id = -1;
      if (c.only_expert >= 0) id = k == 0 ? c.only_expert : -1;
    }
  return in;
}

// ---- nvfp4: the f16 wgmma kernels against the f16 mma.sync ones, kernel by kernel -------------
// Both compute exact f16 products (e2m1 * e4m3 of each operand) summed in fp32, in different
// orders: GEMM 1's fp32 h and GEMM 2's o on the same NVFP4 h agree to summation-order noise
// (an occasional one-ulp flip of a bf16-rounded gate or up), far below the layer's 3e-2, so a
// systematic error of a fraction of a percent in any block, scale or row shows.
struct Nvfp4DeviceWeights {
  DeviceBuffer w13, w13_scales, w13_global, w2, w2_scales, w2_global;
};

inline Nvfp4DeviceWeights make_nvfp4_device_weights(const Shape& s, uint64_t seed) {
  testing::WeightSpec spec;
  spec.hidden_size = s.H;
  spec.intermediate_size = s.I;
  spec.format = WeightFormat::kNVFP4;
  spec.seed = seed;
  spec.num_slots = s.E;
  const testing::HostWeights hw = testing::make_weights(spec);
  auto pool = shared_thread_pool(resolve_num_threads(0));
  const ParallelFor parallel = parallel_for_of(*pool);
  const HostExpertWeights canonical = prepare_host_weights(Recipe::kNvfp4, hw.pack(), {s.E, s.H, s.I}, parallel);
  const KernelWeights kw = make_kernel_weights(canonical, parallel, Fp8Fold::kNever);
  return {DeviceBuffer::upload(kw.w13.tiles), DeviceBuffer::upload(kw.w13.scales), DeviceBuffer::upload(kw.w13_global),
          DeviceBuffer::upload(kw.w2.tiles),  DeviceBuffer::upload(kw.w2.scales),  DeviceBuffer::upload(kw.w2_global)};
}

// x quantized per token as the layer does (NVFP4 rows with their encode factors), ids, weights.
struct Nvfp4DeviceProblem {
  int64_t T = 0;
  DeviceBuffer a, a_scale, a_global, ids, topk_weights;
};

inline Nvfp4DeviceProblem make_nvfp4_problem(const Shape& s, const testing::HostInputs& in) {
  std::vector<float> x(in.num_tokens * s.H);
  for (size_t i = 0; i < x.size(); ++i) x[i] = bf16_to_float(in.x[i]);
  std::vector<uint8_t> packed(x.size() / 2), scales(x.size() / 16);
  std::vector<float> global(in.num_tokens);
  quantize_nvfp4_rows(x.data(), in.num_tokens, s.H, packed.data(), scales.data(), global.data());
  return {in.num_tokens, DeviceBuffer::upload(packed), DeviceBuffer::upload(scales), DeviceBuffer::upload(global),
          DeviceBuffer::upload(in.topk_ids), DeviceBuffer::upload(in.topk_weights)};
}

// The nvfp4 GEMMs of one problem with one form for both GEMMs (nvfp4.mma, .rs-f16 128x128 or
// 64x256 with the activations converted to f16 first, .decode, .decode-split); outputs
// NaN-poisoned at creation.
class Nvfp4GemmRun {
 public:
  Nvfp4GemmRun(const Shape& s, const Nvfp4DeviceProblem& p, const Nvfp4DeviceWeights& w, Sm90Form form)
      : s_(s), p_(p), w_(w), form_(form) {
    EXPECT_EQ(sm90_form(form).recipe, Recipe::kNvfp4) << sm90_form_name(form);
    r_ = route(s, p.T, p.ids, p.topk_weights, sm90_form(form).list_block_m);
    const int64_t rows = std::max<int64_t>(p.T * s.K, 1);
    h_f32_ = DeviceBuffer(rows * s.I * 4);
    h_ = DeviceBuffer(rows * s.I / 2);
    h_scale_ = DeviceBuffer(rows * s.I / 16);
    h_global_ = DeviceBuffer(rows * 4);
    o_ = DeviceBuffer(rows * s.H * 2);
    x16_ = DeviceBuffer(std::max<int64_t>(p.T, 1) * s.H * 2);
    h16_ = DeviceBuffer(rows * s.I * 2);
    for (DeviceBuffer* b : {&h_f32_, &o_, &x16_, &h16_}) MOE_EP_CUDA_CHECK(cudaMemset(b->get(), 0xFF, b->bytes()));  // NaN
    const FormGrids g = configure_forms(form, form, s.H, s.I, r_.max_tiles);
    grid1_ = g.grid1;
    grid2_ = g.grid2;
  }

  void gemm1() {
    Gemm1Params g;
    g.schedule = r_.schedule();
    g.op.n = static_cast<int32_t>(2 * s_.I);
    g.op.k = static_cast<int32_t>(s_.H);
    g.op.a = p_.a.get();
    g.op.a_row_bytes = s_.H / 2;
    g.op.a_scale = p_.a_scale.get();
    g.op.a_scale_row_bytes = s_.H / 16;
    g.op.a_global = p_.a_global.get<float>();
    g.op.a_row_index = r_.row_token.get<int32_t>();
    g.op.w = w_.w13.get();
    g.op.w_scale = w_.w13_scales.get();
    g.op.w_global = w_.w13_global.get<float>();
    g.epilogue.row_weight = r_.row_weight.get<float>();
    g.epilogue.clamp = 10.0f;
    g.epilogue.intermediate = static_cast<int32_t>(s_.I);
    g.epilogue.h_f32 = h_f32_.get<float>();
    if (sm90_form(form_).x_16bit) {
      MOE_EP_CUDA_CHECK(launch_sm90_nvfp4_to_rs_f16(p_.a.get(), p_.a_scale.get(), p_.T, nullptr, g.op.k,
                                                    x16_.get<uint16_t>(), nullptr));
      set_16bit_activations(g.op, x16_.get<uint16_t>());
    }
    MOE_EP_CUDA_CHECK(sm90_form_kernels(form_).launch1(g, grid1_, nullptr));
    Nvfp4QuantizeParams q;  // h's NVFP4 rows, as the layer's pass writes them
    q.in = h_f32_.get();
    q.cols = s_.I;
    q.max_rows = static_cast<int32_t>(std::max<int64_t>(p_.T * s_.K, 1));
    q.num_rows = r_.offsets.get<int32_t>() + s_.E;
    q.packed = h_.get();
    q.scales = h_scale_.get();
    q.global = h_global_.get<float>();
    MOE_EP_CUDA_CHECK(launch_sm90_nvfp4_quantize(q, nullptr));
  }

  // GEMM 2 on the NVFP4 h of `in` (the same routed rows: the routing's row order does not depend
  // on the m tile).
  void gemm2(const Nvfp4GemmRun& in) {
    Gemm2Params g;
    g.schedule = r_.schedule();
    g.op.n = static_cast<int32_t>(s_.H);
    g.op.k = static_cast<int32_t>(s_.I);
    g.op.a = in.h_.get();
    g.op.a_row_bytes = s_.I / 2;
    g.op.a_scale = in.h_scale_.get();
    g.op.a_scale_row_bytes = s_.I / 16;
    g.op.a_global = in.h_global_.get<float>();
    g.op.w = w_.w2.get();
    g.op.w_scale = w_.w2_scales.get();
    g.op.w_global = w_.w2_global.get<float>();
    g.epilogue.out = o_.get<uint16_t>();
    if (sm90_form(form_).h_16bit) {
      MOE_EP_CUDA_CHECK(launch_sm90_nvfp4_to_rs_f16(in.h_.get(), in.h_scale_.get(), p_.T * s_.K,
                                                    r_.offsets.get<int32_t>() + s_.E, g.op.k, h16_.get<uint16_t>(),
                                                    nullptr));
      set_16bit_activations(g.op, h16_.get<uint16_t>());
    }
    MOE_EP_CUDA_CHECK(sm90_form_kernels(form_).launch2(g, grid2_, nullptr));
  }

  std::vector<float> h() const { return sync_download<float>(h_f32_, r_.rows * s_.I); }
  std::vector<uint16_t> o() const { return sync_download<uint16_t>(o_, r_.rows * s_.H); }
  std::vector<int32_t> row_token() const { return sync_download<int32_t>(r_.row_token, r_.rows); }
  int64_t active_experts() const {
    const std::vector<int32_t> off = sync_download<int32_t>(r_.offsets, s_.E + 1);
    int64_t n = 0;
    for (int64_t e = 0; e < s_.E; ++e) n += off[e + 1] > off[e];
    return n;
  }

 private:
  template <class T>
  static std::vector<T> sync_download(const DeviceBuffer& b, int64_t n) {
    MOE_EP_CUDA_CHECK(cudaDeviceSynchronize());
    MOE_EP_CUDA_CHECK(cudaGetLastError());
    return download<T>(b, static_cast<size_t>(n));
  }

  const Shape& s_;
  const Nvfp4DeviceProblem& p_;
  const Nvfp4DeviceWeights& w_;
  Sm90Form form_;
  DeviceRouting r_;
  DeviceBuffer h_f32_, h_, h_scale_, h_global_, o_, x16_, h16_;
  int grid1_ = 0, grid2_ = 0;
};

// ---- full deepseek-v4-flash size on random bytes, timed ------------------------------------------
// Weights and activations are random bytes (every FP4 nibble is a valid code; e4m3 NaN codes are
// replaced); both scale forms describe the same weights: E8M0 = base + d with d in 0..3, shift d,
// column factor 2^(base - 119). The GEMM results need no host reference: wgmma is checked against
// mma.sync, and the kernels are timed with events (median of 10 after 2 warm-ups).
inline void fill_random(std::vector<uint8_t>& v, uint64_t seed) {
  const int threads = resolve_num_threads(0);
  std::vector<std::thread> pool;
  const size_t chunk = (v.size() / threads + 7) / 8 * 8;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      uint64_t x = seed * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(t) * 0xD1B54A32D192ED03ull + 1;
      const size_t end = std::min(v.size(), (t + 1) * chunk);
      for (size_t i = t * chunk; i < end; ++i) {
        if ((i & 7) == 0) {
          x ^= x << 13;
          x ^= x >> 7;
          x ^= x << 17;
        }
        v[i] = static_cast<uint8_t>(x >> (8 * (i & 7)));
      }
    });
  for (auto& th : pool) th.join();
}

inline DeviceGemmWeights random_gemm_weights(int64_t E, int64_t N, int64_t K, uint64_t seed) {
  std::vector<uint8_t> tiles(E * N * K / 2);
  fill_random(tiles, seed);
  std::mt19937_64 rng(seed);
  const int64_t steps = K / 128;
  std::vector<uint8_t> e8m0(E * steps * N * 4), shifts(e8m0.size());
  std::vector<float> col(E * N);
  std::vector<uint8_t> base(E * N);
  for (int64_t i = 0; i < E * N; ++i) {
    base[i] = static_cast<uint8_t>(116 + rng() % 7);
    col[i] = std::ldexp(1.0f, base[i] - 119);
  }
  for (int64_t e = 0; e < E; ++e)
    for (int64_t st = 0; st < steps; ++st)
      for (int64_t n = 0; n < N; ++n)
        for (int j = 0; j < 4; ++j) {
          const size_t i = static_cast<size_t>(((e * steps + st) * N + n) * 4 + j);
          shifts[i] = static_cast<uint8_t>(rng() % 4);
          e8m0[i] = static_cast<uint8_t>(base[e * N + n] + shifts[i]);
        }
  DeviceGemmWeights d;
  d.tiles = DeviceBuffer::upload(tiles);
  d.e8m0_scales = DeviceBuffer::upload(e8m0);
  d.shifts = DeviceBuffer::upload(shifts);
  d.col_scale = DeviceBuffer::upload(col);
  return d;
}

inline DeviceProblem random_problem(const Shape& s, int64_t T, uint64_t seed) {
  const testing::HostInputs in = testing::make_inputs({T, s.H, s.E, s.K, 0.0, 1.0f, seed, 0});
  std::vector<uint8_t> a(T * s.H), sc(T * s.H / 32);
  fill_random(a, seed + 1);
  for (uint8_t& b : a)
    if ((b & 0x7F) == 0x7F) b ^= 1;  // NaN -> +-448
  std::mt19937_64 rng(seed);
  for (uint8_t& b : sc) b = static_cast<uint8_t>(118 + rng() % 7);
  DeviceProblem p;
  p.T = T;
  p.a = DeviceBuffer::upload(a);
  p.a_scale = DeviceBuffer::upload(sc);
  p.ids = DeviceBuffer::upload(in.topk_ids);
  p.topk_weights = DeviceBuffer::upload(in.topk_weights);
  return p;
}

// MOE_EP_WGMMA_TIMING_ITERS = 1 runs each kernel once (for ncu). before(): untimed, ahead of
// each run (e.g. an L2 flush).
template <class F, class B = void (*)()>
double median_us(F&& f, B&& before = [] {}) {
  const char* env = std::getenv("MOE_EP_WGMMA_TIMING_ITERS");
  const int iters = env ? std::max(1, std::atoi(env)) : 10, warmup = env ? 0 : 2;
  cudaEvent_t a, b;
  MOE_EP_CUDA_CHECK(cudaEventCreate(&a));
  MOE_EP_CUDA_CHECK(cudaEventCreate(&b));
  for (int i = 0; i < warmup; ++i) f();
  std::vector<double> t;
  for (int i = 0; i < iters; ++i) {
    before();
    MOE_EP_CUDA_CHECK(cudaEventRecord(a));
    f();
    MOE_EP_CUDA_CHECK(cudaEventRecord(b));
    MOE_EP_CUDA_CHECK(cudaEventSynchronize(b));
    float ms = 0.0f;
    MOE_EP_CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
    t.push_back(ms * 1e3);
  }
  MOE_EP_CUDA_CHECK(cudaEventDestroy(a));
  MOE_EP_CUDA_CHECK(cudaEventDestroy(b));
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

// nvfp4 at the flash size from random bytes: every nibble is a valid e2m1 code; block scales
// e4m3 in [2^-3, 2^3) (no NaN), global factors 1.
inline Nvfp4DeviceWeights random_nvfp4_weights(const Shape& s) {
  auto gemm = [&](int64_t N, int64_t K, uint64_t seed, DeviceBuffer& tiles, DeviceBuffer& scales, DeviceBuffer& global) {
    std::vector<uint8_t> t(s.E * N * K / 2), sc(s.E * N * K / 16);
    fill_random(t, seed);
    std::mt19937_64 rng(seed);
    for (uint8_t& b : sc) b = static_cast<uint8_t>(0x20 + rng() % 0x30);  // exponents 4 .. 9 of e4m3
    tiles = DeviceBuffer::upload(t);
    scales = DeviceBuffer::upload(sc);
    global = DeviceBuffer::upload(std::vector<float>(s.E, 1.0f));
  };
  Nvfp4DeviceWeights w;
  gemm(2 * s.I, s.H, 5, w.w13, w.w13_scales, w.w13_global);
  gemm(s.H, s.I, 6, w.w2, w.w2_scales, w.w2_global);
  return w;
}

inline Nvfp4DeviceProblem random_nvfp4_problem(const Shape& s, int64_t T, uint64_t seed) {
  const testing::HostInputs in = testing::make_inputs({T, s.H, s.E, s.K, 0.0, 1.0f, seed, 0});
  std::vector<uint8_t> a(T * s.H / 2), sc(T * s.H / 16);
  fill_random(a, seed + 1);
  std::mt19937_64 rng(seed);
  for (uint8_t& b : sc) b = static_cast<uint8_t>(0x20 + rng() % 0x30);
  return {T, DeviceBuffer::upload(a), DeviceBuffer::upload(sc), DeviceBuffer::upload(std::vector<float>(T, 1.0f)),
          DeviceBuffer::upload(in.topk_ids), DeviceBuffer::upload(in.topk_weights)};
}

// The timing tests are opt-in: they stream the flash size's 3.2 GB of weights many times.
#define MOE_EP_REQUIRE_WGMMA_TIMING()                                                                     \
  do {                                                                                                   \
    MOE_EP_REQUIRE_CUDA();                                                                               \
    if (!std::getenv("MOE_EP_WGMMA_TIMING"))                                                             \
      GTEST_SKIP() << "set MOE_EP_WGMMA_TIMING=1 to run (deepseek-v4-flash size: 3.2 GB of weights, timed)"; \
  } while (0)

inline const Shape kFlashShape{"flash", 256, 4096, 2048, 6};

// Whether a timed variant runs: MOE_EP_WGMMA_TIMING_VARIANTS, a '|'-separated list of substrings
// of Kernels::name() (unset: every variant).
inline bool timing_variant_selected(const std::string& name) {
  const char* v = std::getenv("MOE_EP_WGMMA_TIMING_VARIANTS");
  if (!v || !*v) return true;
  const std::string list = v;
  for (size_t b = 0; b <= list.size();) {
    const size_t e = std::min(list.find('|', b), list.size());
    if (e > b && name.find(list.substr(b, e - b)) != std::string::npos) return true;
    b = e + 1;
  }
  return false;
}

// The token counts of a timing test: MOE_EP_WGMMA_TIMING_TOKENS ("2048,8192") or `defaults`.
inline std::vector<int64_t> timing_tokens(std::vector<int64_t> defaults) {
  const char* v = std::getenv("MOE_EP_WGMMA_TIMING_TOKENS");
  if (!v) return defaults;
  std::vector<int64_t> tokens;
  for (const char* c = v; *c;) {
    tokens.push_back(std::strtoll(c, const_cast<char**>(&c), 10));
    if (*c == ',') ++c;
  }
  return tokens;
}

inline DeviceWeights random_device_weights(const Shape& s) {
  DeviceWeights w;
  w.w13 = random_gemm_weights(s.E, 2 * s.I, s.H, 3);
  w.w2 = random_gemm_weights(s.E, s.H, s.I, 4);
  return w;
}

}  // namespace moe_ep::cuda::gemmtest
