// Round trips: weights quantized by the independent numpy quantizer, written in each layout by
// the safetensors package, loaded here, must give the same WeightPack bytes and a bitwise
// identical CPU forward as the layer built from the same weights in memory (ref/*.npy).
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <cmath>
#include <cstring>

#include "checkpoint/checkpoint_test_data.h"
#include "moe_ep/checkpoint.h"
#include "moe_ep/error.h"
#include "moe_ep/formats.h"
#include "moe_ep/layer.h"
#include "moe_ep/quant.h"
#include "moe_ep/shared_expert.h"
#include "support/layer_problem.h"

namespace moe_ep {
namespace {

using testckpt::bytes_of;
using testckpt::expect_same_forward;
using testckpt::expect_same_pack;
using testckpt::RefLayer;

struct LayoutCase {
  const char* checkpoint;
  int64_t layer;
  const char* ref;
  WeightFormat format;
  const char* layout;
  const char* pattern = "";
  std::vector<std::string> proj_names = {};
};

void PrintTo(const LayoutCase& c, std::ostream* os) {
  *os << c.checkpoint << " layer " << c.layer << " vs ref " << c.ref;
}

class CheckpointLayout : public ::testing::TestWithParam<LayoutCase> {};

TEST_P(CheckpointLayout, LoadsTheSameWeightsAndForwardIsBitwiseEqual) {
  const LayoutCase& c = GetParam();
  auto ck = Checkpoint::open(testckpt::checkpoint_dir(c.checkpoint));
  LayerLoadOptions o;
  o.tensor_pattern = c.pattern;
  o.proj_names = c.proj_names;
  o.num_threads = 3;
  const auto layer = load_checkpoint_layer(ck, c.layer, o);
  const RefLayer ref = testckpt::ref_layer(c.ref, c.format);
  const std::string what = fmt::format("{} layer {}", c.checkpoint, c.layer);
  EXPECT_EQ(layer->format, c.format) << what;
  EXPECT_EQ(layer->layout, c.layout) << what;
  EXPECT_EQ(layer->num_experts, ref.E);
  EXPECT_EQ(layer->hidden_size, ref.H);
  EXPECT_EQ(layer->intermediate_size, ref.I);
  EXPECT_GT(layer->stats.checkpoint_bytes, layer->pack_bytes() - 1);
  EXPECT_GT(layer->stats.gbps(), 0.0);
  expect_same_pack(layer->pack(), ref.pack(), what);
  expect_same_forward(layer->pack(), ref.pack(), c.format == WeightFormat::kNVFP4 ? Recipe::kNvfp4 : Recipe::kMxfp4, what);
}

INSTANTIATE_TEST_SUITE_P(
    All, CheckpointLayout,
    ::testing::Values(
        LayoutCase{"mxfp4_per_expert", 1, "mx_l1", WeightFormat::kMXFP4, "per-expert"},
        LayoutCase{"mxfp4_per_expert", 2, "mx_l2", WeightFormat::kMXFP4, "per-expert"},
        LayoutCase{"mxfp4_fused_sharded", 1, "mx_l1", WeightFormat::kMXFP4, "fused"},
        LayoutCase{"mxfp4_fused_sharded", 2, "mx_l2", WeightFormat::kMXFP4, "fused"},
        LayoutCase{"nvfp4_per_expert_sharded", 1, "nv_l1", WeightFormat::kNVFP4, "per-expert"},
        LayoutCase{"nvfp4_fused", 1, "nv_l1", WeightFormat::kNVFP4, "fused"},
        LayoutCase{"pattern_no_config", 1, "mx_l1", WeightFormat::kMXFP4, "per-expert",
                   "model.layers.{L}.block_sparse_moe.experts.{e}.{proj}.weight", {"w1", "w3", "w2"}},
        LayoutCase{"heavy_tailed", 1, "heavy_l1", WeightFormat::kMXFP4, "per-expert"}),
    [](const auto& info) {
      return fmt::format("{}_layer{}", info.param.checkpoint, info.param.layer);
    });

// The bytes mean what docs/spec.md §5 says: element 2j in the low nibble, E8M0 2^(b-127) per 32
// (MXFP4), e4m3 per 16 (NVFP4); compared with the numpy decoder's values, bit for bit.
TEST(CheckpointLayouts, DecodedValuesMatchTheIndependentDecoder) {
  {
    auto layer = load_checkpoint_layer(Checkpoint::open(testckpt::checkpoint_dir("mxfp4_per_expert")), 1);
    const WeightPack p = layer->pack();
    const int64_t rows = layer->num_experts * 2 * layer->intermediate_size, k = layer->hidden_size;
    std::vector<float> got(static_cast<size_t>(rows * k));
    dequantize_mxfp4(p.w13.ptr<uint8_t>(), p.w13_scale.ptr<uint8_t>(), rows, k, got.data());
    EXPECT_EQ(std::memcmp(got.data(), testckpt::ref_array<float>("mx_l1", "w13_deq").data(),
                          got.size() * 4), 0);
  }
  {
    auto layer = load_checkpoint_layer(Checkpoint::open(testckpt::checkpoint_dir("nvfp4_fused")), 1);
    const WeightPack p = layer->pack();
    const std::vector<float> want = testckpt::ref_array<float>("nv_l1", "w2_deq");
    const int64_t n = p.w2.numel() * 2;
    ASSERT_EQ(static_cast<size_t>(n), want.size());
    int64_t bad = 0;
    for (int64_t i = 0; i < n; ++i) {
      const float v = e2m1_to_float(unpack_e2m1(p.w2.ptr<uint8_t>()[i / 2], i)) *
                      e4m3_to_float(p.w2_scale.ptr<uint8_t>()[i / kNvBlock]);
      bad += std::memcmp(&v, &want[i], 4) != 0;
    }
    EXPECT_EQ(bad, 0);
  }
}

// The numpy quantizer and the library's agree byte for byte on the same fp32 weights, so the
// in-memory reference layer is also the one the library would build from those weights.
TEST(CheckpointLayouts, IndependentQuantizerAgreesWithTheLibrary) {
  const RefLayer mx = testckpt::ref_layer("mx_l1", WeightFormat::kMXFP4);
  const std::vector<float> src = testckpt::ref_array<float>("mx_l1", "w13_src");
  std::vector<uint8_t> packed(mx.w13.size()), scales(mx.w13_scale.size());
  quantize_mxfp4(src.data(), mx.E * 2 * mx.I, mx.H, packed.data(), scales.data());
  EXPECT_TRUE(packed == mx.w13);
  EXPECT_TRUE(scales == mx.w13_scale);

  const RefLayer nv = testckpt::ref_layer("nv_l1", WeightFormat::kNVFP4);
  const std::vector<float> nsrc = testckpt::ref_array<float>("nv_l1", "w13_src");
  const std::vector<float> g13 = testckpt::ref_array<float>("nv_l1", "g13");
  const int64_t half = nv.I * nv.H;
  int64_t bad_experts = 0;
  for (int64_t e = 0; e < nv.E; ++e)
    for (int h = 0; h < 2; ++h) {
      std::vector<uint8_t> q(half / 2), s(half / kNvBlock);
      quantize_nvfp4(nsrc.data() + (2 * e + h) * half, nv.I, nv.H, g13[2 * e + h], q.data(), s.data());
      bad_experts += std::memcmp(q.data(), nv.w13.data() + (2 * e + h) * half / 2, q.size()) != 0 ||
                     std::memcmp(s.data(), nv.w13_scale.data() + (2 * e + h) * half / kNvBlock, s.size()) != 0;
    }
  EXPECT_EQ(bad_experts, 0);
}

TEST(CheckpointLayouts, RouterAndSharedExpertAreLoaded) {
  auto ck = Checkpoint::open(testckpt::checkpoint_dir("mxfp4_per_expert"));
  const int64_t shared_i = testckpt::manifest().at("shared_intermediate");
  for (const auto& [layer_idx, ref, fp8] : {std::tuple{1, "mx_l1", true}, std::tuple{2, "mx_l2", false}}) {
    const auto layer = load_checkpoint_layer(ck, layer_idx);
    EXPECT_TRUE(layer->router.weight == testckpt::ref_array<float>(ref, "router_w")) << ref;
    EXPECT_TRUE(layer->router.bias == testckpt::ref_array<float>(ref, "router_b")) << ref;
    EXPECT_EQ(layer->shared_intermediate_size, shared_i);
    // FP8 e4m3 with [64, 32] block scales (partial row blocks) dequantized to bf16 on load.
    EXPECT_TRUE(layer->shared_w13 == testckpt::ref_array<uint16_t>(ref, "shared_w13")) << ref << " fp8 " << fp8;
    EXPECT_TRUE(layer->shared_w2 == testckpt::ref_array<uint16_t>(ref, "shared_w2")) << ref << " fp8 " << fp8;
    const int64_t H = layer->hidden_size;
    auto shared = SharedExpert::create(
        H, shared_i, 10.0f,
        TensorView::contiguous(const_cast<uint16_t*>(layer->shared_w13.data()), DType::kBF16, {2 * shared_i, H}),
        TensorView::contiguous(const_cast<uint16_t*>(layer->shared_w2.data()), DType::kBF16, {H, shared_i}));
    EXPECT_EQ(shared->intermediate_size(), shared_i);
    // with_shared_expert(): the pack of a layer that runs it; y is the routed layer's, then add_to.
    const WeightPack full = layer->with_shared_expert();
    EXPECT_EQ(full.shared_w13.data, layer->shared_w13.data());
    EXPECT_EQ(full.shared_w2.shape[1], shared_i);
    EXPECT_FALSE(layer->pack().shared_w13.defined());  // pack() stays the routed experts
    MoeDesc desc;
    desc.fleet = {layer->num_experts, 8, H};
    desc.intermediate_size = layer->intermediate_size;
    desc.top_k = 2;
    desc.activation_clamp = 10.0f;
    auto routed = Layer::create(testsupport::cpu_runtime(), desc, layer->pack());
    desc.shared_intermediate_size = shared_i;
    auto whole = Layer::create(testsupport::cpu_runtime(), desc, full);
    std::vector<uint16_t> x(5 * H), y(5 * H), want(5 * H);
    for (size_t i = 0; i < x.size(); ++i) x[i] = float_to_bf16(static_cast<float>(static_cast<int>(i * 7 % 13) - 6) / 4.0f);
    std::vector<int32_t> ids = {0, 1, 2, 3, -1, -1, 5, 6, 7, 0};
    std::vector<float> w = {0.5f, 0.25f, 1.0f, 0.75f, 0.5f, 0.5f, 0.125f, 1.0f, 0.5f, 0.5f};
    auto args = [&](std::vector<uint16_t>& out) {
      ForwardArgs a;
      a.x = TensorView::contiguous(x.data(), DType::kBF16, {5, H});
      a.topk_ids = TensorView::contiguous(ids.data(), DType::kI32, {5, 2});
      a.topk_weights = TensorView::contiguous(w.data(), DType::kF32, {5, 2});
      a.y = TensorView::contiguous(out.data(), DType::kBF16, {5, H});
      return a;
    };
    routed->forward(args(want));
    shared->add_to(args(want).x, args(want).y);
    whole->forward(args(y));
    EXPECT_EQ(y, want) << ref;
  }
  // The sharded fused copy holds the same router and shared expert.
  auto fused = load_checkpoint_layer(Checkpoint::open(testckpt::checkpoint_dir("mxfp4_fused_sharded")), 1);
  EXPECT_TRUE(fused->shared_w13 == testckpt::ref_array<uint16_t>("mx_l1", "shared_w13"));
}

TEST(CheckpointLayouts, FusedWeightsAreViewsIntoTheMapping) {
  auto ck = Checkpoint::open(testckpt::checkpoint_dir("mxfp4_fused_sharded"));
  LayerLoadOptions o;
  o.first_expert = 2;
  o.num_experts = 4;
  const auto layer = load_checkpoint_layer(ck, 1, o);
  const CheckpointTensor& w13 = ck->get("model.layers.1.mlp.experts.w13_weight", "test");
  const int64_t per_expert = w13.nbytes / w13.shape[0];
  EXPECT_EQ(layer->pack().w13.data, w13.data + 2 * per_expert);  // no copy
  EXPECT_EQ(layer->pack().w13.shape[0], 4);
  const RefLayer ref = testckpt::ref_layer("mx_l1", WeightFormat::kMXFP4);
  EXPECT_EQ(std::memcmp(layer->pack().w13.data, ref.w13.data() + 2 * per_expert, 4 * per_expert), 0);
  // The same slice of the per-expert layout (stacked into owned buffers).
  auto per = load_checkpoint_layer(Checkpoint::open(testckpt::checkpoint_dir("mxfp4_per_expert")), 1, o);
  expect_same_pack(per->pack(), layer->pack(), "experts [2, 6)");
}

TEST(CheckpointLayouts, ShardedCheckpointListsEveryTensorOnce) {
  auto ck = Checkpoint::open(testckpt::checkpoint_dir("mxfp4_fused_sharded"));
  EXPECT_EQ(ck->files().size(), 3u);
  int64_t in_files = 0;
  for (const auto& f : ck->files()) in_files += static_cast<int64_t>(f->tensors().size());
  EXPECT_EQ(static_cast<int64_t>(ck->tensor_names().size()), in_files);
  ASSERT_TRUE(ck->config().has_value());
  EXPECT_EQ(ck->config()->n_routed_experts, 8);
  EXPECT_EQ(ck->config()->first_k_dense_replace, 1);
  EXPECT_FLOAT_EQ(ck->config()->routed_scaling_factor, 2.5f);
  EXPECT_EQ(ck->config()->quant_method, "mxfp4");
  EXPECT_EQ(ck->config()->fp8_block_n, 64);
  EXPECT_EQ(ck->config()->fp8_block_k, 32);
}

TEST(CheckpointLayouts, FindsTheMoeLayers) {
  EXPECT_EQ(find_moe_layers(*Checkpoint::open(testckpt::checkpoint_dir("mxfp4_per_expert"))),
            (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(find_moe_layers(*Checkpoint::open(testckpt::checkpoint_dir("mxfp4_fused_sharded"))),
            (std::vector<int64_t>{1, 2}));
  LayerLoadOptions o;
  o.tensor_pattern = "model.layers.{L}.block_sparse_moe.experts.{e}.{proj}.weight";
  o.proj_names = {"w1", "w3", "w2"};
  EXPECT_EQ(find_moe_layers(*Checkpoint::open(testckpt::checkpoint_dir("pattern_no_config")), o),
            (std::vector<int64_t>{1}));
}

std::string load_error(const std::string& checkpoint, int64_t layer, const LayerLoadOptions& o) {
  try {
    load_checkpoint_layer(Checkpoint::open(testckpt::checkpoint_dir(checkpoint)), layer, o);
  } catch (const Error& e) {
    return e.message();
  }
  return "no error";
}

void expect_error(const std::string& checkpoint, int64_t layer, const LayerLoadOptions& o,
                  const std::vector<std::string>& parts) {
  const std::string message = load_error(checkpoint, layer, o);
  for (const std::string& part : parts)
    EXPECT_NE(message.find(part), std::string::npos)
        << checkpoint << " layer " << layer << ": the error lacks \"" << part << "\"\n  error: " << message;
}

TEST(CheckpointLayouts, LayoutMismatchesAreNamed) {
  LayerLoadOptions o;
  expect_error("mxfp4_per_expert", 0, o,
               {"layer 0: no routed-expert weights", "model.layers.0.mlp.experts.0.gate_proj.weight",
                "model.layers.0.mlp.experts.w13_weight"});
  expect_error("pattern_no_config", 1, o, {"no routed-expert weights", "--tensor-pattern"});

  o.layout = "fused";
  expect_error("mxfp4_per_expert", 1, o, {"tensor 'model.layers.1.mlp.experts.w13_weight'", "is missing"});
  o.layout = "stacked";
  expect_error("mxfp4_per_expert", 1, o, {"layout 'stacked' is unknown", "auto, per-expert, deepseek-v4, deepseek-v4-hf, compressed-tensors, fused, transformers, gpt-oss"});

  o = {};
  o.tensor_pattern = "model.layers.{L}.mlp.experts.{e}.weight";
  expect_error("mxfp4_per_expert", 1, o, {"expected the placeholders {L} and {proj}"});
  o.tensor_pattern = "model.layers.{layer}.mlp.experts.{e}.{proj}.weight";
  expect_error("mxfp4_per_expert", 1, o, {"placeholder '{layer}' is unknown"});
  o.tensor_pattern = "model.layers.{L}.mlp.experts.{e}.{proj}.scales";
  expect_error("mxfp4_per_expert", 1, o, {"ending in 'weight'"});
  o.tensor_pattern = "model.layers.{L}.mlp.experts.{e}.{proj}.weight";
  o.proj_names = {"w1", "w2"};
  expect_error("mxfp4_per_expert", 1, o, {"expected 3 projection names", "got 2"});

  o = {};
  o.shape = ExpertShapeOverride{8, 128, 64};
  expect_error("mxfp4_per_expert", 1, o,
               {"mxfp4_per_expert/model.safetensors: tensor 'model.layers.1.mlp.experts.0.gate_proj.weight'",
                "shape [128, 64]; expected [I, H/2]", "= [64, 64]"});
  o = {};
  o.first_expert = 6;
  o.num_experts = 4;
  expect_error("mxfp4_per_expert", 1, o, {"experts [6, 10) of layer 1 are outside [0, E = 8)"});
  o = {};
  expect_error("mxfp4_per_expert", 3, o, {"layer 3 is outside [0, 3)", "config.json"});
}

}  // namespace
}  // namespace moe_ep
