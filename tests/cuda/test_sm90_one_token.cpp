// The one-token layer (mxfp4.one-token.1x16: T = 1 in two launches, kernels/sm90_one_token.h)
// against the decode chain it replaces at T = 1 (one_token_layer = false, decode_split_k = 1: the
// unsplit decode GEMMs, the same products and order), bit for bit, and against the CPU layer at
// the recipe's threshold. Routings that expose slot handling: random, holes, a repeated expert,
// no valid slot (zeros), a bad id (flagged, treated as a hole); int32 and int64 ids; folded and
// E8M0-scaled weights; the tiny shape (one 16-column group per down block), H = 4096,
// I = 2048, K = 6 (several groups per block, 12 units) and a last down block partly past H; a
// shared expert (y_add waited for between the launches); graph replays equal to eager; and the
// layer with SMs held by another stream's kernel (no grid-wide barrier: its blocks wait for SMs,
// then finish).
#include <regex>
#include <utility>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "cuda/kernels/sm90_one_token.h"
#include "cuda_test_util.h"
#include "moe_ep/layer.h"
#include "sm_hog_probe.h"

namespace moe_ep::cudatest {
namespace {

using testsupport::Inputs;
using testsupport::Problem;
using testsupport::WeightSet;

struct Case {
  std::string what;
  Inputs in;
  bool bad_id = false;
};

std::vector<Case> one_token_cases(const Problem& p) {
  std::vector<Case> cases;
  cases.push_back({"random", testsupport::random_inputs(p, 1, 901), false});
  cases.push_back({"random, int32 ids", testsupport::random_inputs(p, 1, 902, {.ids_i32 = true}), false});
  Inputs holes = testsupport::random_inputs(p, 1, 903);
  for (int64_t k = 0; k < p.top_k; k += 2) holes.set_id(0, k, -1);
  cases.push_back({"every other slot -1", holes, false});
  Inputs repeated = testsupport::random_inputs(p, 1, 904);
  repeated.set_id(0, 1, repeated.id(0, 0));
  cases.push_back({"one expert in two slots", repeated, false});
  Inputs none = testsupport::random_inputs(p, 1, 905, {.ids_i32 = true});
  for (int64_t k = 0; k < p.top_k; ++k) none.set_id(0, k, -1);
  cases.push_back({"no valid slot", none, false});
  Inputs bad = testsupport::random_inputs(p, 1, 906);
  bad.set_id(0, p.top_k - 1, p.num_experts + 3);
  cases.push_back({"an id past E", bad, true});
  return cases;
}

int sm_count() {
  int sms = 0;
  MOE_EP_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  return sms;
}

Problem decode_chain(Problem p) {
  p.overrides.one_token_layer = false;
  p.overrides.decode_split_k = 1;
  return p;
}

Problem one_token(Problem p) {
  p.overrides.one_token_layer = true;
  return p;
}

void check_layer(const Problem& p, const WeightSet& w, const std::string& name) {
  // The CPU layer's outputs first: its runtime is released before the GPU one is acquired.
  const std::vector<Case> cases = one_token_cases(p);
  std::vector<std::vector<double>> cpu;
  for (const Case& c : cases) {
    Inputs in = c.in;  // the CPU layer refuses a bad id; the GPU layers flag it and skip the slot
    if (c.bad_id) in.set_id(0, p.top_k - 1, -1);
    cpu.push_back(cpu_reference(p, w.pack(), in));
  }
  auto layer = make_gpu_layer(one_token(p), w.pack());
  auto chain = make_gpu_layer(decode_chain(p), w.pack());
  const std::string config = layer->info().config.str();
  ASSERT_NE(config.find("plan T=1..1: mxfp4.one-token.1x16; gate_up grid"), std::string::npos) << config;
  const std::string chain_config = chain->info().config.str();
  EXPECT_TRUE(std::regex_search(chain_config, std::regex(R"(plan T=1\.\.\d+: mxfp4\.decode\.16x128, routing m tiles)")))
      << chain_config;
  EXPECT_EQ(chain_config.find("plan T=1..1: mxfp4.one-token"), std::string::npos) << chain_config;
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    const DeviceInputs d = to_device(p, c.in);
    const std::vector<uint16_t> got = run_on_gpu(*layer, d), ref = run_on_gpu(*chain, d);
    const std::string what = fmt::format("{}: {}", name, c.what);
    int64_t same = 0;
    for (size_t i = 0; i < got.size(); ++i) same += got[i] == ref[i];
    EXPECT_EQ(same, static_cast<int64_t>(got.size())) << what << ": differs from the decode chain";
    const double err = relative_error_rows(got, cpu[i], p.hidden);
    EXPECT_LE(err, same_recipe_tolerance(p.recipe)) << what;
    const uint32_t flags = layer->read_error_flags(), chain_flags = chain->read_error_flags();
    EXPECT_EQ(flags, c.bad_id ? uint32_t{kErrorExpertIdOutOfRange} : 0u) << what;
    EXPECT_EQ(chain_flags, flags) << what;
    fmt::print("[ one-tok ] {:<56} rel_err={:.3e} bitwise-equal to the decode chain: {:.4f}\n", what, err,
               got.empty() ? 1.0 : same / static_cast<double>(got.size()));
  }
  // Graph replays of the two launches equal the eager forward.
  const DeviceInputs d = to_device(p, cases[0].in);
  const std::vector<uint16_t> eager = run_on_gpu(*layer, d);
  cudaStream_t stream;
  MOE_EP_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  for (const std::vector<uint16_t>& replay : replay_forward_graph(*layer, d, stream, 3))
    EXPECT_EQ(replay, eager) << name << ": graph replay";
  MOE_EP_CUDA_CHECK(cudaStreamDestroy(stream));
}

class Sm90OneToken : public ::testing::Test {
 protected:
  void SetUp() override { MOE_EP_REQUIRE_CUDA(); }
};

TEST_F(Sm90OneToken, TinyBitwiseTheDecodeChain) {
  for (const bool folded : {true, false}) {
    Problem p = testsupport::tiny_problem("mxfp4");
    if (!folded) p.overrides.fold_fp8 = false;
    p.max_tokens = 8;
    const WeightSet w = testsupport::random_weights(p, p.traits().native_format, 61);
    check_layer(p, w, folded ? "tiny folded" : "tiny E8M0 scales");
  }
}

// deepseek-v4-flash's H, I and K over 8 experts: 256 column groups of y, several per down block.
Problem flash_width(bool folded) {
  Problem p = testsupport::tiny_problem("mxfp4");
  if (!folded) p.overrides.fold_fp8 = false;
  p.hidden = 4096;
  p.intermediate = 2048;
  p.num_experts = 8;
  p.top_k = 6;
  p.max_tokens = 4;
  return p;
}

TEST_F(Sm90OneToken, FlashWidthBitwiseTheDecodeChain) {
  for (const bool folded : {true, false}) {
    const Problem p = flash_width(folded);
    const WeightSet w = testsupport::random_weights(p, p.traits().native_format, 62);
    check_layer(p, w, folded ? "H=4096 I=2048 K=6 folded" : "H=4096 I=2048 K=6 E8M0 scales");
  }
}

// H = 4352: 272 column groups of y, whose last down block (on 114 or 132 SMs: 3 groups per block)
// has groups past H; I = 1152 (9 k steps of GEMM 2).
TEST_F(Sm90OneToken, LastDownBlockPartlyPastHidden) {
  Problem p = flash_width(true);
  p.hidden = 4352;
  p.intermediate = 1152;
  const int groups = static_cast<int>(p.hidden / 16), per_block = cuda::one_token_groups_per_block(p.hidden, sm_count());
  ASSERT_NE(groups % per_block, 0) << "the shape must leave the last down block partly empty on this device";
  const WeightSet w = testsupport::random_weights(p, p.traits().native_format, 66);
  check_layer(p, w, "H=4352 I=1152 K=6 folded");
}

// With a shared expert the down launch waits for its output (y_add) on the side stream.
TEST_F(Sm90OneToken, SharedExpertAddedAsTheCombineAddsIt) {
  Problem p = testsupport::tiny_problem("mxfp4");
  p.max_tokens = 8;
  p.shared_intermediate = 128;
  const WeightSet w = testsupport::random_weights(p, p.traits().native_format, 63);
  check_layer(p, w, "tiny + shared expert");
}

// The down blocks need most of an SM's shared memory; with the SMs held by a kernel on another
// stream they wait for them and the layer still finishes with the same bits.
TEST_F(Sm90OneToken, FinishesWithSmsHeldByAnotherStream) {
  const Problem p = flash_width(true);
  const WeightSet w = testsupport::random_weights(p, p.traits().native_format, 64);
  auto layer = make_gpu_layer(one_token(p), w.pack());
  const DeviceInputs d = to_device(p, one_token_cases(p)[0].in);
  const std::vector<uint16_t> alone = run_on_gpu(*layer, d);
  const int sms = sm_count();
  int optin = 0;
  MOE_EP_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, 0));
  cudaStream_t hog_stream, stream;
  MOE_EP_CUDA_CHECK(cudaStreamCreateWithFlags(&hog_stream, cudaStreamNonBlocking));
  MOE_EP_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  // Two thirds of the SMs, each with a block of 1024 threads and most of its shared memory, for
  // 20 ms.
  MOE_EP_CUDA_CHECK(cuda::test::launch_sm_hog(2 * sms / 3, optin - 4096, 20'000'000, hog_stream));
  const std::vector<uint16_t> beside = run_on_gpu(*layer, d, stream);
  // The hog still holds its SMs: the layer ran on the others.
  EXPECT_EQ(cudaStreamQuery(hog_stream), cudaErrorNotReady) << "the hog ended before the layer did";
  MOE_EP_CUDA_CHECK(cudaStreamSynchronize(hog_stream));
  EXPECT_EQ(beside, alone);
  EXPECT_EQ(layer->read_error_flags(), 0u);
  MOE_EP_CUDA_CHECK(cudaStreamDestroy(hog_stream));
  MOE_EP_CUDA_CHECK(cudaStreamDestroy(stream));
}

// The small case compute-sanitizer runs (scripts/device_test.sh): memcheck, racecheck, synccheck.
TEST_F(Sm90OneToken, SmallCaseForSanitizers) {
  Problem p = testsupport::tiny_problem("mxfp4");
  p.max_tokens = 2;
  const WeightSet w = testsupport::random_weights(p, p.traits().native_format, 65);
  const Inputs in = testsupport::random_inputs(p, 1, 907);
  const std::vector<double> cpu = cpu_reference(p, w.pack(), in);
  auto layer = make_gpu_layer(one_token(p), w.pack());
  const std::vector<uint16_t> got = run_on_gpu(*layer, to_device(p, in));
  EXPECT_LE(relative_error_rows(got, cpu, p.hidden), same_recipe_tolerance(p.recipe));
  EXPECT_EQ(layer->read_error_flags(), 0u);
}

}  // namespace
}  // namespace moe_ep::cudatest
