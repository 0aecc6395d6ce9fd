// The SM90 layer on the deepseek-v4-flash preset (H=4096, I=2048, E=256, K=6, clamp 10) against
// the CPU layer: T = 1, 7, 128, 4096 with -1 holes and one expert taking 1024 rows; the CPU
// computes a subset of rows for large T (forward_rows). Then 20 bitwise reruns and graph
// replay at T = 4096. Weights and references are made once per suite: the CPU references
// first, then the GPU layer (one runtime per process).
#include <algorithm>
#include <random>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "cuda/errors.h"
#include "cuda_test_util.h"
#include "moe_ep/formats.h"
#include "testing/presets.h"
#include "testing/synthetic.h"

namespace moe_ep::cudatest {
namespace {

using testsupport::Inputs;
using testsupport::Problem;

struct FlashCase {
  std::string name;
  Inputs in;
  std::vector<int64_t> rows;  // rows the CPU computes; empty = all
  std::vector<double> ref;
};

struct FlashState {
  Problem problem;
  testing::HostWeights weights;
  std::vector<FlashCase> cases;
  std::unique_ptr<Layer> layer;
};

template <const char* kFamily>
class Sm90Flash : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!cuda_unavailable_reason().empty()) return;
    const testing::Preset& preset = testing::find_preset("deepseek-v4-flash");
    state_ = std::make_unique<FlashState>();
    Problem& p = state_->problem;
    p = preset_problem("deepseek-v4-flash", kFamily, 4096);
    state_->weights = preset_weights(p, p.traits().native_format, 2026);

    auto add = [&](std::string name, int64_t T, double holes) {
      testing::InputSpec is{T, p.hidden, p.num_experts, p.top_k, holes, preset.routed_scaling_factor,
                            static_cast<uint64_t>(700 + T), 0};
      FlashCase c{std::move(name), from_synthetic(testing::make_inputs(is), p.top_k), row_subset(T, T), {}};
      return &state_->cases.emplace_back(std::move(c));
    };
    for (int64_t T : {1, 7, 128, 4096}) add(fmt::format("random T={}", T), T, 0.05);
    FlashCase* one = add("one expert, all rows", 1024, 0.0);
    for (int64_t t = 0; t < one->in.tokens; ++t)
      for (int64_t k = 0; k < p.top_k; ++k) one->in.set_id(t, k, k == 0 ? 7 : -1);

    for (FlashCase& c : state_->cases) c.ref = cpu_reference(p, state_->weights.pack(), c.in, c.rows);
    state_->layer = make_gpu_layer(p, state_->weights.pack());
    fmt::print("[ sm90    ] {} layer notes:\n{}\n", p.name(), state_->layer->info().notes);
  }
  static void TearDownTestSuite() { state_.reset(); }
  void SetUp() override { MOE_EP_REQUIRE_CUDA(); }

  static inline std::unique_ptr<FlashState> state_;
};

constexpr char kMxfp4[] = "mxfp4";
constexpr char kNvfp4[] = "nvfp4";
using Sm90FlashMxfp4 = Sm90Flash<kMxfp4>;
using Sm90FlashNvfp4 = Sm90Flash<kNvfp4>;

void check_cases(FlashState& s) {
  for (const FlashCase& c : s.cases) {
    const std::vector<uint16_t> y = run_on_gpu(*s.layer, to_device(s.problem, c.in));
    const double err = relative_error_rows(y, c.ref, s.problem.hidden, c.rows);
    int64_t nan = 0;
    for (uint16_t v : y) nan += std::isnan(bf16_to_float(v));
    EXPECT_EQ(nan, 0) << c.name << ": unwritten (NaN-poisoned) outputs";
    EXPECT_LE(err, same_recipe_tolerance(s.problem.recipe)) << c.name << ": " << s.problem.str();
    fmt::print("[ sm90    ] flash {} {:<24} rows checked={:<5} rel_err={:.3e}\n", s.problem.name(),
               c.name, c.rows.empty() ? c.in.tokens : static_cast<int64_t>(c.rows.size()), err);
  }
  EXPECT_EQ(s.layer->read_error_flags(), 0u);
}

void check_determinism_and_graph(FlashState& s) {
  const FlashCase& c = s.cases[3];  // T = 4096
  const DeviceInputs d = to_device(s.problem, c.in);
  cudaStream_t stream;
  MOE_EP_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  const uint64_t h = hash_bits(run_on_gpu(*s.layer, d, stream));
  for (int rep = 0; rep < 20; ++rep) ASSERT_EQ(hash_bits(run_on_gpu(*s.layer, d, stream)), h) << "rerun " << rep;
  EXPECT_EQ(hash_bits(replay_forward_graph(*s.layer, d, stream, 1).at(0)), h) << "graph replay differs from eager";
  MOE_EP_CUDA_CHECK(cudaStreamDestroy(stream));
}

TEST_F(Sm90FlashMxfp4, MatchesCpuReference) { check_cases(*state_); }
TEST_F(Sm90FlashMxfp4, BitwiseDeterministicAndGraphReplayEqualsEager) { check_determinism_and_graph(*state_); }
TEST_F(Sm90FlashNvfp4, MatchesCpuReference) { check_cases(*state_); }
TEST_F(Sm90FlashNvfp4, BitwiseDeterministicAndGraphReplayEqualsEager) { check_determinism_and_graph(*state_); }

}  // namespace
}  // namespace moe_ep::cudatest
