// Heavy-tailed MXFP4 weights (Student-t, outlier columns, rows of zero blocks; see
// heavy_tailed_weights in tests/python/gen_checkpoints.py): W13 mixes rows inside and outside the
// FP8 window of docs/spec.md §5 in one tensor, W2 stays inside. The window statistics must match the
// numpy count, the rows inside must fold into e4m3 exactly, and the layer must still compute
// bitwise like the in-memory one (the block-scale path is exact for any spread).
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "checkpoint/checkpoint_test_data.h"
#include "core/weight_prep.h"
#include "moe_ep/checkpoint.h"
#include "moe_ep/formats.h"
#include "moe_ep/layer.h"
#include "moe_ep/quant.h"
#include "support/layer_problem.h"

namespace moe_ep {
namespace {

std::unique_ptr<CheckpointLayer> heavy_layer() {
  return load_checkpoint_layer(Checkpoint::open(testckpt::checkpoint_dir("heavy_tailed")), 1);
}

TEST(CheckpointHeavyTailed, WindowStatisticsMatchTheNumpyCount) {
  const auto layer = heavy_layer();
  const Fp8WindowReport r = analyze_fp8_window(*layer, 2);
  const auto& want = testckpt::manifest().at("heavy_tailed_window");
  EXPECT_EQ(r.w13_rows, want.at("w13_rows").get<int64_t>());
  EXPECT_EQ(r.w13_rows_inside, want.at("w13_rows_inside").get<int64_t>());
  EXPECT_EQ(r.w2_rows, want.at("w2_rows").get<int64_t>());
  EXPECT_EQ(r.w2_rows_inside, want.at("w2_rows_inside").get<int64_t>());
  EXPECT_EQ(r.max_row_span, want.at("max_row_span").get<int>());
  EXPECT_EQ(r.span_histogram, want.at("span_histogram").get<std::vector<int64_t>>());
  EXPECT_EQ(r.rows, r.w13_rows + r.w2_rows);
  EXPECT_EQ(r.rows_inside, r.w13_rows_inside + r.w2_rows_inside);

  // Both paths inside one tensor: W13 has rows inside and outside, W2 only inside.
  EXPECT_GT(r.w13_rows_inside, 0);
  EXPECT_LT(r.w13_rows_inside, r.w13_rows);
  EXPECT_EQ(r.w2_rows_inside, r.w2_rows);
  EXPECT_GT(r.experts_inside, 0);
  EXPECT_LT(r.experts_inside, r.experts);
  EXPECT_GT(r.max_row_span, Fp8WindowReport::kMaxSpan);

  // The ordinary Gaussian layer is entirely inside.
  const auto plain = load_checkpoint_layer(Checkpoint::open(testckpt::checkpoint_dir("mxfp4_per_expert")), 1);
  const Fp8WindowReport p = analyze_fp8_window(*plain);
  EXPECT_EQ(p.rows_inside, p.rows);
  EXPECT_EQ(p.span_histogram,
            testckpt::manifest().at("mx_l1_window").at("span_histogram").get<std::vector<int64_t>>());
}

// A row inside the window folds to e4m3 exactly: element * 2^(byte - lo - 8) with byte - lo in
// [0, 14] is e2m1 * 2^k, k in [-8, 6].
TEST(CheckpointHeavyTailed, RowsInsideTheWindowFoldIntoE4m3Exactly) {
  const auto layer = heavy_layer();
  const WeightPack p = layer->pack();
  struct Tensor {
    const TensorView *packed, *scales;
    int64_t rows, k;
  } tensors[] = {{&p.w13, &p.w13_scale, layer->num_experts * 2 * layer->intermediate_size, layer->hidden_size},
                 {&p.w2, &p.w2_scale, layer->num_experts * layer->hidden_size, layer->intermediate_size}};
  int64_t rows_inside = 0, rows_outside = 0, inexact = 0;
  for (const Tensor& t : tensors) {
    for (int64_t r = 0; r < t.rows; ++r) {
      const uint8_t* row = t.packed->ptr<uint8_t>() + r * t.k / 2;
      const uint8_t* scales = t.scales->ptr<uint8_t>() + r * t.k / kMxBlock;
      const Mxfp4RowExponents ex = mxfp4_row_exponents(row, scales, t.k);
      if (ex.hi >= 0 && ex.hi - ex.lo > Fp8WindowReport::kMaxSpan) {
        ++rows_outside;
        continue;
      }
      ++rows_inside;
      for (int64_t i = 0; i < t.k; ++i) {
        const float v = e2m1_to_float(unpack_e2m1(row[i / 2], i));
        const float folded = std::ldexp(v, scales[i / kMxBlock] - ex.lo - 8);
        inexact += e4m3_to_float(float_to_e4m3(folded)) != folded;
      }
    }
  }
  EXPECT_EQ(inexact, 0);
  EXPECT_GT(rows_inside, 0);
  EXPECT_GT(rows_outside, 0);
}

TEST(CheckpointHeavyTailed, LayerComputesLikeTheInMemoryLayerAndReportsTheWindow) {
  const auto layer = heavy_layer();
  const testckpt::RefLayer ref = testckpt::ref_layer("heavy_l1", WeightFormat::kMXFP4);
  testsupport::Problem p;
  p.num_experts = ref.E;
  p.hidden = ref.H;
  p.intermediate = ref.I;
  p.top_k = 2;
  p.max_tokens = 32;
  p.clamp = std::nullopt;  // the outlier rows must reach y unclamped
  auto runtime = testsupport::cpu_runtime();
  auto a = Layer::create(runtime, p.desc(), layer->pack(), p.overrides);
  auto b = Layer::create(runtime, p.desc(), ref.pack(), p.overrides);
  const testsupport::Inputs in = testsupport::random_inputs(p, 32, 7);
  const auto ya = testsupport::run_forward(*a, p, in);
  EXPECT_TRUE(ya.values() == testsupport::run_forward(*b, p, in).values());
  bool finite = true;
  for (uint16_t v : ya.values()) finite &= std::isfinite(bf16_to_float(v));
  EXPECT_TRUE(finite);

  const Fp8WindowReport r = analyze_fp8_window(*layer);
  const std::string notes = a->info().notes;
  EXPECT_NE(notes.find(fmt::format("{}/{} rows", r.rows_inside, r.rows)), std::string::npos) << notes;
}

}  // namespace
}  // namespace moe_ep
