// The layouts model families ship (tests/python/gen_checkpoints.py, write_model_layouts): DeepSeek
// V4's own files, transformers' conversion of them, ModelOpt NVFP4 with an NVFP4 shared expert,
// Qwen3-MoE, compressed-tensors; each loads the weights the independent numpy writer put there
// (bytes, dequantized shared experts, router tables) and runs bitwise like the layer built from
// them in memory; gpt-oss and integer compressed-tensors are refused with their reasons; and
// config.json keys no layout reads are ignored, not refused.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>

#include "checkpoint/checkpoint_test_data.h"
#include "moe_ep/checkpoint.h"
#include "moe_ep/error.h"
#include "moe_ep/formats.h"
#include "moe_ep/router.h"

namespace moe_ep {
namespace {

using testckpt::expect_same_forward;
using testckpt::expect_same_pack;

std::unique_ptr<CheckpointLayer> load(const std::string& name, int64_t layer, LayerLoadOptions o = {}) {
  return load_checkpoint_layer(Checkpoint::open(testckpt::checkpoint_dir(name)), layer, o);
}

std::vector<int32_t> table_of(const std::string& ref) {
  const std::vector<int64_t> t = testckpt::ref_array<int64_t>(ref, "tid2eid");
  return std::vector<int32_t>(t.begin(), t.end());
}

// The shared expert and router of `layer` are the writer's.
void expect_aux(const CheckpointLayer& layer, const std::string& ref, bool bias) {
  EXPECT_EQ(layer.shared_intermediate_size, testckpt::manifest().at("shared_intermediate").get<int64_t>()) << ref;
  EXPECT_TRUE(layer.shared_w13 == testckpt::ref_array<uint16_t>(ref, "shared_w13")) << ref;
  EXPECT_TRUE(layer.shared_w2 == testckpt::ref_array<uint16_t>(ref, "shared_w2")) << ref;
  EXPECT_TRUE(layer.router.present()) << ref;
  EXPECT_TRUE(layer.router.weight == testckpt::ref_array<float>(ref, "router_w")) << ref;
  if (bias)
    EXPECT_TRUE(layer.router.bias == testckpt::ref_array<float>(ref, "router_b")) << ref;
  else
    EXPECT_TRUE(layer.router.bias.empty()) << ref;
}

TEST(CheckpointModelLayouts, DeepSeekV4OwnFilesLoadWithoutFlags) {
  auto ck = Checkpoint::open(testckpt::checkpoint_dir("deepseek_v4_native"));
  EXPECT_EQ(find_moe_layers(*ck), (std::vector<int64_t>{0, 1}));
  for (int64_t l : {0, 1}) {
    const std::string ref = fmt::format("ds_l{}", l);
    const auto layer = load_checkpoint_layer(ck, l);
    EXPECT_EQ(layer->layout, "deepseek-v4");
    EXPECT_EQ(layer->format, WeightFormat::kMXFP4);
    EXPECT_EQ(layer->tensor_pattern, fmt::format("layers.{}.ffn.experts.{{e}}.{{proj}}.weight", l));
    // I8 weights and .scale E8M0, stacked as the library's MXFP4 pack.
    const testckpt::RefLayer want = testckpt::ref_layer(ref, WeightFormat::kMXFP4);
    expect_same_pack(layer->pack(), want.pack(), ref);
    expect_same_forward(layer->pack(), want.pack(), Recipe::kMxfp4, ref);
    // FP8 shared expert with E8M0 block scales: e4m3 * 2^(b-127) is exact in bf16.
    expect_aux(*layer, ref, /*bias=*/l == 1);
    EXPECT_NE(layer->shared_source.find("F8_E8M0"), std::string::npos) << layer->shared_source;
    EXPECT_EQ(layer->router.routed_scaling_factor, 1.5f);
    EXPECT_EQ(layer->router.scoring_func, "sqrtsoftplus");
    EXPECT_EQ(layer->router.unsupported_reason(2, "deepseek_v4"), "");
  }
  const auto hash = load_checkpoint_layer(ck, 0);
  EXPECT_TRUE(hash->router.hash_layer());
  EXPECT_EQ(hash->router.config_hash_layer, std::optional<bool>(true));  // num_hash_layers 1
  EXPECT_EQ(hash->router.vocab_size, testckpt::manifest().at("vocab").get<int64_t>());
  EXPECT_TRUE(hash->router.hash_table == table_of("ds_l0"));
  EXPECT_EQ(hash->router.config(2).num_hash_layers, 1);
  EXPECT_FALSE(load_checkpoint_layer(ck, 1)->router.hash_layer());
  // The same tensors named by a user pattern.
  LayerLoadOptions o;
  o.tensor_pattern = "layers.{L}.ffn.experts.{e}.{proj}.weight";
  o.proj_names = {"w1", "w3", "w2"};
  expect_same_pack(load_checkpoint_layer(ck, 1, o)->pack(), testckpt::ref_layer("ds_l1", WeightFormat::kMXFP4).pack(),
                   "pattern");
}

TEST(CheckpointModelLayouts, TransformersFusedBf16ExpertsLoadForTheLayerToQuantize) {
  auto ck = Checkpoint::open(testckpt::checkpoint_dir("transformers_deepseek_v4"));
  EXPECT_EQ(find_moe_layers(*ck), (std::vector<int64_t>{0, 1}));
  for (int64_t l : {0, 1}) {
    const std::string ref = fmt::format("tf_l{}", l);
    const auto layer = load_checkpoint_layer(ck, l);
    EXPECT_EQ(layer->layout, "transformers");
    EXPECT_EQ(layer->format, WeightFormat::kBF16);
    std::vector<uint16_t> w13 = testckpt::ref_array<uint16_t>(ref, "w13");
    std::vector<uint16_t> w2 = testckpt::ref_array<uint16_t>(ref, "w2");
    const int64_t E = layer->num_experts, H = layer->hidden_size, I = layer->intermediate_size;
    WeightPack want;
    want.format = WeightFormat::kBF16;
    want.w13 = TensorView::contiguous(w13.data(), DType::kBF16, {E, 2 * I, H});
    want.w2 = TensorView::contiguous(w2.data(), DType::kBF16, {E, H, I});
    expect_same_pack(layer->pack(), want, ref);
    // The library's quantizer, to either recipe, as for the same weights in memory.
    expect_same_forward(layer->pack(), want, Recipe::kMxfp4, ref + " mxfp4");
    expect_same_forward(layer->pack(), want, Recipe::kNvfp4, ref + " nvfp4");
    expect_aux(*layer, ref, /*bias=*/l == 1);
    // mlp_layer_types ["hash_moe", "moe"] and the tensors agree.
    EXPECT_EQ(layer->router.config_hash_layer, std::optional<bool>(l == 0));
    EXPECT_EQ(layer->router.hash_layer(), l == 0);
    EXPECT_EQ(layer->router.unsupported_reason(2, "deepseek_v4"), "");
  }
  EXPECT_TRUE(load_checkpoint_layer(ck, 0)->router.hash_table == table_of("tf_l0"));
  // An EP rank's slice of the fused tensors.
  LayerLoadOptions o;
  o.first_expert = 3;
  o.num_experts = 2;
  const auto slice = load_checkpoint_layer(ck, 1, o);
  const std::vector<uint16_t> all = testckpt::ref_array<uint16_t>("tf_l1", "w2");
  const int64_t per = slice->hidden_size * slice->intermediate_size;
  EXPECT_EQ(std::memcmp(slice->pack().w2.data, all.data() + 3 * per, 2 * per * 2), 0);
}

TEST(CheckpointModelLayouts, ModelOptNvfp4SharedExpertIsDequantizedOrLeftOut) {
  const auto layer = load("nvfp4_shared_nvfp4", 1);
  EXPECT_EQ(layer->format, WeightFormat::kNVFP4);
  const testckpt::RefLayer want = testckpt::ref_layer("nvs_l1", WeightFormat::kNVFP4);
  expect_same_pack(layer->pack(), want.pack(), "nvs_l1");
  // bf16(fp32(e2m1 * e4m3) * weight_scale_2), by the numpy writer.
  expect_aux(*layer, "nvs_l1", true);
  EXPECT_NE(layer->shared_source.find("NVFP4"), std::string::npos);
  LayerLoadOptions o;
  o.shared_expert = false;
  const auto without = load("nvfp4_shared_nvfp4", 1, o);
  EXPECT_EQ(without->shared_intermediate_size, 0);
  EXPECT_TRUE(without->shared_w13.empty());
  EXPECT_TRUE(std::any_of(without->notes.begin(), without->notes.end(),
                          [](const std::string& n) { return n.find("left out") != std::string::npos; }));
  expect_same_pack(without->pack(), want.pack(), "without the shared expert");
}

TEST(CheckpointModelLayouts, Qwen3MoeNumExpertsAndCompressedTensorsNvfp4Load) {
  const testckpt::RefLayer nv = testckpt::ref_layer("nv_l1", WeightFormat::kNVFP4);
  const auto qwen = load("qwen3_moe_nvfp4", 1);
  EXPECT_EQ(qwen->total_experts, 8);  // config.json's num_experts
  expect_same_pack(qwen->pack(), nv.pack(), "qwen3");
  EXPECT_TRUE(qwen->router.present());
  EXPECT_TRUE(qwen->router.bias.empty());
  EXPECT_NE(qwen->router.unsupported_reason(2, "qwen3_moe").find("no scoring_func"), std::string::npos);
  // compressed-tensors stores g = 1 / weight_scale_2: the writer's weight_scale_2 is fp32(1 / g).
  const auto ct = load("compressed_tensors_nvfp4", 1);
  EXPECT_EQ(ct->layout, "compressed-tensors");
  expect_same_pack(ct->pack(), nv.pack(), "compressed-tensors");
  expect_same_forward(ct->pack(), nv.pack(), Recipe::kNvfp4, "compressed-tensors");
  EXPECT_NEAR(ct->input_scales[0], 0.5f, 0.0f);  // 1 / input_global_scale
}

TEST(CheckpointModelLayouts, UnusedConfigKeysAreIgnoredNotRefused) {
  auto ck = Checkpoint::open(testckpt::checkpoint_dir("block_size_number"));
  ASSERT_TRUE(ck->config());
  const ModelConfig::IgnoredKey* k = ck->config()->ignored_key("quantization_config.weight_block_size");
  ASSERT_NE(k, nullptr);
  EXPECT_EQ(k->value, "128");
  expect_same_pack(load_checkpoint_layer(ck, 1)->pack(), testckpt::ref_layer("mx_l2", WeightFormat::kMXFP4).pack(),
                   "block_size_number");

  const std::string base = R"("hidden_size":64,"moe_intermediate_size":32,"num_experts":8,"num_experts_per_tok":2)";
  const ModelConfig c = parse_model_config(
      "{" + base + R"(,"quantization_config":"fp8","mlp_layer_types":"hash","scoring_func":3,"vocab_size":-1,"n_shared_experts":"one"})",
      "cfg.json");
  EXPECT_EQ(c.n_routed_experts, 8);
  for (const char* key : {"quantization_config", "mlp_layer_types", "scoring_func", "vocab_size", "n_shared_experts"})
    EXPECT_NE(c.ignored_key(key), nullptr) << key;
  EXPECT_EQ(c.ignored.size(), 5u);
  const ModelConfig types = parse_model_config("{" + base + R"(,"mlp_layer_types":["hash_moe","moe","moe"]})", "c");
  EXPECT_EQ(types.is_hash_layer(0), std::optional<bool>(true));
  EXPECT_EQ(types.is_hash_layer(1), std::optional<bool>(false));
  EXPECT_EQ(types.is_hash_layer(5), std::nullopt);
  EXPECT_EQ(parse_model_config("{" + base + R"(,"num_hash_layers":3})", "c").is_hash_layer(2), std::optional<bool>(true));
  EXPECT_EQ(parse_model_config("{" + base + "}", "c").is_hash_layer(0), std::nullopt);
}

void expect_refused(const std::string& dir, ErrorCode code, const std::vector<std::string>& parts) {
  std::string message = "no error";
  try {
    load_checkpoint_layer(Checkpoint::open(dir), 1, {});
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
    message = e.message();
  }
  for (const std::string& part : parts)
    EXPECT_NE(message.find(part), std::string::npos) << dir << ": the error lacks \"" << part << "\"\n  error: " << message;
}

TEST(CheckpointModelLayouts, LayoutsTheLayerCannotComputeAreRefusedWithTheReason) {
  auto gpt = Checkpoint::open(testckpt::refused_dir("gpt_oss"));
  EXPECT_EQ(find_moe_layers(*gpt), (std::vector<int64_t>{1}));  // found, never "not found"
  expect_refused(testckpt::refused_dir("gpt_oss"), ErrorCode::kUnsupported,
                 {"gate_up_proj_blocks", "gpt-oss", "sigmoid(1.702 * gate) * (up + 1)",
                  "'model.layers.1.mlp.experts.gate_up_proj_bias'", "'model.layers.1.mlp.experts.down_proj_bias'"});
  expect_refused(testckpt::refused_dir("compressed_tensors_int4"), ErrorCode::kUnsupported,
                 {"weight_packed'", "dtype I32", "pack-quantized"});
  // Projection names that do not fit a named layout are refused, not dropped.
  LayerLoadOptions o;
  o.layout = "deepseek-v4";
  o.proj_names = {"gate", "down"};
  std::string message = "no error";
  try {
    load_checkpoint_layer(Checkpoint::open(testckpt::checkpoint_dir("deepseek_v4_native")), 1, o);
  } catch (const Error& e) {
    message = e.message();
  }
  EXPECT_NE(message.find("layout 'deepseek-v4' has 3 projections (w1, w3, w2); 2 projection names given"),
            std::string::npos) << message;
  // A missing shared-expert tensor names the flag that loads the layer without it.
  expect_refused(testckpt::bad_dir("fp8_shared_block_size_number"), ErrorCode::kInvalidArgument,
                 {"quantization_config.weight_block_size is 128", "--no-shared-expert"});
}

// The checkpoint's router through route_deepseek_v4 equals a float64 evaluation of the recipe of
// include/moe_ep/router.h (ids by s + bias, weights s / sum * scale), and a hash layer's ids are
// its table's rows.
TEST(CheckpointModelLayouts, CheckpointRouterRoutesByItsTables) {
  auto ck = Checkpoint::open(testckpt::checkpoint_dir("deepseek_v4_native"));
  for (int64_t l : {0, 1}) {
    const auto layer = load_checkpoint_layer(ck, l);
    const CheckpointRouter& r = layer->router;
    const int64_t T = 33, E = r.num_experts, K = 2;
    std::mt19937 rng(7 + l);
    std::normal_distribution<float> n01;
    std::vector<float> logits(T * E);
    for (float& v : logits) v = n01(rng);
    std::vector<int32_t> tokens(T), ids(T * K);
    std::vector<float> weights(T * K);
    RouterArgs a;
    a.logits = TensorView::contiguous(logits.data(), DType::kF32, {T, E});
    if (!r.bias.empty()) a.bias = TensorView::contiguous(const_cast<float*>(r.bias.data()), DType::kF32, {E});
    if (r.hash_layer()) {
      for (int32_t& t : tokens) t = static_cast<int32_t>(rng() % static_cast<uint32_t>(r.vocab_size));
      a.token_ids = TensorView::contiguous(tokens.data(), DType::kI32, {T});
      a.hash_table = TensorView::contiguous(const_cast<int32_t*>(r.hash_table.data()), DType::kI32,
                                            {r.vocab_size, r.hash_top_k});
    }
    a.topk_ids = TensorView::contiguous(ids.data(), DType::kI32, {T, K});
    a.topk_weights = TensorView::contiguous(weights.data(), DType::kF32, {T, K});
    route_deepseek_v4(r.config(K), a);
    for (int64_t t = 0; t < T; ++t) {
      std::vector<double> s(E), key(E);
      for (int64_t e = 0; e < E; ++e) {
        const double v = logits[t * E + e];
        s[e] = std::sqrt(std::max(v, 0.0) + std::log1p(std::exp(-std::abs(v))));
        key[e] = s[e] + (r.bias.empty() ? 0.0 : r.bias[e]);
      }
      std::vector<int32_t> want(K);
      if (r.hash_layer()) {
        for (int64_t k = 0; k < K; ++k) want[k] = r.hash_table[tokens[t] * K + k];
      } else {
        std::vector<int32_t> order(E);
        std::iota(order.begin(), order.end(), 0);
        std::stable_sort(order.begin(), order.end(), [&](int32_t x, int32_t y) { return key[x] > key[y]; });
        want.assign(order.begin(), order.begin() + K);
      }
      double sum = 0;
      for (int32_t id : want) sum += s[id];
      for (int64_t k = 0; k < K; ++k) {
        EXPECT_EQ(ids[t * K + k], want[k]) << "layer " << l << " token " << t << " slot " << k;
        EXPECT_NEAR(weights[t * K + k], s[want[k]] / sum * 1.5, 1e-5) << "layer " << l << " token " << t;
      }
    }
  }
}

}  // namespace
}  // namespace moe_ep
