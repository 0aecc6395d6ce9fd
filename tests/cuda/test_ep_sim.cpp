// Expert parallelism simulated on one GPU (cuda/ep/sim_group.h): R = 2, 4, 8 logical ranks with
// their own workspaces and local expert layers, the dispatch / combine / reduce kernels of the
// NCCL path with the simulation's peer policy, against
//   - the CPU single-rank layer on the same global batch, by the float64 relative error within
//     the recipe's threshold (testing/tolerances.h): GPU and CPU sum their fp32 products in
//     different orders, so only rounding-boundary flips differ; not bitwise;
//   - the CUDA world-size-1 layer on the same global batch, bit for bit: every o_k is computed
//     by the same per-row GEMM code (the suite pins the GEMM kernels, see pinned())
//     and travels back unchanged as bf16, and the reduce sums the o_k in slot order like the
//     world-size-1 combine.
// Inputs: Gaussian with holes, T different per rank (0 included), every slot to one expert,
// structured x that encodes (rank, token), caller-quantized activations; then graph replay,
// reruns, an out-of-range id, and a rank that never arrives (bounded wait, no hang); a shared
// expert added in the reduce; the public SimulatedEpGroup giving this group's bits.
#include <chrono>
#include <cstdlib>
#include <cmath>
#include <numeric>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "cuda/ep/ep_params.h"
#include "cuda/ep/ep_rank_engine.h"
#include "cuda/ep/sim_group.h"
#include "cuda/errors.h"
#include "cuda_test_util.h"
#include "moe_ep/formats.h"
#include "moe_ep/simulated_group.h"
#include "support/ep_harness.h"

namespace moe_ep::cudatest {
namespace {

using testsupport::Inputs;
using testsupport::Problem;
using testsupport::WeightSet;

WeightFormat native_format(const Problem& p) {
  return p.traits().native_format;
}

struct SimRun {
  std::vector<uint16_t> y;  // the ranks' y laid end to end (the global batch's order)
  uint32_t flags = 0;
};

// The bitwise comparison needs the same GEMM kernels on both sides; the world-size-1 layer picks
// its kernels by the number of rows, and the local experts see R*T*K rows where the reference
// sees the global T. The suite pins the mma kernels on both.
Problem pinned(Problem p) {
  p.overrides.gemm = GemmKernel::kMma;
  return p;
}

cuda::ep::SimGroupOptions options(const Problem& p, int R, int64_t timeout_ms = 10000) {
  cuda::ep::SimGroupOptions o;
  o.world_size = R;
  o.device = Device::cuda(0);
  o.desc = p.desc();
  o.overrides = pinned(p).overrides;
  o.timeout_ms = timeout_ms;
  return o;
}

std::vector<WeightPack> rank_weights(const Problem& p, const WeightSet& w, int R) {
  std::vector<WeightPack> packs;
  const int64_t E_loc = p.num_experts / R;
  for (int r = 0; r < R; ++r) packs.push_back(testsupport::slice_experts(w.pack(), r * E_loc, E_loc));
  return packs;
}

// Runs one forward of every rank with y NaN-poisoned; `stream` may be captured by the caller.
// Group: cuda::ep::SimEpGroup, or the public SimulatedEpGroup that wraps it.
template <class Group>
SimRun run_group(Group& group, const Problem& p, const std::vector<Inputs>& per_rank, int forwards = 1) {
  std::vector<DeviceInputs> d;
  std::vector<ForwardArgs> args;
  for (const Inputs& in : per_rank) d.push_back(to_device(p, in));
  for (const DeviceInputs& di : d) args.push_back(di.args(nullptr));
  SimRun out;
  for (int f = 0; f < forwards; ++f) {
    for (const DeviceInputs& di : d)
      MOE_EP_CUDA_CHECK(cudaMemset(di.y.get(), 0xFF, di.tokens * p.hidden * 2));
    group.forward(args);
    MOE_EP_CUDA_CHECK(cudaDeviceSynchronize());
  }
  out.flags = group.read_error_flags();
  for (const DeviceInputs& di : d) {
    std::vector<uint16_t> y(di.tokens * p.hidden);
    if (!y.empty()) MOE_EP_CUDA_CHECK(cudaMemcpy(y.data(), di.y.get(), y.size() * 2, cudaMemcpyDeviceToHost));
    out.y.insert(out.y.end(), y.begin(), y.end());
  }
  return out;
}

// The global batch's references: CPU layer (float64 values) and CUDA world-size-1 layer (bits).
struct References {
  std::vector<double> cpu;
  std::vector<uint16_t> cuda;
};

References references(const Problem& p, const WeightSet& w, const Inputs& global) {
  Problem g = pinned(p);
  g.max_tokens = std::max<int64_t>(global.tokens, 1);
  References r;
  r.cpu = cpu_reference(g, w.pack(), global);
  auto layer = make_gpu_layer(g, w.pack());
  r.cuda = run_on_gpu(*layer, to_device(g, global));
  EXPECT_EQ(layer->read_error_flags(), 0u);
  return r;
}

std::vector<Inputs> split(const Inputs& global, const std::vector<int64_t>& tokens) {
  std::vector<Inputs> parts;
  int64_t begin = 0;
  for (int64_t t : tokens) {
    parts.push_back(testsupport::slice_inputs(global, begin, t));
    begin += t;
  }
  return parts;
}

// Checks the group against both references; returns the rel err.
double expect_matches(const Problem& p, const WeightSet& w, int R, const std::vector<Inputs>& per_rank,
                      const std::string& what) {
  const Inputs global = testsupport::concat_inputs(per_rank);
  const References ref = references(p, w, global);
  cuda::ep::SimEpGroup group(options(p, R), rank_weights(p, w, R));
  const SimRun run = run_group(group, p, per_rank);
  EXPECT_EQ(run.flags, 0u) << what;
  const double err = relative_error_rows(run.y, ref.cpu, p.hidden);
  EXPECT_LE(err, same_recipe_tolerance(p.recipe)) << what << ": " << p.str();
  int64_t diff = 0, first = -1;
  for (size_t i = 0; i < run.y.size(); ++i)
    if (run.y[i] != ref.cuda[i]) {
      if (first < 0) first = static_cast<int64_t>(i);
      ++diff;
    }
  EXPECT_EQ(diff, 0) << what << ": " << diff << " of " << run.y.size()
                     << " elements differ from the CUDA world-size-1 layer, first at row "
                     << (first < 0 ? -1 : first / p.hidden) << " col " << (first < 0 ? -1 : first % p.hidden)
                     << "; " << p.str();
  std::string ts;
  for (const Inputs& in : per_rank) ts += fmt::format("{}{}", ts.empty() ? "" : ",", in.tokens);
  fmt::print("[ ep sim  ] {:<40} R={} T=[{}] rel_err={:.3e} bitwise-vs-cuda-ws1={}\n", what, R, ts,
             err, diff == 0 ? "yes" : "NO");
  return err;
}

class EpSimOneGpu : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override { MOE_EP_REQUIRE_CUDA(); }
};

TEST_P(EpSimOneGpu, RandomRoutingWithHolesAndUnevenTokensPerRank) {
  for (int R : {2, 4, 8}) {
    Problem p = testsupport::tiny_problem(GetParam());
    p.max_tokens = 96;
    const WeightSet w = testsupport::random_weights(p, native_format(p), 20 + R);
    std::vector<int64_t> tokens;
    for (int r = 0; r < R; ++r) tokens.push_back((r * 37 + 5) % 97 * (r % 3 == 1 ? 0 : 1));
    tokens[R - 1] = p.max_tokens;  // one rank full
    const int64_t total = std::accumulate(tokens.begin(), tokens.end(), int64_t{0});
    const Inputs global = testsupport::random_inputs(p, total, 300 + R, {.skip_fraction = 0.15});
    expect_matches(p, w, R, split(global, tokens), fmt::format("{} random, holes 15%", p.name()));
  }
}

TEST_P(EpSimOneGpu, EverySlotToOneExpertAndTokensWithoutValidSlots) {
  const int R = 4;
  Problem p = testsupport::tiny_problem(GetParam());
  p.max_tokens = 64;
  const WeightSet w = testsupport::random_weights(p, native_format(p), 31);
  Inputs global = testsupport::random_inputs(p, 4 * 50, 32, {.ids_i32 = true});
  // Every slot of every token to expert 13 (rank 3's): 800 rows of one expert, the same token
  // row four times per owner.
  for (int64_t t = 0; t < global.tokens; ++t)
    for (int64_t k = 0; k < p.top_k; ++k) global.set_id(t, k, 13);
  expect_matches(p, w, R, split(global, {50, 50, 50, 50}), fmt::format("{} all slots to expert 13", p.name()));
  // Tokens whose slots are all -1 get zeros.
  for (int64_t t = 0; t < global.tokens; t += 3)
    for (int64_t k = 0; k < p.top_k; ++k) global.set_id(t, k, -1);
  expect_matches(p, w, R, split(global, {50, 50, 50, 50}), fmt::format("{} every third token empty", p.name()));
}

// Each rank's own tokens pass the shared expert (on the rank's side stream) and the reduce adds
// its output. Bitwise equal to the world-size-1 layer when both run the same shared-expert
// kernels: every rank and the global batch below T = 64 (dot products), or all from it
// (tensor cores).
TEST_P(EpSimOneGpu, SharedExpertIsAddedInTheReduce) {
  Problem p = testsupport::tiny_problem(GetParam());
  p.max_tokens = 96;
  p.shared_intermediate = 128;
  const WeightSet w = testsupport::random_weights(p, native_format(p), 51);
  const std::vector<std::vector<int64_t>> layouts = {{5, 0, 20, 30}, {64, 70, 96, 80}};
  for (const std::vector<int64_t>& tokens : layouts) {
    const int64_t total = std::accumulate(tokens.begin(), tokens.end(), int64_t{0});
    Inputs global = testsupport::random_inputs(p, total, 52 + total, {.skip_fraction = 0.2});
    for (int64_t k = 0; k < p.top_k; ++k) global.set_id(total - 1, k, -1);  // the shared expert alone
    expect_matches(p, w, 4, split(global, tokens), fmt::format("{} + shared expert Is=128", p.name()));
  }
}

TEST_P(EpSimOneGpu, StructuredInputsEncodeRankAndToken) {
  const int R = 8;
  Problem p = testsupport::tiny_problem(GetParam());
  p.max_tokens = 16;
  const WeightSet w = testsupport::random_weights(p, native_format(p), 41);
  std::vector<Inputs> per_rank;
  for (int r = 0; r < R; ++r) {
    Inputs in = testsupport::random_inputs(p, 16 - r, 500 + r);
    // x[t, j] = ((1000 r + t + j) mod 23 - 11) / 8: every (rank, token) row is distinct and
    // exactly representable, so a row delivered to the wrong slot shows as an error of order 1.
    for (int64_t t = 0; t < in.tokens; ++t)
      for (int64_t j = 0; j < p.hidden; ++j)
        in.x[t * p.hidden + j] = float_to_bf16(static_cast<float>((1000 * r + t + j) % 23 - 11) / 8.0f);
    // Slot k of token t goes to rank (r + t + k) mod R: every rank sends to every rank.
    for (int64_t t = 0; t < in.tokens; ++t)
      for (int64_t k = 0; k < p.top_k; ++k)
        in.set_id(t, k, ((r + t + k) % R) * (p.num_experts / R) + (t + k) % (p.num_experts / R));
    per_rank.push_back(in);
  }
  expect_matches(p, w, R, per_rank, fmt::format("{} structured x (rank, token)", p.name()));
}

TEST_P(EpSimOneGpu, CallerQuantizedActivations) {
  const int R = 2;
  Problem p = testsupport::tiny_problem(GetParam());
  p.max_tokens = 80;
  p.quantize_input = false;
  const WeightSet w = testsupport::random_weights(p, native_format(p), 51);
  Inputs global = testsupport::random_inputs(p, 80 + 33, 52, {.skip_fraction = 0.1});
  testsupport::quantize_inputs_for_caller(p, global);
  expect_matches(p, w, R, split(global, {80, 33}), fmt::format("{} quantize_input=false", p.name()));
}

TEST_P(EpSimOneGpu, RerunsAndGraphReplayAreBitwiseEqualAndTheWorkspaceStaysClean) {
  const int R = 4;
  Problem p = testsupport::tiny_problem(GetParam());
  p.max_tokens = 128;
  const WeightSet w = testsupport::random_weights(p, native_format(p), 61);
  const Inputs global = testsupport::random_inputs(p, 4 * 100, 62, {.skip_fraction = 0.2});
  const std::vector<Inputs> per_rank = split(global, {128, 100, 0, 100});
  cuda::ep::SimEpGroup group(options(p, R), rank_weights(p, w, R));
  const SimRun first = run_group(group, p, per_rank);
  const uint64_t h = hash_bits(first.y);
  // Ten forwards back to back: a workspace left dirty by one forward would change the next.
  EXPECT_EQ(hash_bits(run_group(group, p, per_rank, 10).y), h);

  std::vector<DeviceInputs> d;
  std::vector<ForwardArgs> args;
  cudaStream_t stream;
  MOE_EP_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  for (const Inputs& in : per_rank) d.push_back(to_device(p, in));
  for (const DeviceInputs& di : d) args.push_back(di.args(stream));
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  MOE_EP_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  group.forward(args, stream);
  MOE_EP_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  MOE_EP_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  for (int rep = 0; rep < 3; ++rep) {
    for (const DeviceInputs& di : d) MOE_EP_CUDA_CHECK(cudaMemset(di.y.get(), 0xFF, di.tokens * p.hidden * 2));
    MOE_EP_CUDA_CHECK(cudaGraphLaunch(exec, stream));
    MOE_EP_CUDA_CHECK(cudaStreamSynchronize(stream));
    std::vector<uint16_t> y;
    for (const DeviceInputs& di : d) {
      std::vector<uint16_t> part(di.tokens * p.hidden);
      if (!part.empty()) MOE_EP_CUDA_CHECK(cudaMemcpy(part.data(), di.y.get(), part.size() * 2, cudaMemcpyDeviceToHost));
      y.insert(y.end(), part.begin(), part.end());
    }
    ASSERT_EQ(hash_bits(y), h) << "graph replay " << rep;
  }
  EXPECT_EQ(group.read_error_flags(), 0u);
  MOE_EP_CUDA_CHECK(cudaGraphExecDestroy(exec));
  MOE_EP_CUDA_CHECK(cudaGraphDestroy(graph));
  MOE_EP_CUDA_CHECK(cudaStreamDestroy(stream));
}

TEST_P(EpSimOneGpu, OutOfRangeIdsAreSkippedAndFlagged) {
  const int R = 2;
  Problem p = testsupport::tiny_problem(GetParam());
  p.max_tokens = 40;
  const WeightSet w = testsupport::random_weights(p, native_format(p), 71);
  Inputs global = testsupport::random_inputs(p, 70, 72);
  std::vector<Inputs> bad = split(global, {40, 30});
  bad[1].set_id(3, 1, p.num_experts);
  bad[0].set_id(17, 0, -5);
  std::vector<Inputs> skipped = bad;
  skipped[1].set_id(3, 1, -1);
  skipped[0].set_id(17, 0, -1);
  const References ref = references(p, w, testsupport::concat_inputs(skipped));
  cuda::ep::SimEpGroup group(options(p, R), rank_weights(p, w, R));
  const SimRun run = run_group(group, p, bad);
  EXPECT_EQ(run.flags, kErrorExpertIdOutOfRange);
  EXPECT_EQ(run.y, ref.cuda);
  EXPECT_EQ(group.read_error_flags(), 0u);  // cleared by the first read
}

TEST_P(EpSimOneGpu, ARankThatNeverArrivesEndsInATimeoutNamingRankAndPhase) {
  const int R = 2;
  Problem p = testsupport::tiny_problem(GetParam());
  p.max_tokens = 16;
  const WeightSet w = testsupport::random_weights(p, native_format(p), 81);
  const Inputs global = testsupport::random_inputs(p, 32, 82);
  cuda::ep::SimEpGroup group(options(p, R, /*timeout_ms=*/200), rank_weights(p, w, R));
  group.set_absent_ranks(1u << 1);
  const auto start = std::chrono::steady_clock::now();
  std::vector<DeviceInputs> d;
  std::vector<ForwardArgs> args;
  for (const Inputs& in : split(global, {16, 16})) d.push_back(to_device(p, in));
  for (const DeviceInputs& di : d) args.push_back(di.args(nullptr));
  group.forward(args);
  group.forward(args);  // a broken world: its barriers return at once
  std::string message;
  ErrorCode code = ErrorCode::kInternal;
  try {
    group.read_error_flags();
  } catch (const Error& e) {
    message = e.what();
    code = e.code();
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(code, ErrorCode::kTimeout) << message;
  EXPECT_NE(message.find("rank 0 timed out in phase dispatch"), std::string::npos) << message;
  EXPECT_NE(message.find("waiting for rank 1"), std::string::npos) << message;
  // Two forwards: one bounded wait (0.2 s) and one that returns at once, not two waits per step.
  EXPECT_LT(s, 5.0) << message;
  fmt::print("[ ep sim  ] absent rank 1: {:.2f} s, {}\n", s, message);
}

INSTANTIATE_TEST_SUITE_P(Recipes, EpSimOneGpu, ::testing::Values("mxfp4", "nvfp4"));

// SimulatedEpGroup::create on cuda:0 (moe_ep/simulated_group.h) is this group behind the
// registry: the same y bits and workspace, step times for every step, the absent-rank timeout.
TEST_P(EpSimOneGpu, ThePublicGroupIsThisGroup) {
  const int R = 4;
  Problem p = testsupport::tiny_problem(GetParam());
  p.max_tokens = 48;
  const WeightSet w = testsupport::random_weights(p, native_format(p), 91);
  const Inputs global = testsupport::random_inputs(p, 48 + 0 + 40 + 33, 92, {.skip_fraction = 0.1});
  const std::vector<Inputs> per_rank = split(global, {48, 0, 40, 33});
  cuda::ep::SimEpGroup direct(options(p, R), rank_weights(p, w, R));
  const std::unique_ptr<SimulatedEpGroup> group = SimulatedEpGroup::create(options(p, R), rank_weights(p, w, R));
  EXPECT_EQ(group->world_size(), R);
  EXPECT_EQ(group->layout().total_bytes, direct.layout().total_bytes);
  EXPECT_EQ(group->notes(), direct.notes());
  const SimRun a = run_group(direct, p, per_rank), b = run_group(*group, p, per_rank);
  EXPECT_EQ(a.flags, 0u);
  EXPECT_EQ(b.flags, 0u);
  EXPECT_EQ(a.y, b.y) << p.str();
  std::vector<DeviceInputs> d;
  std::vector<ForwardArgs> args;
  for (const Inputs& in : per_rank) d.push_back(to_device(p, in));
  for (const DeviceInputs& di : d) args.push_back(di.args(nullptr));
  const EpStepTimes t = group->forward_timed(args);
  for (const double us : {t.quantize_us, t.dispatch_us, t.local_experts_us, t.combine_us, t.reduce_us})
    EXPECT_GT(us, 0.0) << p.str();
  EXPECT_EQ(group->read_error_flags(), 0u);
  SimulatedGroupOptions bounded = options(p, R, /*timeout_ms=*/200);
  const std::unique_ptr<SimulatedEpGroup> broken = SimulatedEpGroup::create(bounded, rank_weights(p, w, R));
  broken->set_absent_ranks(1u << 2);
  broken->forward(args);
  try {
    broken->read_error_flags();
    ADD_FAILURE() << "an absent rank went unnoticed";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kTimeout) << e.what();
    EXPECT_NE(e.message().find("waiting for rank 2"), std::string::npos) << e.message();
  }
}

// Host-side parts, no GPU needed: launch sizes, the timeout message, bad group options.
TEST(EpSimHost, BlocksPerRankCoverTheRowsAndStayBounded) {
  cuda::ep::EpGeometry g;
  g.world_size = 8;
  g.top_k = 6;
  g.hidden = 4096;
  g.slots_per_source = 4096 * 6;
  using cuda::ep::EpStep;
  EXPECT_EQ(cuda::ep::ep_blocks_per_rank(EpStep::kDispatch, g, 0, 8, 132), 1);  // T = 0 still signals
  EXPECT_EQ(cuda::ep::ep_blocks_per_rank(EpStep::kDispatch, g, 1, 8, 132), 1);
  EXPECT_EQ(cuda::ep::ep_blocks_per_rank(EpStep::kDispatch, g, 4096, 8, 132), 33);  // 2 per SM in all
  EXPECT_EQ(cuda::ep::ep_blocks_per_rank(EpStep::kDispatch, g, 4096, 1, 132), 264);
  EXPECT_EQ(cuda::ep::ep_blocks_per_rank(EpStep::kReduce, g, 2, 1, 132), 4);  // 2 x 512 threads
  EXPECT_EQ(cuda::ep::ep_blocks_per_rank(EpStep::kCombine, g, 1, 1, 132), 264);
  cuda::ep::EpSync sync{};
  EXPECT_EQ(cuda::ep::describe_timeout(sync, 0, 100, "x"), "");
  sync.error_flags = cuda::ep::kEpErrorPeerTimeout;
  sync.timeout_phase = cuda::ep::kPhaseCombine;
  sync.timeout_peer = 5;
  sync.timeout_epoch = 12;
  const std::string m = cuda::ep::describe_timeout(sync, 3, 250, "NCCL LSA barrier");
  EXPECT_NE(m.find("rank 3 timed out in phase combine (barrier 12) waiting for rank 5"), std::string::npos) << m;
  EXPECT_NE(m.find("timeout_ms = 250"), std::string::npos) << m;
}

TEST(EpSimHost, BadGroupOptionsNameTheField) {
  const Problem p = testsupport::tiny_problem("mxfp4");
  auto message = [&](cuda::ep::SimGroupOptions o, size_t packs) -> std::string {
    try {
      std::vector<WeightPack> w(packs);
      cuda::ep::SimEpGroup group(o, w);
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
      return e.what();
    }
    return "no error";
  };
  EXPECT_NE(message(options(p, 9), 9).find("world_size = 9"), std::string::npos);
  EXPECT_NE(message(options(p, 2), 3).find("weights has 3 entries"), std::string::npos);
  EXPECT_NE(message(options(p, 3), 3).find("not divisible by world_size = 3"), std::string::npos);
  auto cpu = options(p, 2);
  cpu.device = Device::cpu();
  EXPECT_NE(message(cpu, 2).find("runs on a CUDA device"), std::string::npos);
}

}  // namespace
}  // namespace moe_ep::cudatest
