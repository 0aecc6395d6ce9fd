// What the fuzz targets found (tests/fuzz, TESTING.md), as named cases; the inputs themselves
// are replayed from tests/fuzz/regressions by the fuzz_replay_* tests.
#include <gtest/gtest.h>

#include "moe_ep/backend.h"
#include "moe_ep/error.h"
#include "support/layer_problem.h"

namespace moe_ep::testsupport {
namespace {

void expect_invalid(const std::function<void()>& call, const char* part) {
  try {
    call();
    ADD_FAILURE() << "accepted; expected an error with '" << part << "'";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
    EXPECT_NE(e.message().find(part), std::string::npos) << e.what();
  }
}

// fuzz_weight_pack: a dtype value outside the enum made the error message itself throw
// kInternal ("unknown dtype value 11") instead of naming the parameter.
TEST(FuzzFindings, DtypeOutsideTheEnumIsNamedNotInternal) {
  Problem p = tiny_problem("mxfp4");
  p.max_tokens = 4;
  const WeightSet w = random_weights(p, WeightFormat::kMXFP4, 131);
  WeightPack pack = w.pack();
  pack.w13_scale.dtype = static_cast<DType>(11);
  expect_invalid([&] { Layer::create(cpu_runtime(), p.desc(), pack, p.overrides); },
                 "w13_scale has dtype <not a moe_ep dtype>");
  auto layer = make_layer(p, w);
  const Inputs in = random_inputs(p, 2, 132);
  HostTensor<uint16_t> y = poisoned_output(p, 2);
  ForwardArgs args = in.args(y, true);
  args.topk_weights.dtype = static_cast<DType>(200);
  expect_invalid([&] { layer->forward(args); }, "topk_weights has dtype <not a moe_ep dtype>");
}

// fuzz_weight_pack: ndim above kMaxTensorDims read past TensorView::shape (UBSan: index 5 out of
// bounds) while formatting the message.
TEST(FuzzFindings, NdimOutsideZeroToFourIsNamed) {
  Problem p = tiny_problem("mxfp4");
  p.max_tokens = 4;
  const WeightSet w = random_weights(p, WeightFormat::kMXFP4, 133);
  WeightPack pack = w.pack();
  pack.w2.ndim = 6;
  expect_invalid([&] { Layer::create(cpu_runtime(), p.desc(), pack, p.overrides); },
                 "w2 has shape <ndim 6, not 0..4>");
  auto layer = make_layer(p, w);
  const Inputs in = random_inputs(p, 2, 134);
  HostTensor<uint16_t> y = poisoned_output(p, 2);
  ForwardArgs args = in.args(y, true);
  args.y.ndim = 100;
  expect_invalid([&] { layer->forward(args); }, "<ndim 100, not 0..4>");
  TensorView v = args.x;
  v.ndim = -3;
  EXPECT_EQ(v.numel(), 0);
  EXPECT_FALSE(v.is_contiguous());
}

// fuzz_weight_pack: intermediate_size = 2^62 passed validate_config (a multiple of 128), and the
// weight shape 2I then overflowed int64 (UBSan) in the layout check.
TEST(FuzzFindings, DimensionsWhoseSizesOverflowAreRefused) {
  Problem p = tiny_problem("mxfp4");
  p.intermediate = int64_t{1} << 62;
  expect_invalid([&] { validate_desc(p.desc(), 1); }, "overflows int64");
  p = tiny_problem("nvfp4");
  p.max_tokens = int64_t{1} << 60;
  expect_invalid([&] { validate_desc(p.desc(), 1); }, "overflows int64");
}

}  // namespace
}  // namespace moe_ep::testsupport
