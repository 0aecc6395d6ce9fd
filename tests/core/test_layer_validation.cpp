// Every bad input of docs/spec.md §11 that Layer::create and Layer::forward can see gives an error
// naming the parameter, the value and what was expected; a failed forward writes nothing and
// leaves the layer usable (the next good forward matches the one before).
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "moe_ep/error.h"
#include "moe_ep/formats.h"
#include "support/ep_harness.h"
#include "support/layer_problem.h"

namespace moe_ep::testsupport {
namespace {

void expect_error(const std::function<void()>& call, ErrorCode code,
                  std::initializer_list<const char*> parts, const std::string& context) {
  try {
    call();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << context << ": " << e.what();
    for (const char* part : parts)
      EXPECT_NE(e.message().find(part), std::string::npos)
          << context << ": message '" << e.message() << "' lacks '" << part << "'";
    return;
  }
  ADD_FAILURE() << context << ": no moe_ep::Error thrown";
}

// ---- Layer::create ----

class CreateValidation : public ::testing::Test {
 protected:
  void expect_create_error(const Problem& p, const WeightPack& pack, ErrorCode code,
                           std::initializer_list<const char*> parts, const std::string& what) {
    expect_error([&] { Layer::create(cpu_runtime(), p.desc(), pack, p.overrides); }, code, parts,
                 what + " (" + p.str() + ")");
  }
  Problem mx_ = tiny_problem("mxfp4");
  Problem nv_ = tiny_problem("nvfp4");
  WeightSet mx_w_ = random_weights(mx_, WeightFormat::kMXFP4, 41);
  WeightSet nv_w_ = random_weights(nv_, WeightFormat::kNVFP4, 42);
};

TEST_F(CreateValidation, ReleasedRuntime) {
  expect_error([&] { Layer::create(nullptr, mx_.desc(), mx_w_.pack(), mx_.overrides); },
               ErrorCode::kRuntime, {"released runtime"}, "null runtime");
}

// The CPU reference has no kernel variants: a pinned GPU choice is refused naming it, never ignored.
TEST_F(CreateValidation, GpuKernelOverridesOnTheCpu) {
  std::vector<std::pair<std::function<void(KernelOverrides&)>, const char*>> pins = {
      {[](KernelOverrides& o) { o.gemm = GemmKernel::kWgmma; }, "gemm=wgmma"},
      {[](KernelOverrides& o) { o.tile = {64, 256}; }, "tile=64x256"},
      {[](KernelOverrides& o) { o.decode_max_tokens = 16; }, "decode_max_tokens=16"},
      {[](KernelOverrides& o) { o.fold_fp8 = false; }, "fold_fp8=false"},
      {[](KernelOverrides& o) { o.decode_split_k = 2; }, "decode_split_k=2"},
      {[](KernelOverrides& o) { o.fuse_quantize_route = true; }, "fuse_quantize_route=true"},
      {[](KernelOverrides& o) { o.one_token_layer = false; }, "one_token_layer=false"},
  };
  for (const auto& [pin, name] : pins) {
    Problem p = mx_;
    pin(p.overrides);
    p.overrides.num_threads = 2;  // a CPU choice beside it is not what is refused
    expect_create_error(p, mx_w_.pack(), ErrorCode::kUnsupported, {name, "the CPU backend has no kernel variants"},
                        name);
  }
}

TEST_F(CreateValidation, Config) {
  expect_error([] { parse_recipe("fp8", "--backend"); }, ErrorCode::kInvalidArgument,
               {"--backend", "'fp8'", "mxfp4, nvfp4"}, "unknown recipe name");
  MoeDesc bad = mx_.desc();
  bad.recipe = static_cast<Recipe>(7);
  expect_error([&] { Layer::create(cpu_runtime(), bad, mx_w_.pack()); }, ErrorCode::kInvalidArgument,
               {"recipe = 7", "mxfp4, nvfp4"}, "recipe value out of the enum");
  Problem p = mx_;
  p.hidden = 200;
  expect_create_error(p, mx_w_.pack(), ErrorCode::kInvalidArgument, {"hidden_size = 200", "128"},
                      "H not aligned");
  p = nv_;
  p.intermediate = 96;
  expect_create_error(p, nv_w_.pack(), ErrorCode::kInvalidArgument, {"intermediate_size = 96", "128"},
                      "I not aligned");
  for (float bad : {-1.0f, std::numeric_limits<float>::quiet_NaN(), INFINITY}) {
    p = mx_;
    p.clamp = bad;
    expect_create_error(p, mx_w_.pack(), ErrorCode::kInvalidArgument, {"activation_clamp"},
                        fmt::format("clamp {}", bad));
  }
  p = mx_;
  p.top_k = 0;
  expect_create_error(p, mx_w_.pack(), ErrorCode::kInvalidArgument, {"top_k = 0"}, "top_k 0");
  p = mx_;
  p.max_tokens = 0;
  expect_create_error(p, mx_w_.pack(), ErrorCode::kInvalidArgument, {"max_tokens_per_rank = 0"},
                      "no tokens");
  // E % R != 0 needs several ranks; the configuration check itself is what Layer::create runs.
  expect_error([&] { validate_desc(mx_.desc(), 3); }, ErrorCode::kInvalidArgument,
               {"num_experts = 16", "world_size = 3"}, "E % R");
}

TEST_F(CreateValidation, WeightFormatAndLayout) {
  expect_create_error(mx_, nv_w_.pack(), ErrorCode::kInvalidArgument,
                      {"weights.format = nvfp4", "'mxfp4'", "mxfp4, bf16"}, "format not accepted");

  WeightPack pack = mx_w_.pack();
  pack.w13.dtype = DType::kI32;
  expect_create_error(mx_, pack, ErrorCode::kInvalidArgument, {"w13 has dtype i32", "u8"}, "w13 dtype");

  pack = mx_w_.pack();
  pack.w2.shape[0] = 15;
  expect_create_error(mx_, pack, ErrorCode::kInvalidArgument, {"w2 has shape [15, 256, 64]", "E_loc", "[16, 256, 64]"},
                      "w2 experts");

  pack = mx_w_.pack();
  pack.w13_scale.strides[1] = 16;  // rows overlap
  expect_create_error(mx_, pack, ErrorCode::kInvalidArgument, {"w13_scale", "strides", "contiguous"},
                      "w13_scale strides");

  pack = mx_w_.pack();
  pack.w2_scale = TensorView{};
  expect_create_error(mx_, pack, ErrorCode::kInvalidArgument, {"w2_scale is missing", "I/32"},
                      "missing w2_scale");

  pack = mx_w_.pack();
  pack.w13_global = nv_w_.pack().w13_global;
  expect_create_error(mx_, pack, ErrorCode::kInvalidArgument, {"w13_global is given"},
                      "global scale with mxfp4");

  pack = nv_w_.pack();
  pack.w2_global.shape[0] = 8;
  expect_create_error(nv_, pack, ErrorCode::kInvalidArgument, {"w2_global has shape [8]"}, "w2_global shape");

  pack = mx_w_.pack();
  for (TensorView* t : {&pack.w13, &pack.w13_scale, &pack.w2, &pack.w2_scale}) t->device = Device::cuda(0);
  expect_create_error(mx_, pack, ErrorCode::kInvalidArgument, {"w13 is on cuda:0", "cpu"},
                      "device weights for a CPU layer");
}

TEST_F(CreateValidation, WeightValues) {
  WeightSet w = mx_w_;
  const int64_t H = mx_.hidden, I = mx_.intermediate;
  w.w13_scale[(3 * 2 * I + 5) * (H / 32) + 2] = 0xFF;
  w.w13_scale[(4 * 2 * I + 0) * (H / 32) + 0] = 0xFF;  // later; the first one is named
  expect_create_error(mx_, w.pack(), ErrorCode::kInvalidArgument, {"w13_scale[3, 5, 2]", "0xFF", "E8M0"},
                      "E8M0 NaN");

  WeightSet n = nv_w_;
  n.w2_scale[(1 * H + 7) * (I / 16) + 3] = 0x7F;
  expect_create_error(nv_, n.pack(), ErrorCode::kInvalidArgument, {"w2_scale[1, 7, 3]", "0x7F", "e4m3 NaN"},
                      "e4m3 NaN");
  n = nv_w_;
  n.w2_scale[0] = 0xFF;
  expect_create_error(nv_, n.pack(), ErrorCode::kInvalidArgument, {"w2_scale[0, 0, 0]", "0xFF"}, "e4m3 -NaN");

  for (float bad : {0.0f, -1.0f, INFINITY, std::numeric_limits<float>::quiet_NaN()}) {
    n = nv_w_;
    n.w13_global[2 * 6 + 1] = bad;
    expect_create_error(nv_, n.pack(), ErrorCode::kInvalidArgument, {"w13_global[6, 1]", "weight_scale_2"},
                        fmt::format("global {}", bad));
  }
  n = nv_w_;
  n.w13_global[2 * 2 + 1] = n.w13_global[2 * 2] * 3.0f;
  expect_create_error(nv_, n.pack(), ErrorCode::kInvalidArgument, {"w13_global[2]", "not a power of two"},
                      "gate/up ratio 3");

  WeightSet b = random_weights(mx_, WeightFormat::kBF16, 43);
  b.w2_bf16[5] = 0x7F80;  // +inf
  expect_create_error(mx_, b.pack(), ErrorCode::kInvalidArgument, {"w2[0, 0, 5]", "not finite"}, "bf16 inf");
}

TEST_F(CreateValidation, SharedExpert) {
  Problem p = mx_;
  p.shared_intermediate = 64;
  const WeightSet w = random_weights(p, WeightFormat::kMXFP4, 46);
  Problem bad = p;
  bad.shared_intermediate = 24;
  expect_create_error(bad, w.pack(), ErrorCode::kInvalidArgument,
                      {"shared_intermediate_size = 24", "multiple of 16"}, "Is not a multiple of 16");
  bad = p;
  bad.quantize_input = false;
  expect_create_error(bad, w.pack(), ErrorCode::kInvalidArgument,
                      {"shared_intermediate_size = 64", "quantize_input = true"}, "shared expert without x");

  WeightPack pack = w.pack();
  pack.shared_w13 = TensorView{};
  expect_create_error(p, pack, ErrorCode::kInvalidArgument, {"shared_w13 is missing", "[2Is, H]", "[128, 256]"},
                      "missing shared_w13");
  pack = w.pack();
  pack.shared_w2.shape[1] = 32;
  expect_create_error(p, pack, ErrorCode::kInvalidArgument, {"shared_w2 has shape [256, 32]", "[256, 64]"},
                      "shared_w2 shape");
  pack = w.pack();
  pack.shared_w2.dtype = DType::kF32;
  expect_create_error(p, pack, ErrorCode::kInvalidArgument, {"shared_w2 has dtype f32", "bf16"},
                      "shared_w2 dtype");
  expect_create_error(mx_, w.pack(), ErrorCode::kInvalidArgument,
                      {"shared_w13 is given but not used", "shared_intermediate_size = 0"},
                      "shared weights without a shared expert");

  pack = w.pack();
  pack.shared_w2.device = Device::cuda(0);
  expect_create_error(p, pack, ErrorCode::kInvalidArgument, {"shared_w2 is on cuda:0", "cpu"},
                      "shared_w2 on a GPU for a CPU layer");

  WeightSet nan = w;
  nan.shared_w2[3 * 64 + 7] = 0x7FC0;
  expect_create_error(p, nan.pack(), ErrorCode::kInvalidArgument, {"shared_w2[3, 7]", "not finite"},
                      "NaN in shared_w2");

  auto layer = make_layer(p, w);
  WeightPack one = slice_experts(w.pack(), 2, 1);  // keeps the shared expert's tensors
  expect_error([&] { layer->replace_expert_weights(2, one); }, ErrorCode::kInvalidArgument,
               {"shared_w13 is given but not used", "replace_expert_weights"}, "replace with shared weights");
  one.shared_w13 = TensorView{};
  one.shared_w2 = TensorView{};
  layer->replace_expert_weights(2, one);  // the routed expert alone is accepted
}

// ---- Layer::forward ----

class ForwardValidation : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    p_ = tiny_problem(GetParam());
    q_ = p_;
    q_.quantize_input = false;
    const WeightSet w = random_weights(p_, GetParam() == "mxfp4" ? WeightFormat::kMXFP4 : WeightFormat::kNVFP4, 44);
    layer_ = make_layer(p_, w);
    caller_layer_ = make_layer(q_, w);
    in_ = random_inputs(p_, 12, 45, {.skip_fraction = 0.2});
    quantize_inputs_for_caller(p_, in_);
    good_ = run_forward(*layer_, p_, in_);
    good_caller_ = run_forward(*caller_layer_, q_, in_);
  }

  // The call must fail as described, leave y as it was (poisoned) and the layer usable.
  void expect_forward_error(bool caller_quantized, const std::function<void(ForwardArgs&)>& spoil,
                            std::initializer_list<const char*> parts, const std::string& what) {
    expect_forward_error(in_, caller_quantized, spoil, parts, what);
  }
  // The same with bad data in `inputs`; the good forward afterwards uses in_.
  void expect_forward_error(const Inputs& inputs, bool caller_quantized,
                            const std::function<void(ForwardArgs&)>& spoil,
                            std::initializer_list<const char*> parts, const std::string& what) {
    Layer& layer = caller_quantized ? *caller_layer_ : *layer_;
    const Problem& p = caller_quantized ? q_ : p_;
    HostTensor<uint16_t> y = poisoned_output(p, in_.tokens);
    ForwardArgs args = inputs.args(y, p.quantize_input);
    spoil(args);
    const std::string context = what + " (" + p.str() + ")";
    expect_error([&] { layer.forward(args); }, ErrorCode::kInvalidArgument, parts, context);
    for (uint16_t v : y.values()) ASSERT_EQ(v, kBf16NaN) << context << ": a failed forward wrote y";
    const HostTensor<uint16_t> again = run_forward(layer, p, in_);
    EXPECT_EQ(again.values(), (caller_quantized ? good_caller_ : good_).values())
        << context << ": the next good forward differs";
  }

  Problem p_, q_;
  std::unique_ptr<Layer> layer_, caller_layer_;
  Inputs in_;
  HostTensor<uint16_t> good_, good_caller_;
};

TEST_P(ForwardValidation, ActivationAndOutput) {
  expect_forward_error(false, [](ForwardArgs& a) { a.x.dtype = DType::kF32; }, {"x has dtype f32", "bf16"},
                       "x dtype");
  expect_forward_error(false, [](ForwardArgs& a) { a.x.shape[1] = 128; }, {"x has shape [12, 128]", "[T, H]", "[12, 256]"},
                       "x hidden");
  expect_forward_error(false, [](ForwardArgs& a) { a.x.strides[0] = 512; }, {"x", "strides [512, 1]", "contiguous"},
                       "x strides");
  expect_forward_error(false, [](ForwardArgs& a) { a.x = TensorView{}; }, {"x is missing", "quantize_input"},
                       "x missing");
  expect_forward_error(false, [this](ForwardArgs& a) { a.a = in_.a.view(); }, {"a is given", "quantize_input"},
                       "a with quantize_input");
  expect_forward_error(false, [](ForwardArgs& a) { a.y = TensorView{}; }, {"y is missing"}, "y missing");
  expect_forward_error(false, [](ForwardArgs& a) { a.y.shape[0] = 11; }, {"y has shape [11, 256]", "[12, 256]"},
                       "y rows");
  expect_forward_error(false, [](ForwardArgs& a) { a.y.device = Device::cuda(0); }, {"y is on cuda:0", "cpu"},
                       "y on a device");
}

TEST_P(ForwardValidation, TokenLimit) {
  Inputs big = random_inputs(p_, p_.max_tokens + 1, 46);
  HostTensor<uint16_t> y = poisoned_output(p_, big.tokens);
  expect_error([&] { layer_->forward(big.args(y, true)); }, ErrorCode::kInvalidArgument,
               {"T = 65", "max_tokens_per_rank = 64"}, "T above max_tokens_per_rank");
  const HostTensor<uint16_t> again = run_forward(*layer_, p_, in_);
  EXPECT_EQ(again.values(), good_.values()) << p_.str();
}

TEST_P(ForwardValidation, Routing) {
  expect_forward_error(false, [](ForwardArgs& a) { a.topk_ids.dtype = DType::kF32; },
                       {"topk_ids has dtype f32", "i32 | i64"}, "ids dtype");
  expect_forward_error(false, [](ForwardArgs& a) { a.topk_ids.shape[1] = 3; a.topk_ids.strides[0] = 3; },
                       {"topk_ids has shape [12, 3]", "[T, K]"}, "ids shape");
  expect_forward_error(false, [](ForwardArgs& a) { a.topk_weights.dtype = DType::kBF16; },
                       {"topk_weights has dtype bf16", "f32"}, "weights dtype");
  for (int64_t bad : {int64_t{16}, int64_t{-2}, int64_t{1} << 40}) {
    Inputs bad_ids = in_;
    bad_ids.set_id(2, 1, bad);
    const std::string named = fmt::format("topk_ids[2, 1] = {}", bad);
    expect_forward_error(bad_ids, false, [](ForwardArgs&) {}, {named.c_str(), "[-1, num_experts = 16)"},
                         fmt::format("id {}", bad));
  }
}

TEST_P(ForwardValidation, CallerQuantizedActivation) {
  const bool nvfp4 = GetParam() == "nvfp4";
  expect_forward_error(true, [this](ForwardArgs& a) { a.x = in_.x.view(); }, {"x is given", "quantize_input = false"},
                       "x with caller-quantized input");
  expect_forward_error(true, [](ForwardArgs& a) { a.a = TensorView{}; }, {"a is missing"}, "a missing");
  expect_forward_error(true, [](ForwardArgs& a) { a.a_scale.shape[1] += 1; }, {"a_scale has shape"}, "a_scale shape");
  {
    Inputs bad = in_;
    bad.a_scale[3 * bad.a_scale.shape()[1] + 1] = nvfp4 ? 0x7F : 0xFF;
    expect_forward_error(bad, true, [](ForwardArgs&) {}, {"a_scale[3, 1]", "NaN"}, "a_scale NaN");
  }
  if (nvfp4) {
    Inputs bad = in_;
    bad.a_global[4] = -1.0f;
    expect_forward_error(bad, true, [](ForwardArgs&) {}, {"a_global[4] = -1"}, "a_global negative");
    expect_forward_error(true, [](ForwardArgs& a) { a.a_global = TensorView{}; }, {"a_global is missing"},
                         "a_global missing");
  } else {
    Inputs bad = in_;
    bad.a[5 * 256 + 9] = 0x7F;
    expect_forward_error(bad, true, [](ForwardArgs&) {}, {"a[5, 9]", "e4m3 NaN"}, "a NaN");
    expect_forward_error(true, [](ForwardArgs& a) { a.a_global = a.topk_weights; }, {"a_global is given"},
                         "a_global with mxfp4");
  }
}

TEST_P(ForwardValidation, ForwardRowsRange) {
  HostTensor<uint16_t> y = poisoned_output(p_, in_.tokens);
  const std::vector<int64_t> rows = {3, 12};
  expect_error([&] { layer_->forward_rows(in_.args(y, true), rows); }, ErrorCode::kInvalidArgument,
               {"rows[1] = 12", "[0, T = 12)"}, "row out of range");
  for (uint16_t v : y.values()) ASSERT_EQ(v, kBf16NaN);
}

INSTANTIATE_TEST_SUITE_P(Recipes, ForwardValidation, ::testing::Values("mxfp4", "nvfp4"));

}  // namespace
}  // namespace moe_ep::testsupport
