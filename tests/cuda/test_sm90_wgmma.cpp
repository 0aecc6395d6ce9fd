// The wgmma grouped GEMMs (folded mxfp4 weights, sm90_mxfp4_wgmma_mainloop.cuh) on the device.
//
// Kernel level: routing + GEMM 1 + GEMM 2 run twice on the same routed rows, once with the
// mma.sync kernels on unfolded weights (E8M0 block scales) and once with the wgmma kernels on
// folded weights (shifts + column factors), for both tile shapes, on the tiny shape and the
// deepseek-v4-flash shape (fewer experts), at T = 1, 7, 300 and more, with -1 holes, an idle
// expert and one expert taking every row; outputs NaN-poisoned before each run. Both sides
// compute the same exact k32 products in fp32, so h (dequantized) and o agree to the
// same-recipe threshold; the share of bitwise-equal bytes is printed. GEMM 2 is compared on the
// same h (isolating it) and along the whole chain. Then 20 reruns must be bitwise identical.
// The bf16 wgmma with the weights in registers (rs, sm90_rs16_mainloop.cuh) runs as one
// more variant: its activations converted from the same Q8 to bf16 first, its products exact and
// summed over all of K, so it meets the same threshold. So do the FP8 wgmma kernels with the
// weights in registers (rs fp8, sm90_mxfp4_rs_fp8_mainloop.cuh), on m tiles of 64 and 96 tokens:
// the FP8 wgmma products and promotion on the transposed tile.
//
// Layer level: the layer forced onto the wgmma kernels (KernelOverrides::gemm = wgmma) against the CPU
// layer on the tiny preset and deepseek-v4-flash (T = 1, 7, 300, 4096, a subset of rows for the
// large ones), structured routings, and 20 bitwise reruns.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <optional>
#include <map>
#include <memory>
#include <random>
#include <thread>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "core/weight_prep.h"
#include "core/thread_pool.h"
#include "cuda/device_buffer.h"
#include "cuda/errors.h"
#include "cuda/kernels/sm90_grouped_gemm.h"
#include "cuda/kernels/sm90_nvfp4_quantize.h"
#include "cuda/kernels/sm90_permute.h"
#include "cuda/plan.h"
#include "cuda/sm90_config.h"
#include "cuda/tile/fp4_codec.h"
#include "cuda/weight_layout.h"
#include "cuda_test_util.h"
#include "rs_fp8_variant_probe.h"
#include "moe_ep/backend.h"
#include "moe_ep/formats.h"
#include "moe_ep/quant.h"
#include "testing/presets.h"
#include "testing/synthetic.h"

namespace moe_ep::cuda {
namespace {

template <class T>
std::vector<T> download(const DeviceBuffer& b, size_t n) {
  std::vector<T> out(n);
  if (n) MOE_EP_CUDA_CHECK(cudaMemcpy(out.data(), b.get(), n * sizeof(T), cudaMemcpyDeviceToHost));
  return out;
}

const char* tile_name(WgmmaTile t) { return t == WgmmaTile::k64x256 ? "64x256" : "128x128"; }

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

DeviceGemmWeights upload_gemm(const KernelWeightTensor& plain, const KernelWeightTensor& folded) {
  EXPECT_TRUE(folded.folded) << "the synthetic weights must lie inside the FP8 window";
  EXPECT_EQ(plain.tiles, folded.tiles);
  DeviceGemmWeights d;
  d.tiles = DeviceBuffer::upload(plain.tiles);
  d.e8m0_scales = DeviceBuffer::upload(plain.scales);
  d.shifts = DeviceBuffer::upload(folded.scales);
  d.col_scale = DeviceBuffer::upload(folded.row_factors());
  return d;
}

DeviceWeights make_device_weights(const Shape& s, uint64_t seed) {
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
const DeviceWeights& cached_device_weights(const Shape& s, uint64_t seed) {
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

DeviceProblem make_problem(const Shape& s, const testing::HostInputs& in) {
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
            offsets.get<int32_t>()};
  }
};

// Routes T tokens' ids / weights (device) into m tiles of block_m rows.
DeviceRouting route(const Shape& s, int64_t T, const DeviceBuffer& ids, const DeviceBuffer& topk_weights, int block_m) {
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

constexpr int kRsFp8All = 7;  // RsFp8Work: activation copies 1, weight copies 2, math 4

std::string work_name(int work) {
  static const char* const kNames[8] = {"sync+epilogue only", "copy-a only",      "copy-w only",      "copies only",
                                        "math only",          "copy-a+math only", "copy-w+math only", "all"};
  return kNames[work & 7];
}

// Kernel choice of one run: mma.sync (plain weights), wgmma with a tile, the bf16 wgmma with
// the weights in registers (rs; activations converted to bf16 first), or the FP8 wgmma with the
// weights in registers on m tiles of rs_fp8_block_m rows; all but the first fold.
struct Kernels {
  std::optional<WgmmaTile> wgmma;
  WgmmaDecode decode = WgmmaDecode::kQuad;
  bool rs = false;
  int rs_fp8_block_m = 0;  // > 0: rs fp8
  // rs fp8 variants the library does not launch (rs_fp8_variant_probe.h): weights by bulk copies
  // or into registers, parts of the mainloop's work left out (timing only: the outputs are not
  // the GEMM's).
  test::RsFp8WeightPath rs_fp8_weights = test::RsFp8WeightPath::kCpAsync;
  int rs_fp8_work = kRsFp8All;
  int decode_prefetch = 0;  // > 0: the mxfp4 decode kernels (folded) with 2 or kDecodeDeepPrefetch k steps in flight
  bool folded() const { return wgmma || rs || rs_fp8_block_m > 0 || decode_prefetch > 0; }
  bool rs_fp8_probe() const {
    return rs_fp8_block_m > 0 && (rs_fp8_weights != test::RsFp8WeightPath::kCpAsync || rs_fp8_work != kRsFp8All);
  }
  test::RsFp8Variant rs_fp8_variant() const { return {rs_fp8_block_m, rs_fp8_weights, rs_fp8_work}; }
  std::string name() const {
    if (decode_prefetch > 0) return fmt::format("decode, {} steps ahead", decode_prefetch);
    if (rs) return "rs bf16";
    if (rs_fp8_block_m > 0)
      return fmt::format("rs fp8 {}{}{}{}", rs_fp8_block_m,
                         rs_fp8_weights == test::RsFp8WeightPath::kBulk        ? " bulk"
                         : rs_fp8_weights == test::RsFp8WeightPath::kRegisters ? " registers"
                                                                               : "",
                         rs_fp8_work == kRsFp8All ? "" : " ", rs_fp8_work == kRsFp8All ? "" : work_name(rs_fp8_work));
    if (!wgmma) return "mma.sync";
    return fmt::format("{} {}", tile_name(*wgmma), decode == WgmmaDecode::kQuad ? "quad" : "lane");
  }
};

// The wgmma variants every comparison runs.
const std::vector<Kernels>& wgmma_variants() {
  static const std::vector<Kernels> v = {{WgmmaTile::k64x256, WgmmaDecode::kQuad},
                                         {WgmmaTile::k128x128, WgmmaDecode::kQuad},
                                         {WgmmaTile::k64x256, WgmmaDecode::kLane},
                                         {WgmmaTile::k128x128, WgmmaDecode::kLane},
                                         {std::nullopt, WgmmaDecode::kQuad, true},
                                         {std::nullopt, WgmmaDecode::kQuad, false, 64},
                                         {std::nullopt, WgmmaDecode::kQuad, false, 96},
                                         {std::nullopt, WgmmaDecode::kQuad, false, 64, test::RsFp8WeightPath::kBulk},
                                         {std::nullopt, WgmmaDecode::kQuad, false, 96, test::RsFp8WeightPath::kBulk},
                                         {std::nullopt, WgmmaDecode::kQuad, false, 64, test::RsFp8WeightPath::kRegisters}};
  return v;
}

// Routing + GEMM 1 + GEMM 2 of one problem with one kernel choice; outputs NaN-poisoned at
// creation. gemm2(h) runs GEMM 2 on this run's h or on another run's (same routed rows).
class GemmRun {
 public:
  GemmRun(const Shape& s, const DeviceProblem& p, const DeviceWeights& w, const Kernels& k)
      : s_(s), p_(p), w_(w), k_(k) {
    const int block_m = k.decode_prefetch > 0 ? kDecodeBlockM
                        : k.rs                ? kRsBlockM
                        : k.rs_fp8_block_m > 0 ? k.rs_fp8_block_m
                        : k.wgmma             ? wgmma_tile_shape(*k.wgmma).block_m
                                              : kGemmBlockM;
    r_ = route(s, p.T, p.ids, p.topk_weights, block_m);
    const int64_t max_rows = std::max<int64_t>(p.T * s.K, 1);
    h_ = DeviceBuffer(max_rows * s.I);
    h_scale_ = DeviceBuffer(max_rows * s.I / 32);
    o_ = DeviceBuffer(max_rows * s.H * 2);
    if (k.rs) {
      x_rs_ = DeviceBuffer(std::max<int64_t>(p.T, 1) * s.H * 2);
      h_rs_ = DeviceBuffer(max_rows * s.I * 2);
    }
    poison();
    int sms = 0, per_sm1 = 0, per_sm2 = 0;
    MOE_EP_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    if (k.decode_prefetch > 0) {
      const bool deep = k.decode_prefetch == kDecodeDeepPrefetch;
      MOE_EP_CUDA_CHECK((deep ? configure_sm90_mxfp4_decode_deep_gemm1 : configure_sm90_mxfp4_decode_gemm1)(
          static_cast<int>(s.H), &per_sm1));
      MOE_EP_CUDA_CHECK((deep ? configure_sm90_mxfp4_decode_deep_gemm2 : configure_sm90_mxfp4_decode_gemm2)(
          static_cast<int>(s.I), &per_sm2));
    } else if (k.rs) {
      MOE_EP_CUDA_CHECK(configure_sm90_mxfp4_rs_grouped_gemm1(&per_sm1));
      MOE_EP_CUDA_CHECK(configure_sm90_mxfp4_rs_grouped_gemm2(&per_sm2));
    } else if (k.rs_fp8_probe()) {
      MOE_EP_CUDA_CHECK(test::configure_rs_fp8_variant(k.rs_fp8_variant(), &per_sm1, &per_sm2));
    } else if (k.rs_fp8_block_m > 0) {
      MOE_EP_CUDA_CHECK(configure_sm90_mxfp4_rs_fp8_grouped_gemm1(k.rs_fp8_block_m, &per_sm1));
      MOE_EP_CUDA_CHECK(configure_sm90_mxfp4_rs_fp8_grouped_gemm2(k.rs_fp8_block_m, &per_sm2));
    } else if (k.wgmma) {
      MOE_EP_CUDA_CHECK(configure_sm90_mxfp4_wgmma_grouped_gemm1(*k.wgmma, &per_sm1, k.decode));
      MOE_EP_CUDA_CHECK(configure_sm90_mxfp4_wgmma_grouped_gemm2(*k.wgmma, &per_sm2, k.decode));
    } else {
      MOE_EP_CUDA_CHECK(configure_sm90_mxfp4_grouped_gemm1(&per_sm1));
      MOE_EP_CUDA_CHECK(configure_sm90_mxfp4_grouped_gemm2(&per_sm2));
    }
    EXPECT_GE(per_sm1, 1);
    EXPECT_GE(per_sm2, 1);
    // Every block count works (persistent walk); this is the layer's choice.
    grid1_ = sms * std::max(per_sm1, 1);
    grid2_ = sms * std::max(per_sm2, 1);
  }

  void poison() {
    MOE_EP_CUDA_CHECK(cudaMemset(h_.get(), 0xFF, h_.bytes()));              // e4m3 NaN
    MOE_EP_CUDA_CHECK(cudaMemset(h_scale_.get(), 0xFF, h_scale_.bytes()));  // E8M0 NaN
    MOE_EP_CUDA_CHECK(cudaMemset(o_.get(), 0xFF, o_.bytes()));              // bf16 NaN
    for (DeviceBuffer* b : {&x_rs_, &h_rs_})
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
    g1.op.w_scale = k_.folded() ? w_.w13.shifts.get() : w_.w13.e8m0_scales.get();
    g1.op.w_col_scale = k_.folded() ? w_.w13.col_scale.get<float>() : nullptr;
    g1.epilogue.row_weight = r_.row_weight.get<float>();
    g1.epilogue.clamp = 10.0f;
    g1.epilogue.intermediate = static_cast<int32_t>(s_.I);
    g1.epilogue.h_q = h_.get();
    g1.epilogue.h_scale = h_scale_.get();
    if (k_.decode_prefetch > 0) {
      const bool deep = k_.decode_prefetch == kDecodeDeepPrefetch;
      MOE_EP_CUDA_CHECK((deep ? launch_sm90_mxfp4_decode_deep_gemm1 : launch_sm90_mxfp4_decode_gemm1)(
          g1, static_cast<int>(r_.max_tiles), nullptr));
    } else if (k_.rs) {
      use_bf16_activations(g1.op, p_.a, p_.a_scale, p_.T, x_rs_);
      MOE_EP_CUDA_CHECK(launch_sm90_mxfp4_rs_grouped_gemm1(g1, grid1_, nullptr));
    } else if (k_.rs_fp8_probe()) {
      MOE_EP_CUDA_CHECK(test::launch_rs_fp8_variant_gemm1(k_.rs_fp8_variant(), g1, grid1_, nullptr));
    } else if (k_.rs_fp8_block_m > 0) {
      MOE_EP_CUDA_CHECK(launch_sm90_mxfp4_rs_fp8_grouped_gemm1(k_.rs_fp8_block_m, g1, grid1_, nullptr));
    } else if (k_.wgmma)
      MOE_EP_CUDA_CHECK(launch_sm90_mxfp4_wgmma_grouped_gemm1(*k_.wgmma, g1, grid1_, nullptr, k_.decode));
    else
      MOE_EP_CUDA_CHECK(launch_sm90_mxfp4_grouped_gemm1(g1, grid1_, nullptr));
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
    g2.op.w_scale = k_.folded() ? w_.w2.shifts.get() : w_.w2.e8m0_scales.get();
    g2.op.w_col_scale = k_.folded() ? w_.w2.col_scale.get<float>() : nullptr;
    g2.epilogue.out = o_.get<uint16_t>();
    if (k_.decode_prefetch > 0) {
      const bool deep = k_.decode_prefetch == kDecodeDeepPrefetch;
      MOE_EP_CUDA_CHECK((deep ? launch_sm90_mxfp4_decode_deep_gemm2 : launch_sm90_mxfp4_decode_gemm2)(
          g2, static_cast<int>(r_.max_tiles), nullptr));
    } else if (k_.rs) {
      use_bf16_activations(g2.op, in.h_, in.h_scale_, r_.rows, h_rs_);
      MOE_EP_CUDA_CHECK(launch_sm90_mxfp4_rs_grouped_gemm2(g2, grid2_, nullptr));
    } else if (k_.rs_fp8_probe()) {
      MOE_EP_CUDA_CHECK(test::launch_rs_fp8_variant_gemm2(k_.rs_fp8_variant(), g2, grid2_, nullptr));
    } else if (k_.rs_fp8_block_m > 0) {
      MOE_EP_CUDA_CHECK(launch_sm90_mxfp4_rs_fp8_grouped_gemm2(k_.rs_fp8_block_m, g2, grid2_, nullptr));
    } else if (k_.wgmma)
      MOE_EP_CUDA_CHECK(launch_sm90_mxfp4_wgmma_grouped_gemm2(*k_.wgmma, g2, grid2_, nullptr, k_.decode));
    else
      MOE_EP_CUDA_CHECK(launch_sm90_mxfp4_grouped_gemm2(g2, grid2_, nullptr));
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
  // rs: `rows` Q8 rows of op.k values (q, scales) converted to bf16 in the rs order into `out`,
  // which becomes the GEMM's A.
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
  DeviceBuffer x_rs_, h_rs_;  // rs: the bf16 activations of GEMM 1 and GEMM 2
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
double rel_err_h(const GemmOutputs& y, const GemmOutputs& ref) {
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

double rel_err_o(const GemmOutputs& y, const GemmOutputs& ref) {
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

testing::HostInputs make_inputs(const Shape& s, const RoutingCase& c, uint64_t seed) {
  testing::HostInputs in = testing::make_inputs({c.T, s.H, s.E, s.K, c.holes, 1.0f, seed, 0});
  for (int64_t t = 0; t < c.T; ++t)
    for (int64_t k = 0; k < s.K; ++k) {
      int32_t& id = in.topk_ids[t * s.K + k];
      if (c.idle_expert >= 0 && id == c.idle_expert) id = -1;
      if (c.only_expert >= 0) id = k == 0 ? c.only_expert : -1;
    }
  return in;
}

void compare_kernels(const Shape& s, const std::vector<RoutingCase>& cases, uint64_t seed) {
  const DeviceWeights& w = cached_device_weights(s, seed);
  const double tol = cudatest::wgmma_recipe_tolerance();
  for (const RoutingCase& c : cases) {
    const DeviceProblem p = make_problem(s, make_inputs(s, c, seed + static_cast<uint64_t>(c.T)));
    GemmRun mma(s, p, w, Kernels{});
    mma.gemm1();
    mma.gemm2();
    const GemmOutputs ref = mma.outputs();
    std::map<int, GemmOutputs> rs_fp8_chain;  // block_m -> the cp.async rs fp8 kernel's outputs
    for (const Kernels& k : wgmma_variants()) {
      SCOPED_TRACE(fmt::format("{} {} T={} {}", s.name, c.name, c.T, k.name()));
      GemmRun run(s, p, w, k);
      run.gemm1();
      run.gemm2(&mma);  // GEMM 2 alone, on the mma.sync h
      const GemmOutputs same_h = run.outputs();
      run.poison();
      run.gemm1();
      run.gemm2();
      const GemmOutputs chain = run.outputs();
      const double err_h = rel_err_h(same_h, ref);
      const double err_o2 = rel_err_o(same_h, ref);
      const double err_chain = rel_err_o(chain, ref);
      EXPECT_LE(err_h, tol) << "GEMM 1 h";
      EXPECT_LE(err_o2, tol) << "GEMM 2 on the same h";
      EXPECT_LE(err_chain, tol) << "GEMM 1 + GEMM 2";
      EXPECT_EQ(chain.h.size(), ref.h.size());
      // Every weight path gives the rs fp8 kernel the same words, so the same products and sums.
      if (k.rs_fp8_block_m > 0 && k.rs_fp8_weights == test::RsFp8WeightPath::kCpAsync)
        rs_fp8_chain[k.rs_fp8_block_m] = chain;
      else if (k.rs_fp8_block_m > 0) {
        const GemmOutputs& plain = rs_fp8_chain.at(k.rs_fp8_block_m);
        EXPECT_TRUE(chain.h == plain.h && chain.h_scale == plain.h_scale && chain.o == plain.o)
            << "the weight path changed the outputs";
      }
      fmt::print("[ wgmma   ] {:<10} {:<22} T={:<5} {:<12} rows={:<6} h err={:.2e} (bytes equal {:.4f}, scales "
                 "{:.4f})  o err={:.2e} (equal {:.4f})  chain err={:.2e}\n",
                 s.name, c.name, c.T, k.name(), ref.h.size() / s.I, err_h, equal_share(same_h.h, ref.h),
                 equal_share(same_h.h_scale, ref.h_scale), err_o2, equal_share(same_h.o, ref.o), err_chain);
    }
  }
}

// The selected config (cuda/sm90_config.h) is host arithmetic: which kernels run for which T.
MoeDesc flash_desc(Recipe recipe = Recipe::kMxfp4) {
  MoeDesc d;
  d.fleet = {256, 8192, 4096};
  d.recipe = recipe;
  d.intermediate_size = 2048;
  d.top_k = 6;
  d.activation_clamp = 10.0f;
  return d;
}

Sm90Facts all_available() {
  Sm90Facts f;
  f.sm_count = 132;
  f.w13_folded = f.w2_folded = true;
  f.decode_blocks_per_sm[0] = f.decode_blocks_per_sm[1] = 2;
  f.mma_blocks_per_sm[0] = f.mma_blocks_per_sm[1] = 1;
  f.wgmma_blocks_per_sm[0] = f.wgmma_blocks_per_sm[1] = 1;
  f.wgmma_bf16_blocks_per_sm[0] = f.wgmma_bf16_blocks_per_sm[1] = 1;
  f.wgmma_rs_blocks_per_sm[0] = f.wgmma_rs_blocks_per_sm[1] = 1;
  f.nvfp4_wgmma_blocks_per_sm[0] = f.nvfp4_wgmma_blocks_per_sm[1] = 1;
  return f;
}

Sm90Config selected(const MoeDesc& d, const KernelOverrides& o, const Sm90Facts& f = all_available()) {
  Sm90Config c = select_sm90_load_config(d, o);
  select_sm90_kernels(c, d, o, f);
  return c;
}

template <class F>
void expect_refused(F&& f, ErrorCode code, const std::string& part) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one naming '" << part << "'";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << e.message();
    EXPECT_NE(e.message().find(part), std::string::npos) << e.message();
  }
}

TEST(Sm90Config, KernelsPerTBucketFollowTheThresholdsAndAvailability) {
  using G = Sm90Gemm;
  const MoeDesc d = flash_desc();
  const Sm90Config c = selected(d, {});
  ASSERT_EQ(c.buckets.size(), 2u);
  EXPECT_EQ(c.bucket(1).gemm, G::kDecode);
  EXPECT_EQ(c.bucket(kDecodeMaxTokens).gemm, G::kDecode);
  EXPECT_EQ(c.bucket(kDecodeMaxTokens + 1).gemm, G::kWgmma);
  EXPECT_EQ(c.bucket(8192).gemm, G::kWgmma);
  EXPECT_EQ(c.bucket(1).block_m, kDecodeBlockM);
  EXPECT_EQ(c.bucket(8192).block_m, wgmma_tile_shape(kWgmmaDefaultTile).block_m);

  MoeDesc exact = d;
  exact.numerics.exact_accumulation = true;
  EXPECT_EQ(selected(exact, {}).bucket(kDecodeMaxTokens + 1).gemm, G::kMma);
  EXPECT_EQ(selected(exact, {}).bucket(1).gemm, G::kDecode);

  KernelOverrides low;  // the decode limit below the wgmma threshold: mma.sync fills the gap
  low.decode_max_tokens = 16;
  const Sm90Config l = selected(d, low);
  EXPECT_EQ(l.bucket(16).gemm, G::kDecode);
  EXPECT_EQ(l.bucket(17).gemm, G::kMma);
  EXPECT_EQ(l.bucket(kWgmmaMinTokens - 1).gemm, G::kMma);
  EXPECT_EQ(l.bucket(kWgmmaMinTokens).gemm, G::kWgmma);

  Sm90Facts unfolded = all_available();
  unfolded.w2_folded = false;
  EXPECT_EQ(selected(d, {}, unfolded).bucket(8192).gemm, G::kMma);
  Sm90Facts no_decode = all_available();
  no_decode.decode_unavailable = "too large";
  const Sm90Config nd = selected(d, {}, no_decode);
  EXPECT_EQ(nd.bucket(300).gemm, G::kMma);  // the decode range falls back to mma.sync
  EXPECT_EQ(nd.bucket(kDecodeMaxTokens + 1).gemm, G::kWgmma);

  KernelOverrides forced;
  for (const GemmKernel k : {GemmKernel::kDecode, GemmKernel::kMma, GemmKernel::kWgmma}) {
    forced.gemm = k;
    const Sm90Config f = selected(d, forced);
    ASSERT_EQ(f.buckets.size(), 1u);
    EXPECT_EQ(f.bucket(1).gemm, k == GemmKernel::kDecode ? G::kDecode : k == GemmKernel::kMma ? G::kMma : G::kWgmma);
  }
  // wgmma-bf16 runs by override only (its gain at T = 8192 does not pay for its bf16 h), every
  // T, 128-row m tiles.
  EXPECT_FALSE(selected(d, {}).uses_16bit_activations());
  forced.gemm = GemmKernel::kWgmmaBf16;
  const Sm90Config bf16 = selected(d, forced);
  ASSERT_EQ(bf16.buckets.size(), 1u);
  EXPECT_EQ(bf16.bucket(1).gemm, G::kWgmmaBf16);
  EXPECT_EQ(bf16.bucket(8192).block_m, kRsBlockM);
  EXPECT_TRUE(bf16.uses_16bit_activations());
  // wgmma-rs by override: 64-token m tiles below kWgmmaRsWideMinTokens, 96 from there (one
  // bucket each); overrides.tile pins one of them for every T.
  forced.gemm = GemmKernel::kWgmmaRs;
  const Sm90Config rs = selected(d, forced);
  ASSERT_EQ(rs.buckets.size(), 2u);
  EXPECT_EQ(rs.bucket(1).gemm, G::kWgmmaRs);
  EXPECT_EQ(rs.bucket(kWgmmaRsWideMinTokens - 1).block_m, 64);
  EXPECT_EQ(rs.bucket(kWgmmaRsWideMinTokens).gemm, G::kWgmmaRs);
  EXPECT_EQ(rs.bucket(8192).block_m, 96);
  EXPECT_FALSE(rs.uses_16bit_activations());
  forced.tile = {96, 128};
  const Sm90Config rs96 = selected(d, forced);
  ASSERT_EQ(rs96.buckets.size(), 1u);
  EXPECT_EQ(rs96.bucket(1).block_m, 96);
  forced.tile = {};
  EXPECT_STREQ(sm90_gemm_name(G::kWgmmaRs), "wgmma-rs");
  // nvfp4 auto: its decode kernels up to kNvfp4DecodeMaxTokens, its mma.sync kernels above; the
  // decode_max_tokens override moves the boundary; mma.sync throughout where decode cannot run.
  const Sm90Config nv = selected(flash_desc(Recipe::kNvfp4), {});
  ASSERT_EQ(nv.buckets.size(), 2u);
  EXPECT_EQ(nv.bucket(1).gemm, G::kNvfp4Decode);
  EXPECT_EQ(nv.bucket(1).block_m, kDecodeBlockM);
  EXPECT_EQ(nv.bucket(kNvfp4DecodeMaxTokens).gemm, G::kNvfp4Decode);
  EXPECT_EQ(nv.bucket(kNvfp4DecodeMaxTokens + 1).gemm, G::kNvfp4Mma);
  EXPECT_EQ(nv.bucket(8192).block_m, kGemmBlockM);
  KernelOverrides nv_boundary;
  nv_boundary.decode_max_tokens = 100;
  EXPECT_EQ(selected(flash_desc(Recipe::kNvfp4), nv_boundary).bucket(101).gemm, G::kNvfp4Mma);
  Sm90Facts nv_no_decode = all_available();
  nv_no_decode.decode_unavailable = "16 rows of A do not fit";
  const Sm90Config nvm = selected(flash_desc(Recipe::kNvfp4), {}, nv_no_decode);
  ASSERT_EQ(nvm.buckets.size(), 1u);
  EXPECT_EQ(nvm.bucket(1).gemm, G::kNvfp4Mma);
  KernelOverrides nv_mma;
  nv_mma.gemm = GemmKernel::kMma;
  ASSERT_EQ(selected(flash_desc(Recipe::kNvfp4), nv_mma).buckets.size(), 1u);
  EXPECT_EQ(selected(flash_desc(Recipe::kNvfp4), nv_mma).bucket(1).gemm, G::kNvfp4Mma);
  KernelOverrides nv_decode;
  nv_decode.gemm = GemmKernel::kDecode;
  const Sm90Config nvd = selected(flash_desc(Recipe::kNvfp4), nv_decode);
  ASSERT_EQ(nvd.buckets.size(), 1u);
  EXPECT_EQ(nvd.bucket(1).gemm, G::kNvfp4Decode);
  EXPECT_EQ(nvd.bucket(8192).block_m, kDecodeBlockM);
  EXPECT_STREQ(sm90_gemm_name(G::kNvfp4Decode), "nvfp4-decode");
  // nvfp4's f16 wgmma kernels by override (overrides.gemm = wgmma; fold_fp8 does not concern
  // nvfp4): every T, 128-row m tiles, 16-bit activations in the workspace.
  EXPECT_FALSE(nv.uses_16bit_activations());
  KernelOverrides nv_wgmma;
  nv_wgmma.gemm = GemmKernel::kWgmma;
  const Sm90Config nvw = selected(flash_desc(Recipe::kNvfp4), nv_wgmma);
  ASSERT_EQ(nvw.buckets.size(), 1u);
  EXPECT_EQ(nvw.bucket(1).gemm, G::kNvfp4Wgmma);
  EXPECT_EQ(nvw.bucket(8192).block_m, kRsBlockM);
  EXPECT_TRUE(nvw.uses_16bit_activations());
  nv_wgmma.fold_fp8 = false;
  EXPECT_EQ(selected(flash_desc(Recipe::kNvfp4), nv_wgmma).bucket(1).gemm, G::kNvfp4Wgmma);
  EXPECT_STREQ(sm90_gemm_name(G::kNvfp4Wgmma), "nvfp4-wgmma");

  KernelOverrides tile;
  tile.tile = {128, 128};
  EXPECT_EQ(selected(d, tile).wgmma_tile, WgmmaTile::k128x128);
  EXPECT_EQ(selected(d, tile).bucket(8192).block_m, 128);
}

TEST(Sm90Config, OverridesThatCannotBeHonouredAreRefusedNamingThem) {
  const MoeDesc d = flash_desc();
  KernelOverrides wgmma;
  wgmma.gemm = GemmKernel::kWgmma;
  MoeDesc exact = d;
  exact.numerics.exact_accumulation = true;
  // An explicit exact_accumulation is never beaten by a kernel override.
  expect_refused([&] { select_sm90_load_config(exact, wgmma); }, ErrorCode::kInvalidArgument,
                 "contradicts desc.numerics.exact_accumulation");
  Sm90Facts unfolded = all_available();
  unfolded.w13_folded = false;
  expect_refused([&] { selected(d, wgmma, unfolded); }, ErrorCode::kUnsupported, "overrides.gemm = wgmma");
  KernelOverrides no_fold = wgmma;
  no_fold.fold_fp8 = false;
  expect_refused([&] { select_sm90_load_config(d, no_fold); }, ErrorCode::kUnsupported, "fold_fp8 = false");
  KernelOverrides decode;
  decode.gemm = GemmKernel::kDecode;
  Sm90Facts no_decode = all_available();
  no_decode.decode_unavailable = "16 rows of A do not fit";
  expect_refused([&] { selected(d, decode, no_decode); }, ErrorCode::kUnsupported, "16 rows of A do not fit");
  // nvfp4 has its own decode kernels; they too can be unavailable.
  expect_refused([&] { selected(flash_desc(Recipe::kNvfp4), decode, no_decode); }, ErrorCode::kUnsupported,
                 "the nvfp4 decode GEMMs cannot run this layer: 16 rows of A do not fit");
  KernelOverrides nv_wgmma;
  nv_wgmma.gemm = GemmKernel::kWgmma;
  MoeDesc nv_exact = flash_desc(Recipe::kNvfp4);
  nv_exact.numerics.exact_accumulation = true;
  expect_refused([&] { select_sm90_load_config(nv_exact, nv_wgmma); }, ErrorCode::kInvalidArgument,
                 "overrides.gemm = wgmma contradicts desc.numerics.exact_accumulation");
  Sm90Facts nv_no_fit = all_available();
  nv_no_fit.nvfp4_wgmma_blocks_per_sm[1] = 0;
  expect_refused([&] { selected(flash_desc(Recipe::kNvfp4), nv_wgmma, nv_no_fit); }, ErrorCode::kUnsupported,
                 "overrides.gemm = wgmma: the nvfp4 wgmma GEMMs cannot run this layer: the kernels do not fit");
  MoeDesc nv_odd = flash_desc(Recipe::kNvfp4);
  nv_odd.intermediate_size = 2048 + 32;
  expect_refused([&] { selected(nv_odd, nv_wgmma); }, ErrorCode::kUnsupported,
                 "must be multiples of 128");
  KernelOverrides tile;
  tile.tile = {96, 96};
  expect_refused([&] { select_sm90_load_config(d, tile); }, ErrorCode::kUnsupported, "allowed: 64x256, 128x128");

  KernelOverrides bf16;
  bf16.gemm = GemmKernel::kWgmmaBf16;
  expect_refused([&] { select_sm90_load_config(exact, bf16); }, ErrorCode::kInvalidArgument,
                 "overrides.gemm = wgmma-bf16 contradicts desc.numerics.exact_accumulation");
  expect_refused([&] { selected(d, bf16, unfolded); }, ErrorCode::kUnsupported,
                 "overrides.gemm = wgmma-bf16: the wgmma-bf16 GEMMs cannot run this layer: the weights are "
                 "not inside the FP8 window");
  KernelOverrides bf16_no_fold = bf16;
  bf16_no_fold.fold_fp8 = false;
  expect_refused([&] { select_sm90_load_config(d, bf16_no_fold); }, ErrorCode::kUnsupported,
                 "overrides.gemm = wgmma-bf16 needs folded weights");
  expect_refused([&] { select_sm90_load_config(flash_desc(Recipe::kNvfp4), bf16); }, ErrorCode::kUnsupported,
                 "allowed: auto, decode, mma, wgmma");
  Sm90Facts no_fit = all_available();
  no_fit.wgmma_bf16_blocks_per_sm[1] = 0;
  expect_refused([&] { selected(d, bf16, no_fit); }, ErrorCode::kUnsupported, "do not fit on this device");

  KernelOverrides rs;
  rs.gemm = GemmKernel::kWgmmaRs;
  expect_refused([&] { select_sm90_load_config(exact, rs); }, ErrorCode::kInvalidArgument,
                 "overrides.gemm = wgmma-rs contradicts desc.numerics.exact_accumulation");
  expect_refused([&] { selected(d, rs, unfolded); }, ErrorCode::kUnsupported,
                 "overrides.gemm = wgmma-rs: the wgmma-rs GEMMs cannot run this layer: the weights are "
                 "not inside the FP8 window");
  KernelOverrides rs_tile = rs;
  rs_tile.tile = {128, 128};
  expect_refused([&] { select_sm90_load_config(d, rs_tile); }, ErrorCode::kUnsupported,
                 "overrides.tile = 128x128 is not a wgmma-rs tile of SM90; allowed: 64x128, 96x128");
  Sm90Facts rs_no_fit = all_available();
  rs_no_fit.wgmma_rs_blocks_per_sm[0] = 0;
  expect_refused([&] { selected(d, rs, rs_no_fit); }, ErrorCode::kUnsupported,
                 "the wgmma-rs GEMMs cannot run this layer: the kernels do not fit on this device");
}

TEST(Sm90Config, LaunchGridsCapPersistentKernelsAtTheResidentBlocks) {
  const Plan plan = make_plan({256, 4096, 2048, 6, 8192, Recipe::kMxfp4});
  for (const WgmmaTile tile : {WgmmaTile::k64x256, WgmmaTile::k128x128}) {
    const int block_n = wgmma_tile_shape(tile).block_n;
    const GridRule rule{kGemmBlockM, 4096 / block_n, 132};
    EXPECT_EQ(launch_grid(plan, rule, 1), std::min<int64_t>(132, plan.m_tile_bound(1) * 4096 / block_n));
    EXPECT_EQ(launch_grid(plan, rule, 8192), 132);
  }
  EXPECT_EQ(launch_grid(plan, GridRule{kDecodeBlockM, 1, 0}, 1), plan.m_tile_bound(1, kDecodeBlockM));
}

class Sm90WgmmaKernels : public ::testing::Test {
 protected:
  void SetUp() override { MOE_EP_REQUIRE_CUDA(); }
};

TEST_F(Sm90WgmmaKernels, TinyShapeMatchesTheMmaKernels) {
  const Shape s{"tiny", 16, 256, 128, 4};
  compare_kernels(s,
                  {{"random, 10% holes", 1, 0.1},
                   {"random, 10% holes", 7, 0.1},
                   {"random, 10% holes", 300, 0.1},
                   {"expert 3 idle", 300, 0.0, 3},
                   {"one expert, all rows", 300, 0.0, -1, 5},
                   {"random, 5% holes", 4096, 0.05}},
                  31);
}

TEST_F(Sm90WgmmaKernels, FlashShapeMatchesTheMmaKernels) {
  const Shape s{"flash/E32", 32, 4096, 2048, 6};
  compare_kernels(s,
                  {{"random, 5% holes", 1, 0.05},
                   {"random, 5% holes", 7, 0.05},
                   {"random, 5% holes", 300, 0.05},
                   {"one expert, all rows", 200, 0.0, -1, 9},
                   {"random", 1024, 0.0}},
                  47);
}

TEST_F(Sm90WgmmaKernels, BitwiseDeterministicOver20Reruns) {
  const Shape s{"flash/E32", 32, 4096, 2048, 6};
  const DeviceWeights& w = cached_device_weights(s, 47);
  const DeviceProblem p = make_problem(s, make_inputs(s, {"random", 700, 0.05}, 5));
  for (const Kernels& k : wgmma_variants()) {
    const std::string tile = k.name();
    GemmRun run(s, p, w, k);
    run.gemm1();
    run.gemm2();
    const GemmOutputs first = run.outputs();
    for (int rep = 0; rep < 20; ++rep) {
      run.poison();
      run.gemm1();
      run.gemm2();
      const GemmOutputs again = run.outputs();
      ASSERT_EQ(again.h, first.h) << tile << " rerun " << rep;
      ASSERT_EQ(again.h_scale, first.h_scale) << tile << " rerun " << rep;
      ASSERT_EQ(again.o, first.o) << tile << " rerun " << rep;
    }
  }
}

// The decode kernels with kDecodeDeepPrefetch k steps of weights in flight compute what the
// regular ones do, in the same order: bitwise the same h, h scales and o (flash/E32 shape,
// holes, an idle expert, one expert taking every row; outputs NaN-poisoned before each run).
TEST_F(Sm90WgmmaKernels, DeepDecodeIsBitwiseTheDecodeKernels) {
  const Shape s{"flash/E32", 32, 4096, 2048, 6};
  const DeviceWeights& w = cached_device_weights(s, 47);
  Kernels regular, deep;
  regular.decode_prefetch = 2;
  deep.decode_prefetch = kDecodeDeepPrefetch;
  for (const RoutingCase& c : std::vector<RoutingCase>{{"random", 1, 0.0},
                                                       {"random, 10% holes", 7, 0.1},
                                                       {"expert 3 idle", 64, 0.0, 3},
                                                       {"one expert, all rows", 40, 0.0, -1, 9},
                                                       {"random", 300, 0.05}}) {
    SCOPED_TRACE(fmt::format("{} T={}", c.name, c.T));
    const DeviceProblem p = make_problem(s, make_inputs(s, c, 61 + static_cast<uint64_t>(c.T)));
    GemmRun a(s, p, w, regular), b(s, p, w, deep);
    a.gemm1();
    a.gemm2();
    b.gemm1();
    b.gemm2();
    const GemmOutputs ra = a.outputs(), rb = b.outputs();
    ASSERT_FALSE(ra.o.empty());
    EXPECT_TRUE(ra.h == rb.h && ra.h_scale == rb.h_scale && ra.o == rb.o) << "the deep decode kernels differ";
    int64_t nan = 0;
    for (uint16_t v : rb.o) nan += std::isnan(bf16_to_float(v));
    EXPECT_EQ(nan, 0) << "unwritten (NaN-poisoned) outputs";
  }
}

// ---- nvfp4: the f16 wgmma kernels against the f16 mma.sync ones, kernel by kernel -------------
// Both compute exact f16 products (e2m1 * e4m3 of each operand) summed in fp32, in different
// orders: GEMM 1's fp32 h and GEMM 2's o on the same NVFP4 h agree to summation-order noise
// (an occasional one-ulp flip of a bf16-rounded gate or up), far below the layer's 3e-2, so a
// systematic error of a fraction of a percent in any block, scale or row shows.
struct Nvfp4DeviceWeights {
  DeviceBuffer w13, w13_scales, w13_global, w2, w2_scales, w2_global;
};

Nvfp4DeviceWeights make_nvfp4_device_weights(const Shape& s, uint64_t seed) {
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

Nvfp4DeviceProblem make_nvfp4_problem(const Shape& s, const testing::HostInputs& in) {
  std::vector<float> x(in.num_tokens * s.H);
  for (size_t i = 0; i < x.size(); ++i) x[i] = bf16_to_float(in.x[i]);
  std::vector<uint8_t> packed(x.size() / 2), scales(x.size() / 16);
  std::vector<float> global(in.num_tokens);
  quantize_nvfp4_rows(x.data(), in.num_tokens, s.H, packed.data(), scales.data(), global.data());
  return {in.num_tokens, DeviceBuffer::upload(packed), DeviceBuffer::upload(scales), DeviceBuffer::upload(global),
          DeviceBuffer::upload(in.topk_ids), DeviceBuffer::upload(in.topk_weights)};
}

// nvfp4 GEMM kernels: f16 mma.sync (64-row m tiles), f16 wgmma with the weights in registers
// (128-row m tiles, activations converted to f16 first), the decode kernels (16-row m tiles) and
// their deep form.
enum class Nvfp4Kernels { kMma, kWgmma, kDecode, kDecodeDeep };

// The nvfp4 GEMMs of one problem with one kernel family; outputs NaN-poisoned at creation.
class Nvfp4GemmRun {
 public:
  Nvfp4GemmRun(const Shape& s, const Nvfp4DeviceProblem& p, const Nvfp4DeviceWeights& w, Nvfp4Kernels k)
      : s_(s), p_(p), w_(w), k_(k) {
    const bool decode = k == Nvfp4Kernels::kDecode || k == Nvfp4Kernels::kDecodeDeep;
    r_ = route(s, p.T, p.ids, p.topk_weights,
               k == Nvfp4Kernels::kWgmma ? kRsBlockM : decode ? kDecodeBlockM : kGemmBlockM);
    const int64_t rows = std::max<int64_t>(p.T * s.K, 1);
    h_f32_ = DeviceBuffer(rows * s.I * 4);
    h_ = DeviceBuffer(rows * s.I / 2);
    h_scale_ = DeviceBuffer(rows * s.I / 16);
    h_global_ = DeviceBuffer(rows * 4);
    o_ = DeviceBuffer(rows * s.H * 2);
    x16_ = DeviceBuffer(std::max<int64_t>(p.T, 1) * s.H * 2);
    h16_ = DeviceBuffer(rows * s.I * 2);
    for (DeviceBuffer* b : {&h_f32_, &o_}) MOE_EP_CUDA_CHECK(cudaMemset(b->get(), 0xFF, b->bytes()));  // NaN
    int sms = 0, per_sm1 = 0, per_sm2 = 0;
    MOE_EP_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    switch (k) {
      case Nvfp4Kernels::kMma:
        MOE_EP_CUDA_CHECK(configure_sm90_nvfp4_grouped_gemm1(&per_sm1));
        MOE_EP_CUDA_CHECK(configure_sm90_nvfp4_grouped_gemm2(&per_sm2));
        break;
      case Nvfp4Kernels::kWgmma:
        MOE_EP_CUDA_CHECK(configure_sm90_nvfp4_rs_grouped_gemm1(&per_sm1));
        MOE_EP_CUDA_CHECK(configure_sm90_nvfp4_rs_grouped_gemm2(&per_sm2));
        break;
      case Nvfp4Kernels::kDecode:
        MOE_EP_CUDA_CHECK(configure_sm90_nvfp4_decode_gemm1(static_cast<int>(s.H), &per_sm1));
        MOE_EP_CUDA_CHECK(configure_sm90_nvfp4_decode_gemm2(static_cast<int>(s.I), &per_sm2));
        break;
      case Nvfp4Kernels::kDecodeDeep:
        MOE_EP_CUDA_CHECK(configure_sm90_nvfp4_decode_deep_gemm1(static_cast<int>(s.H), &per_sm1));
        MOE_EP_CUDA_CHECK(configure_sm90_nvfp4_decode_deep_gemm2(static_cast<int>(s.I), &per_sm2));
        break;
    }
    // Persistent kernels: blocks per SM x SMs; decode kernels: the routing's m-tile bound.
    grid1_ = decode ? static_cast<int>(r_.max_tiles) : sms * std::max(per_sm1, 1);
    grid2_ = decode ? static_cast<int>(r_.max_tiles) : sms * std::max(per_sm2, 1);
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
    switch (k_) {
      case Nvfp4Kernels::kMma: MOE_EP_CUDA_CHECK(launch_sm90_nvfp4_grouped_gemm1(g, grid1_, nullptr)); break;
      case Nvfp4Kernels::kWgmma:
        MOE_EP_CUDA_CHECK(launch_sm90_nvfp4_to_rs_f16(p_.a.get(), p_.a_scale.get(), p_.T, nullptr, g.op.k,
                                                      x16_.get<uint16_t>(), nullptr));
        set_16bit_activations(g.op, x16_.get<uint16_t>());
        MOE_EP_CUDA_CHECK(launch_sm90_nvfp4_rs_grouped_gemm1(g, grid1_, nullptr));
        break;
      case Nvfp4Kernels::kDecode: MOE_EP_CUDA_CHECK(launch_sm90_nvfp4_decode_gemm1(g, grid1_, nullptr)); break;
      case Nvfp4Kernels::kDecodeDeep: MOE_EP_CUDA_CHECK(launch_sm90_nvfp4_decode_deep_gemm1(g, grid1_, nullptr)); break;
    }
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
    switch (k_) {
      case Nvfp4Kernels::kMma: MOE_EP_CUDA_CHECK(launch_sm90_nvfp4_grouped_gemm2(g, grid2_, nullptr)); break;
      case Nvfp4Kernels::kWgmma:
        MOE_EP_CUDA_CHECK(launch_sm90_nvfp4_to_rs_f16(in.h_.get(), in.h_scale_.get(), p_.T * s_.K,
                                                      r_.offsets.get<int32_t>() + s_.E, g.op.k, h16_.get<uint16_t>(),
                                                      nullptr));
        set_16bit_activations(g.op, h16_.get<uint16_t>());
        MOE_EP_CUDA_CHECK(launch_sm90_nvfp4_rs_grouped_gemm2(g, grid2_, nullptr));
        break;
      case Nvfp4Kernels::kDecode: MOE_EP_CUDA_CHECK(launch_sm90_nvfp4_decode_gemm2(g, grid2_, nullptr)); break;
      case Nvfp4Kernels::kDecodeDeep: MOE_EP_CUDA_CHECK(launch_sm90_nvfp4_decode_deep_gemm2(g, grid2_, nullptr)); break;
    }
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
  Nvfp4Kernels k_;
  DeviceRouting r_;
  DeviceBuffer h_f32_, h_, h_scale_, h_global_, o_, x16_, h16_;
  int grid1_ = 0, grid2_ = 0;
};

TEST_F(Sm90WgmmaKernels, Nvfp4WgmmaMatchesTheNvfp4MmaKernels) {
  for (const Shape& s : {Shape{"tiny", 16, 256, 128, 4}, Shape{"flash/E32", 32, 4096, 2048, 6}}) {
    const Nvfp4DeviceWeights w = make_nvfp4_device_weights(s, 53);
    for (const RoutingCase& c : std::vector<RoutingCase>{{"random", 1, 0.0},
                                                         {"random, 10% holes", 7, 0.1},
                                                         {"random, 5% holes", 300, 0.05},
                                                         {"one expert, all rows", 200, 0.0, -1, 9}}) {
      SCOPED_TRACE(fmt::format("{} {} T={}", s.name, c.name, c.T));
      const Nvfp4DeviceProblem p = make_nvfp4_problem(s, make_inputs(s, c, 71 + static_cast<uint64_t>(c.T)));
      Nvfp4GemmRun mma(s, p, w, Nvfp4Kernels::kMma), wg(s, p, w, Nvfp4Kernels::kWgmma);
      mma.gemm1();
      wg.gemm1();
      mma.gemm2(mma);
      wg.gemm2(mma);  // both GEMM 2s on mma.sync's NVFP4 h
      ASSERT_EQ(wg.row_token(), mma.row_token()) << "the routed row order depends on the m tile";
      const std::vector<float> h_ref = mma.h(), h_got = wg.h();
      const std::vector<uint16_t> o_ref = mma.o(), o_got = wg.o();
      ASSERT_FALSE(h_ref.empty());
      const double err_h = rel_err_of(h_ref.size(), [&](size_t i) { return double{h_got[i]}; },
                                      [&](size_t i) { return double{h_ref[i]}; });
      const double err_o = rel_err_of(o_ref.size(), [&](size_t i) { return double{bf16_to_float(o_got[i])}; },
                                      [&](size_t i) { return double{bf16_to_float(o_ref[i])}; });
      EXPECT_LE(err_h, 1e-3) << "GEMM 1 fp32 h";
      EXPECT_LE(err_o, 1e-3) << "GEMM 2 on the same h";
      fmt::print("[ wgmma   ] nvfp4 {:<10} {:<22} T={:<5} h err={:.2e} (equal {:.4f})  o err={:.2e} (equal {:.4f})\n",
                 s.name, c.name, c.T, err_h, equal_share(h_got, h_ref), err_o, equal_share(o_got, o_ref));
    }
  }
}

// nvfp4's decode kernels and their deep form run mma.sync's products in its k order: fp32 h and
// o bitwise those of the 64 x 128 mma.sync kernels (o on the same NVFP4 h).
TEST_F(Sm90WgmmaKernels, Nvfp4DecodeAndDeepDecodeAreBitwiseTheMmaKernels) {
  const Shape s{"flash/E32", 32, 4096, 2048, 6};
  const Nvfp4DeviceWeights w = make_nvfp4_device_weights(s, 59);
  for (const RoutingCase& c : std::vector<RoutingCase>{{"random", 1, 0.0},
                                                       {"random, 10% holes", 7, 0.1},
                                                       {"one expert, all rows", 40, 0.0, -1, 9}}) {
    SCOPED_TRACE(fmt::format("{} T={}", c.name, c.T));
    const Nvfp4DeviceProblem p = make_nvfp4_problem(s, make_inputs(s, c, 83 + static_cast<uint64_t>(c.T)));
    Nvfp4GemmRun mma(s, p, w, Nvfp4Kernels::kMma);
    mma.gemm1();
    mma.gemm2(mma);
    const std::vector<float> h_ref = mma.h();
    const std::vector<uint16_t> o_ref = mma.o();
    ASSERT_FALSE(h_ref.empty());
    for (const Nvfp4Kernels k : {Nvfp4Kernels::kDecode, Nvfp4Kernels::kDecodeDeep}) {
      Nvfp4GemmRun run(s, p, w, k);
      run.gemm1();
      run.gemm2(mma);
      EXPECT_EQ(run.h(), h_ref) << (k == Nvfp4Kernels::kDecode ? "decode" : "deep decode") << ": GEMM 1 fp32 h";
      EXPECT_EQ(run.o(), o_ref) << (k == Nvfp4Kernels::kDecode ? "decode" : "deep decode") << ": GEMM 2 on the same h";
    }
  }
}

// Small case for compute-sanitizer (racecheck / memcheck / synccheck): both tiles, a few tiles.
TEST_F(Sm90WgmmaKernels, SmallCaseForSanitizers) {
  const Shape s{"tiny", 16, 256, 128, 4};
  compare_kernels(s, {{"random, 10% holes", 150, 0.1}}, 77);
}

// ---- full deepseek-v4-flash size on random bytes, timed ------------------------------------------
// Weights and activations are random bytes (every FP4 nibble is a valid code; e4m3 NaN codes are
// replaced); both scale forms describe the same weights: E8M0 = base + d with d in 0..3, shift d,
// column factor 2^(base - 119). The GEMM results need no host reference: wgmma is checked against
// mma.sync, and the kernels are timed with events (median of 10 after 2 warm-ups).
void fill_random(std::vector<uint8_t>& v, uint64_t seed) {
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

DeviceGemmWeights random_gemm_weights(int64_t E, int64_t N, int64_t K, uint64_t seed) {
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

DeviceProblem random_problem(const Shape& s, int64_t T, uint64_t seed) {
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

// MOE_EP_WGMMA_TIMING_ITERS = 1 runs each kernel once (for ncu).
template <class F>
double median_us(F&& f) {
  const char* env = std::getenv("MOE_EP_WGMMA_TIMING_ITERS");
  const int iters = env ? std::max(1, std::atoi(env)) : 10, warmup = env ? 0 : 2;
  cudaEvent_t a, b;
  MOE_EP_CUDA_CHECK(cudaEventCreate(&a));
  MOE_EP_CUDA_CHECK(cudaEventCreate(&b));
  for (int i = 0; i < warmup; ++i) f();
  std::vector<double> t;
  for (int i = 0; i < iters; ++i) {
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
Nvfp4DeviceWeights random_nvfp4_weights(const Shape& s) {
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

Nvfp4DeviceProblem random_nvfp4_problem(const Shape& s, int64_t T, uint64_t seed) {
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

const Shape kFlashShape{"flash", 256, 4096, 2048, 6};

// The token counts of a timing test: MOE_EP_WGMMA_TIMING_TOKENS ("2048,8192") or `defaults`.
std::vector<int64_t> timing_tokens(std::vector<int64_t> defaults) {
  const char* v = std::getenv("MOE_EP_WGMMA_TIMING_TOKENS");
  if (!v) return defaults;
  std::vector<int64_t> tokens;
  for (const char* c = v; *c;) {
    tokens.push_back(std::strtoll(c, const_cast<char**>(&c), 10));
    if (*c == ',') ++c;
  }
  return tokens;
}

DeviceWeights random_device_weights(const Shape& s) {
  DeviceWeights w;
  w.w13 = random_gemm_weights(s.E, 2 * s.I, s.H, 3);
  w.w2 = random_gemm_weights(s.E, s.H, s.I, 4);
  return w;
}

TEST(Sm90WgmmaTiming, FlashSizeRandomBytesMatchMmaAndKernelTimes) {
  MOE_EP_REQUIRE_WGMMA_TIMING();
  const Shape s = kFlashShape;
  const DeviceWeights w = random_device_weights(s);
  const double tol = cudatest::wgmma_recipe_tolerance();
  const std::vector<int64_t> tokens = timing_tokens({2048, 8192});
  fmt::print("[ wgmma   ] {:>5} {:<14} {:>10} {:>10} {:>9} {:>9}  {}\n", "T", "kernels", "gemm1 us", "gemm2 us",
             "TFLOP/s1", "TFLOP/s2", "vs mma.sync");
  for (int64_t T : tokens) {
    const DeviceProblem p = random_problem(s, T, 100 + T);
    GemmRun mma(s, p, w, Kernels{});
    const double mma1 = median_us([&] { mma.gemm1(); });
    const double mma2 = median_us([&] { mma.gemm2(); });
    const GemmOutputs ref = mma.outputs();
    const double rows = static_cast<double>(mma.rows());
    const double flop1 = 2.0 * rows * 2 * s.I * s.H, flop2 = 2.0 * rows * s.H * s.I;
    fmt::print("[ wgmma   ] {:>5} {:<14} {:>10.1f} {:>10.1f} {:>9.1f} {:>9.1f}\n", T, "mma.sync", mma1, mma2,
               flop1 / mma1 * 1e-6, flop2 / mma2 * 1e-6);
    for (const Kernels& k : wgmma_variants()) {
      const std::string tile = k.name();
      GemmRun run(s, p, w, k);
      const double t1 = median_us([&] { run.gemm1(); });
      const double t2 = median_us([&] { run.gemm2(&mma); });
      const GemmOutputs got = run.outputs();
      const double err_h = rel_err_h(got, ref);
      const double err_o = rel_err_o(got, ref);
      EXPECT_LE(err_h, tol) << "T=" << T << " " << tile;
      EXPECT_LE(err_o, tol) << "T=" << T << " " << tile;
      fmt::print("[ wgmma   ] {:>5} {:<14} {:>10.1f} {:>10.1f} {:>9.1f} {:>9.1f}  h err {:.2e} (bytes equal "
                 "{:.4f}), o err {:.2e} (equal {:.4f})\n",
                 T, tile, t1, t2, flop1 / t1 * 1e-6, flop2 / t2 * 1e-6, err_h,
                 equal_share(got.h, ref.h), err_o, equal_share(got.o, ref.o));
    }
  }
}

// The decode kernels at small T, 2 against kDecodeDeepPrefetch k steps of weights in flight per
// warp, at the flash size (random bytes, outputs checked bitwise against each other). Weight TB/s
// = the active experts' FP4 weights and shift words over the time; the floor is the copy rate.
TEST(Sm90WgmmaTiming, DecodePrefetchDepthAtSmallT) {
  MOE_EP_REQUIRE_WGMMA_TIMING();
  const Shape s = kFlashShape;
  const DeviceWeights w = random_device_weights(s);
  fmt::print("[ decode  ] {:>5} {:<24} {:>10} {:>10} {:>8} {:>8}\n", "T", "kernels", "gemm1 us", "gemm2 us", "TB/s 1",
             "TB/s 2");
  for (int64_t T : timing_tokens({1, 2, 4, 8, 32, 128})) {
    const DeviceProblem p = random_problem(s, T, 300 + T);
    std::optional<GemmOutputs> first;
    for (int prefetch : {2, kDecodeDeepPrefetch}) {
      Kernels k;
      k.decode_prefetch = prefetch;
      GemmRun run(s, p, w, k);
      const double t1 = median_us([&] { run.gemm1(); });
      const double t2 = median_us([&] { run.gemm2(); });
      const GemmOutputs got = run.outputs();
      if (!first) first = got;
      else EXPECT_TRUE(got.h == first->h && got.o == first->o) << "T=" << T << ": the deep decode kernels differ";
      const double experts = static_cast<double>(run.active_experts());
      const double bytes1 = experts * 2 * s.I * s.H * (0.5 + 1.0 / 32), bytes2 = experts * s.H * s.I * (0.5 + 1.0 / 32);
      fmt::print("[ decode  ] {:>5} {:<24} {:>10.1f} {:>10.1f} {:>8.2f} {:>8.2f}\n", T, k.name(), t1, t2,
                 bytes1 / t1 * 1e-6, bytes2 / t2 * 1e-6);
    }
  }
  // nvfp4's decode kernels, the same comparison (weights 0.5 + 1/16 bytes per element).
  const Nvfp4DeviceWeights nw = random_nvfp4_weights(s);
  for (int64_t T : timing_tokens({1, 2, 4, 8, 32, 128})) {
    const Nvfp4DeviceProblem p = random_nvfp4_problem(s, T, 500 + T);
    std::optional<std::vector<uint16_t>> first;
    for (const Nvfp4Kernels k : {Nvfp4Kernels::kDecode, Nvfp4Kernels::kDecodeDeep}) {
      Nvfp4GemmRun run(s, p, nw, k);
      const double t1 = median_us([&] { run.gemm1(); });
      const double t2 = median_us([&] { run.gemm2(run); });
      const std::vector<uint16_t> o = run.o();
      if (!first) first = o;
      else EXPECT_EQ(o, *first) << "T=" << T << ": the nvfp4 deep decode kernels differ";
      const double experts = static_cast<double>(run.active_experts());
      const double bytes1 = experts * 2 * s.I * s.H * (0.5 + 1.0 / 16), bytes2 = experts * s.H * s.I * (0.5 + 1.0 / 16);
      fmt::print("[ decode  ] {:>5} {:<24} {:>10.1f} {:>10.1f} {:>8.2f} {:>8.2f}\n", T,
                 k == Nvfp4Kernels::kDecode ? "nvfp4 decode, 2 ahead" : "nvfp4 decode, 4 ahead", t1, t2,
                 bytes1 / t1 * 1e-6, bytes2 / t2 * 1e-6);
    }
  }
}

// Where the rs fp8 kernels' time goes: each GEMM timed whole and with parts of its mainloop left
// out (activation copies, weight copies, math), with the weights by cp.async and by bulk copies,
// at the flash size; the whole kernels are checked against mma.sync. Weight TB/s = the active
// experts' FP4 weights and shift words over the time.
TEST(Sm90WgmmaTiming, RsFp8WorkSplit) {
  MOE_EP_REQUIRE_WGMMA_TIMING();
  const Shape s = kFlashShape;
  const DeviceWeights w = random_device_weights(s);
  const double tol = cudatest::wgmma_recipe_tolerance();
  const std::vector<int64_t> tokens = timing_tokens({2048, 8192});
  fmt::print("[ rs-split] {:>5} {:<34} {:>10} {:>10} {:>8} {:>8}\n", "T", "variant", "gemm1 us", "gemm2 us", "TB/s 1",
             "TB/s 2");
  for (int64_t T : tokens) {
    const DeviceProblem p = random_problem(s, T, 100 + T);
    GemmRun mma(s, p, w, Kernels{});
    mma.gemm1();
    mma.gemm2();
    const GemmOutputs ref = mma.outputs();
    const int block_m = T < kWgmmaRsWideMinTokens ? 64 : 96;
    const double experts = static_cast<double>(mma.active_experts());
    const double bytes1 = experts * 2 * s.I * s.H * (0.5 + 1.0 / 32), bytes2 = experts * s.H * s.I * (0.5 + 1.0 / 32);
    using W = test::RsFp8WeightPath;
    for (const W weights : {W::kCpAsync, W::kBulk, W::kRegisters})
      for (int work : {kRsFp8All, 3, 2, 1, 4, 0}) {
        // Without weight copies the bulk form is the cp.async kernel; the registers form copies
        // no weights (its weight loads are part of the math).
        if (weights == W::kBulk && !(work & 2)) continue;
        if (weights == W::kRegisters && (block_m != 64 || (work != kRsFp8All && work != 4))) continue;
        Kernels k;
        k.rs_fp8_block_m = block_m;
        k.rs_fp8_weights = weights;
        k.rs_fp8_work = work;
        GemmRun run(s, p, w, k);
        const double t1 = median_us([&] { run.gemm1(); });
        const double t2 = median_us([&] { run.gemm2(&mma); });
        std::string check;
        if (work == kRsFp8All) {
          const GemmOutputs got = run.outputs();
          const double err_h = rel_err_h(got, ref), err_o = rel_err_o(got, ref);
          EXPECT_LE(err_h, tol) << "T=" << T << " " << k.name();
          EXPECT_LE(err_o, tol) << "T=" << T << " " << k.name();
          check = fmt::format("  h err {:.2e}, o err {:.2e}", err_h, err_o);
        }
        fmt::print("[ rs-split] {:>5} {:<34} {:>10.1f} {:>10.1f} {:>8.2f} {:>8.2f}{}\n", T, k.name(), t1, t2,
                   bytes1 / t1 * 1e-6, bytes2 / t2 * 1e-6, check);
      }
  }
}

}  // namespace
}  // namespace moe_ep::cuda

// ---- layer level -------------------------------------------------------------------------------
namespace moe_ep::cudatest {
namespace {

using testsupport::Inputs;
using testsupport::Problem;

TEST(Sm90WgmmaLayer, TinyMatchesCpuWithStructuredRoutings) {
  MOE_EP_REQUIRE_CUDA();
  struct Variant {
    const char* name;
    GemmKernel gemm;
    const char* tile;  // "" = the kernel's own choice
  };
  for (const Variant v : {Variant{"64x256", GemmKernel::kWgmma, "64x256"}, Variant{"128x128", GemmKernel::kWgmma, "128x128"},
                          Variant{"wgmma-bf16", GemmKernel::kWgmmaBf16, ""}, Variant{"rs 64x128", GemmKernel::kWgmmaRs, ""},
                          Variant{"rs 96x128", GemmKernel::kWgmmaRs, "96x128"}}) {
    const char* tile = v.name;
    Problem p = testsupport::tiny_problem("mxfp4");
    p.max_tokens = 4096;
    p.exact_accumulation = false;  // wgmma with exact accumulation is refused (Sm90Config tests)
    p.overrides.gemm = v.gemm;
    if (*v.tile) p.overrides.tile = parse_tile_shape(v.tile);
    const testsupport::WeightSet w = testsupport::random_weights(p, WeightFormat::kMXFP4, 12);
    auto check = [&](const Inputs& in, const std::string& what) {
      const std::vector<double> ref = cpu_reference(p, w.pack(), in);
      auto layer = make_gpu_layer(p, w.pack());
      const std::vector<uint16_t> y = run_on_gpu(*layer, to_device(p, in));
      EXPECT_EQ(layer->read_error_flags(), 0u) << what;
      const double err = relative_error_rows(y, ref, p.hidden);
      int64_t same = 0;
      for (size_t i = 0; i < y.size(); ++i) same += bf16_to_float(y[i]) == ref[i];
      EXPECT_LE(err, wgmma_recipe_tolerance()) << what << " tile " << tile << ": " << p.str();
      fmt::print("[ wgmma   ] layer tiny {:<10} {:<28} T={:<5} rel_err={:.3e} bitwise-equal={:.4f}\n", tile, what,
                 in.tokens, err, y.empty() ? 1.0 : static_cast<double>(same) / y.size());
    };
    for (int64_t T : {1, 7, 300, 4096})
      check(testsupport::random_inputs(p, T, 200 + T, {.skip_fraction = 0.1}), "random, 10% holes");
    Inputs in = testsupport::random_inputs(p, 300, 17);
    for (int64_t t = 0; t < in.tokens; ++t)
      for (int64_t k = 0; k < p.top_k; ++k)
        if (in.id(t, k) == 3) in.set_id(t, k, -1);
    check(in, "expert 3 idle");
    for (int64_t t = 0; t < in.tokens; ++t)
      for (int64_t k = 0; k < p.top_k; ++k) in.set_id(t, k, k == 0 ? 5 : -1);
    check(in, "one expert, all rows");
  }
}

// nvfp4's f16 wgmma kernels (overrides.gemm = wgmma) on the tiny preset against the CPU layer:
// its exact f16 products summed in fp32 in another order meet the nvfp4 threshold. Routings as
// above, plus 3 k steps per GEMM (H = I = 384: an odd count for the two fragment sets) and
// activations quantized by the caller (GEMM 1 then reads the caller's global factors).
TEST(Sm90WgmmaLayer, Nvfp4TinyMatchesCpuWithStructuredRoutings) {
  MOE_EP_REQUIRE_CUDA();
  auto problem = [](int64_t hidden, int64_t intermediate, bool quantize_input) {
    Problem p = testsupport::tiny_problem("nvfp4");
    p.max_tokens = 4096;
    p.exact_accumulation = false;
    p.overrides.gemm = GemmKernel::kWgmma;
    p.hidden = hidden;
    p.intermediate = intermediate;
    p.quantize_input = quantize_input;
    return p;
  };
  auto check = [](const Problem& p, const testsupport::WeightSet& w, const Inputs& in, const std::string& what) {
    const std::vector<double> ref = cpu_reference(p, w.pack(), in);
    auto layer = make_gpu_layer(p, w.pack());
    const std::vector<uint16_t> y = run_on_gpu(*layer, to_device(p, in));
    EXPECT_EQ(layer->read_error_flags(), 0u) << what;
    int64_t nan = 0;
    for (uint16_t v : y) nan += std::isnan(bf16_to_float(v));
    EXPECT_EQ(nan, 0) << what << ": unwritten (NaN-poisoned) outputs";
    const double err = relative_error_rows(y, ref, p.hidden);
    EXPECT_LE(err, same_recipe_tolerance(Recipe::kNvfp4)) << what << ": " << p.str();
    fmt::print("[ wgmma   ] layer tiny nvfp4-wgmma {:<36} T={:<5} rel_err={:.3e}\n", what, in.tokens, err);
  };
  const Problem p = problem(256, 128, true);
  const testsupport::WeightSet w = testsupport::random_weights(p, WeightFormat::kNVFP4, 14);
  for (int64_t T : {1, 7, 300, 4096})
    check(p, w, testsupport::random_inputs(p, T, 210 + T, {.skip_fraction = 0.1}), "random, 10% holes");
  Inputs in = testsupport::random_inputs(p, 300, 19);
  for (int64_t t = 0; t < in.tokens; ++t)
    for (int64_t k = 0; k < p.top_k; ++k)
      if (in.id(t, k) == 3) in.set_id(t, k, -1);
  check(p, w, in, "expert 3 idle");
  for (int64_t t = 0; t < in.tokens; ++t)
    for (int64_t k = 0; k < p.top_k; ++k) in.set_id(t, k, k == 0 ? 5 : -1);
  check(p, w, in, "one expert, all rows");
  const Problem odd = problem(384, 384, true);
  const testsupport::WeightSet wo = testsupport::random_weights(odd, WeightFormat::kNVFP4, 15);
  check(odd, wo, testsupport::random_inputs(odd, 200, 23, {.skip_fraction = 0.1}), "H = I = 384 (3 k steps)");
  const Problem caller = problem(256, 128, false);
  const testsupport::WeightSet wc = testsupport::random_weights(caller, WeightFormat::kNVFP4, 16);
  Inputs ci = testsupport::random_inputs(caller, 150, 29, {.skip_fraction = 0.1});
  testsupport::quantize_inputs_for_caller(caller, ci);
  check(caller, wc, ci, "quantize_input = false");
}

// A warpgroup family forced on the deepseek-v4-flash layer of one recipe.
struct FlashKernel {
  const char* name;
  GemmKernel gemm;
  Recipe recipe;
};

void PrintTo(const FlashKernel& k, std::ostream* os) { *os << k.name; }

class Sm90WgmmaFlashLayer : public ::testing::TestWithParam<FlashKernel> {};

TEST_P(Sm90WgmmaFlashLayer, MatchesCpuAndIsBitwiseDeterministic) {
  MOE_EP_REQUIRE_CUDA();
  const FlashKernel& fk = GetParam();
  const testing::Preset& preset = testing::find_preset("deepseek-v4-flash");
  Problem p = preset_problem("deepseek-v4-flash", std::string(recipe_name(fk.recipe)), 4096);
  p.exact_accumulation = false;
  p.overrides.gemm = fk.gemm;
  const bool mxfp4 = fk.recipe == Recipe::kMxfp4;
  const testing::HostWeights weights = preset_weights(p, mxfp4 ? WeightFormat::kMXFP4 : WeightFormat::kNVFP4, 2027);
  // The FP8 products have their own threshold; nvfp4's f16 ones are exact (the recipe's).
  const double tolerance = mxfp4 ? wgmma_recipe_tolerance() : same_recipe_tolerance(fk.recipe);

  struct Case {
    std::string name;
    Inputs in;
    std::vector<int64_t> rows;
    std::vector<double> ref;
  };
  std::vector<Case> cases;
  for (int64_t T : {1, 7, 300, 4096}) {
    testing::InputSpec is{T, p.hidden, p.num_experts, p.top_k, 0.05, preset.routed_scaling_factor,
                          static_cast<uint64_t>(900 + T), 0};
    cases.push_back({fmt::format("random T={}", T), from_synthetic(testing::make_inputs(is), p.top_k), row_subset(T, T, 40), {}});
  }
  {
    testing::InputSpec is{1024, p.hidden, p.num_experts, p.top_k, 0.0, preset.routed_scaling_factor, 1999, 0};
    Case c{"one expert, all rows", from_synthetic(testing::make_inputs(is), p.top_k), row_subset(1024, 3, 40), {}};
    for (int64_t t = 0; t < c.in.tokens; ++t)
      for (int64_t k = 0; k < p.top_k; ++k) c.in.set_id(t, k, k == 0 ? 11 : -1);
    cases.push_back(std::move(c));
  }
  for (Case& c : cases) c.ref = cpu_reference(p, weights.pack(), c.in, c.rows);
  auto layer = make_gpu_layer(p, weights.pack());
  for (const Case& c : cases) {
    const std::vector<uint16_t> y = run_on_gpu(*layer, to_device(p, c.in));
    const double err = relative_error_rows(y, c.ref, p.hidden, c.rows);
    int64_t nan = 0;
    for (uint16_t v : y) nan += std::isnan(bf16_to_float(v));
    EXPECT_EQ(nan, 0) << c.name << ": unwritten (NaN-poisoned) outputs";
    EXPECT_LE(err, tolerance) << c.name << ": " << p.str();
    fmt::print("[ wgmma   ] layer flash {:<12} {:<24} rows checked={:<5} rel_err={:.3e}\n", fk.name, c.name,
               c.rows.empty() ? c.in.tokens : static_cast<int64_t>(c.rows.size()), err);
  }
  EXPECT_EQ(layer->read_error_flags(), 0u);
  const DeviceInputs d = to_device(p, cases[3].in);  // T = 4096
  const uint64_t h = hash_bits(run_on_gpu(*layer, d));
  for (int rep = 0; rep < 20; ++rep) ASSERT_EQ(hash_bits(run_on_gpu(*layer, d)), h) << "rerun " << rep;
}

INSTANTIATE_TEST_SUITE_P(Kernels, Sm90WgmmaFlashLayer,
                         ::testing::Values(FlashKernel{"wgmma", GemmKernel::kWgmma, Recipe::kMxfp4},
                                           FlashKernel{"wgmma_bf16", GemmKernel::kWgmmaBf16, Recipe::kMxfp4},
                                           FlashKernel{"wgmma_rs", GemmKernel::kWgmmaRs, Recipe::kMxfp4},
                                           FlashKernel{"nvfp4_wgmma", GemmKernel::kWgmma, Recipe::kNvfp4}),
                         [](const ::testing::TestParamInfo<FlashKernel>& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace moe_ep::cudatest
