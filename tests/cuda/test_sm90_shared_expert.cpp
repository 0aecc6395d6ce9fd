// The shared expert on the GPU (cuda/sm90_shared_expert.h) against the CPU SharedExpert:
// forward and add_to, tiny and deepseek-v4-flash shapes, clamp on and off, partial token
// groups and tiles, both kernel ways; outputs poisoned first; float64 relative error within the
// mxfp4 threshold; reruns bitwise equal. The public SharedExpert on the GPU gives its bits.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <tuple>
#include <utility>

#include <fmt/format.h>

#include "cuda/device_buffer.h"
#include "cuda/errors.h"
#include "cuda/kernels/sm90_shared_expert.h"
#include "cuda/sm90_shared_expert.h"
#include "cuda_test_util.h"
#include "stream_read_probe.h"
#include "moe_ep/formats.h"
#include "moe_ep/shared_expert.h"

namespace moe_ep {
namespace {

std::vector<uint16_t> gaussian_bf16(size_t n, float sigma, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d(0.0f, sigma);
  std::vector<uint16_t> v(n);
  for (uint16_t& b : v) b = float_to_bf16(d(rng));
  return v;
}

double rel_err(const std::vector<uint16_t>& y, const std::vector<uint16_t>& ref, double* exact) {
  double num = 0, den = 0;
  size_t same = 0;
  for (size_t i = 0; i < y.size(); ++i) {
    const double a = bf16_to_float(y[i]), b = bf16_to_float(ref[i]);
    if (!std::isfinite(a)) return INFINITY;
    num += (a - b) * (a - b);
    den += b * b;
    same += y[i] == ref[i];
  }
  *exact = static_cast<double>(same) / static_cast<double>(y.size());
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

struct Case {
  int64_t H, I, T;
  std::optional<float> clamp;
  bool x_off_by_one = false;  // x one bf16 past a 4-byte boundary (the 2-byte loads of the dot way)
};

struct Outcome {
  double e_out = 0, e_add = 0, exact_out = 0, exact_add = 0;
  bool rerun_bitwise = false, tensor_cores = false, tiled = false;
  std::vector<uint16_t> out, add;
};

// forward (into a poisoned y) and add_to against the CPU SharedExpert on fresh gaussian data.
Outcome run_case(const Case& c, cuda::Sm90SharedExpert::Way way,
                 cuda::Sm90SharedExpert::Layout layout = cuda::Sm90SharedExpert::Layout::kAuto) {
  const std::vector<uint16_t> w13 = gaussian_bf16(2 * c.I * c.H, 4.0f / std::sqrt(float(c.H)), c.H + c.T);
  const std::vector<uint16_t> w2 = gaussian_bf16(c.H * c.I, 1.0f / std::sqrt(float(c.I)), c.I + 3);
  const std::vector<uint16_t> x = gaussian_bf16(c.T * c.H, 1.0f, c.T + 11);
  const std::vector<uint16_t> y0 = gaussian_bf16(c.T * c.H, 0.5f, c.T + 12);
  const TensorView w13v = TensorView::contiguous(const_cast<uint16_t*>(w13.data()), DType::kBF16, {2 * c.I, c.H});
  const TensorView w2v = TensorView::contiguous(const_cast<uint16_t*>(w2.data()), DType::kBF16, {c.H, c.I});
  auto cpu = SharedExpert::create(c.H, c.I, c.clamp, w13v, w2v);
  std::vector<uint16_t> ref_out(c.T * c.H, 0xFFFF), ref_add = y0;
  const TensorView xv = TensorView::contiguous(const_cast<uint16_t*>(x.data()), DType::kBF16, {c.T, c.H});
  cpu->forward(xv, TensorView::contiguous(ref_out.data(), DType::kBF16, {c.T, c.H}));
  cpu->add_to(xv, TensorView::contiguous(ref_add.data(), DType::kBF16, {c.T, c.H}));

  cuda::Sm90SharedExpert gpu(c.H, c.I, c.clamp, w13v, w2v, 512, 0, /*own_scratch=*/true, layout);
  gpu.set_way(way);
  Outcome r;
  r.tensor_cores = gpu.uses_tensor_cores(c.T);
  r.tiled = gpu.tiled();
  cuda::DeviceBuffer dx_buf(2 * (c.T * c.H + 1)), dy(c.T * c.H * 2);
  uint16_t* dx = dx_buf.get<uint16_t>() + (c.x_off_by_one ? 1 : 0);
  MOE_EP_CUDA_CHECK(cudaMemcpy(dx, x.data(), 2 * x.size(), cudaMemcpyHostToDevice));
  std::vector<uint16_t> out(c.T * c.H), again(c.T * c.H), add(c.T * c.H);
  for (std::vector<uint16_t>* dst : {&out, &again}) {
    MOE_EP_CUDA_CHECK(cudaMemset(dy.get(), 0xFF, dy.bytes()));
    gpu.forward(dx, dy.get<uint16_t>(), c.T, nullptr);
    MOE_EP_CUDA_CHECK(cudaMemcpy(dst->data(), dy.get(), dy.bytes(), cudaMemcpyDeviceToHost));
  }
  MOE_EP_CUDA_CHECK(cudaMemcpy(dy.get(), y0.data(), dy.bytes(), cudaMemcpyHostToDevice));
  gpu.add_to(dx, dy.get<uint16_t>(), c.T, nullptr);
  MOE_EP_CUDA_CHECK(cudaMemcpy(add.data(), dy.get(), dy.bytes(), cudaMemcpyDeviceToHost));
  r.e_out = rel_err(out, ref_out, &r.exact_out);
  r.e_add = rel_err(add, ref_add, &r.exact_add);
  r.rerun_bitwise = out == again;
  r.out = std::move(out);
  r.add = std::move(add);
  return r;
}

std::string describe(const Case& c, const Outcome& r) {
  return fmt::format("H={} I={} T={} clamp={}{} ({}): forward rel_err {:.3e} ({:.4f} of elements bitwise), "
                     "add_to {:.3e} ({:.4f})", c.H, c.I, c.T, c.clamp.value_or(INFINITY),
                     c.x_off_by_one ? " x+2B" : "", r.tensor_cores ? "tensor cores" : "dot products", r.e_out, r.exact_out, r.e_add, r.exact_add);
}

TEST(Sm90SharedExpert, MatchesTheCpuSharedExpert) {
  MOE_EP_REQUIRE_CUDA();
  const double threshold = testing::device_rel_err_threshold(Recipe::kMxfp4);
  for (const Case& c : {Case{256, 128, 1, 10.0f}, Case{256, 128, 7, 10.0f}, Case{256, 128, 70, std::nullopt},
                        Case{256, 128, 5, 10.0f, true}, Case{144, 80, 3, 10.0f}, Case{144, 80, 1, std::nullopt, true},
                        Case{4096, 2048, 1, 10.0f},
                        Case{4096, 2048, 6, 10.0f}, Case{4096, 2048, 2, std::nullopt, true}}) {
    const Outcome r = run_case(c, cuda::Sm90SharedExpert::Way::kDotProducts);
    const std::string what = describe(c, r);
    EXPECT_FALSE(r.tensor_cores) << what;
    EXPECT_LE(r.e_out, threshold) << what;
    EXPECT_LE(r.e_add, threshold) << what;
    EXPECT_TRUE(r.rerun_bitwise) << what;
    EXPECT_GT(r.exact_out, 0.9) << what << ": the sums follow the CPU order, so nearly all bits match";
    fmt::print("[ shared   ] {}\n", what);
  }
  std::vector<uint16_t> w(2 * 16 * 16);
  const TensorView bad = TensorView::contiguous(w.data(), DType::kBF16, {32, 16});
  EXPECT_THROW(cuda::Sm90SharedExpert(16, 16, -1.0f, bad, bad, 1, 0), Error);
  cuda::Sm90SharedExpert odd(16, 16, 1.0f, bad, TensorView::contiguous(w.data(), DType::kBF16, {16, 16}), 1, 0);
  EXPECT_THROW(odd.set_way(cuda::Sm90SharedExpert::Way::kTensorCores), Error);
}

// The prefill kernels: partial 128-row tiles, one and several column tiles, clamp on and off;
// the automatic choice takes them from kSharedExpertMmaMinTokens tokens on.
TEST(Sm90SharedExpert, TensorCoresMatchTheCpuSharedExpert) {
  MOE_EP_REQUIRE_CUDA();
  const double threshold = testing::device_rel_err_threshold(Recipe::kMxfp4);
  for (const Case& c : {Case{256, 128, 1, 10.0f}, Case{256, 128, 37, std::nullopt}, Case{256, 128, 128, 10.0f},
                        Case{256, 128, 300, 10.0f}, Case{384, 192, 129, 1.0f}, Case{4096, 2048, 200, 10.0f}}) {
    const Outcome r = run_case(c, cuda::Sm90SharedExpert::Way::kTensorCores);
    const std::string what = describe(c, r);
    EXPECT_TRUE(r.tensor_cores) << what;
    EXPECT_LE(r.e_out, threshold) << what;
    EXPECT_LE(r.e_add, threshold) << what;
    EXPECT_TRUE(r.rerun_bitwise) << what;
    EXPECT_GT(r.exact_out, 0.5) << what << ": fp32 sums in another order still round to the same bf16 mostly";
    fmt::print("[ shared   ] {}\n", what);
  }
  const Outcome autom = run_case(Case{256, 128, 64, 10.0f}, cuda::Sm90SharedExpert::Way::kAuto);
  EXPECT_TRUE(autom.tensor_cores) << describe(Case{256, 128, 64, 10.0f}, autom);
  EXPECT_LE(autom.e_out, threshold);
  const Outcome decode = run_case(Case{256, 128, 63, 10.0f}, cuda::Sm90SharedExpert::Way::kAuto);
  EXPECT_FALSE(decode.tensor_cores) << describe(Case{256, 128, 63, 10.0f}, decode);
}

// The tiled layout (Sm90SharedExpert::Layout::kTiled: relaid on the device at load) changes
// where the weights are, not which terms meet in which order: both ways give the row-major
// layout's bits, forward and add_to, and stay within the threshold of the CPU.
TEST(Sm90SharedExpert, TiledLayoutGivesTheRowMajorBitsBothWays) {
  MOE_EP_REQUIRE_CUDA();
  using Way = cuda::Sm90SharedExpert::Way;
  using Layout = cuda::Sm90SharedExpert::Layout;
  const double threshold = testing::device_rel_err_threshold(Recipe::kMxfp4);
  for (const Case& c : {Case{256, 256, 1, 10.0f}, Case{512, 256, 7, std::nullopt}, Case{256, 512, 5, 10.0f, true},
                        Case{512, 256, 130, 10.0f}, Case{4096, 2048, 1, 10.0f}, Case{4096, 2048, 200, 10.0f}})
    for (const Way way : {Way::kDotProducts, Way::kTensorCores}) {
      const Outcome plain = run_case(c, way, Layout::kRowMajor), tiled = run_case(c, way, Layout::kTiled);
      const std::string what = describe(c, tiled);
      EXPECT_FALSE(plain.tiled);
      EXPECT_TRUE(tiled.tiled) << what;
      // (uses_tensor_cores(T) does not see x; an x 2 bytes off falls back to dot products at launch)
      if (!c.x_off_by_one) {
        EXPECT_EQ(tiled.tensor_cores, way == Way::kTensorCores) << what;
      }
      EXPECT_EQ(tiled.out, plain.out) << what << ": forward differs from the row-major layout";
      EXPECT_EQ(tiled.add, plain.add) << what << ": add_to differs from the row-major layout";
      EXPECT_LE(tiled.e_out, threshold) << what;
      EXPECT_LE(tiled.e_add, threshold) << what;
      fmt::print("[ shared   ] tiled {}\n", what);
    }
  std::vector<uint16_t> w(2 * 384 * 256);
  const TensorView w13 = TensorView::contiguous(w.data(), DType::kBF16, {2 * 256, 384});
  const TensorView w2 = TensorView::contiguous(w.data(), DType::kBF16, {384, 256});
  try {
    cuda::Sm90SharedExpert odd(384, 256, 1.0f, w13, w2, 1, 0, true, Layout::kTiled);
    ADD_FAILURE() << "H = 384 accepted in the tiled layout";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("2 * H * I < 2^31; got H = 384, I = 256"), std::string::npos) << e.message();
  }
  // Auto: the default layout where the sizes allow it, row-major where they do not.
  EXPECT_FALSE(cuda::Sm90SharedExpert(384, 256, 1.0f, w13, w2, 1, 0).tiled());
  const TensorView w13_fit = TensorView::contiguous(w.data(), DType::kBF16, {2 * 256, 256});
  const TensorView w2_fit = TensorView::contiguous(w.data(), DType::kBF16, {256, 256});
  EXPECT_EQ(cuda::Sm90SharedExpert(256, 256, 1.0f, w13_fit, w2_fit, 1, 0).tiled(), cuda::kSharedExpertTiledByDefault);
  // The public entry points refuse shapes the layout does not cover.
  cuda::DeviceBuffer scratch(2 * 8 * 256 * 2);
  EXPECT_EQ(cuda::launch_sm90_shared_expert_tile_weights(scratch.get<uint16_t>(), scratch.get<uint16_t>() + 8 * 256,
                                                         6, 256, 0, nullptr),
            cudaErrorInvalidValue);  // rows % 4 != 0
  EXPECT_EQ(cuda::launch_sm90_shared_expert_tile_weights(scratch.get<uint16_t>(), scratch.get<uint16_t>() + 8 * 256,
                                                         8, 128, 0, nullptr),
            cudaErrorInvalidValue);  // k % 256 != 0
}

// SharedExpert::create on cuda:0 (moe_ep/shared_expert.h) is this expert behind the registry:
// the automatic way's bits, forward and add_to, at a decode and a prefill T, eager and replayed
// from a captured graph; tensors elsewhere than on the device and calls above max_tokens are
// refused before any launch.
TEST(Sm90SharedExpert, ThePublicSharedExpertOnTheGpuIsThisOne) {
  MOE_EP_REQUIRE_CUDA();
  const int64_t H = 256, I = 128, max_tokens = 128;
  const std::vector<uint16_t> w13 = gaussian_bf16(2 * I * H, 4.0f / std::sqrt(float(H)), 91);
  const std::vector<uint16_t> w2 = gaussian_bf16(H * I, 1.0f / std::sqrt(float(I)), 92);
  const TensorView w13v = TensorView::contiguous(const_cast<uint16_t*>(w13.data()), DType::kBF16, {2 * I, H});
  const TensorView w2v = TensorView::contiguous(const_cast<uint16_t*>(w2.data()), DType::kBF16, {H, I});
  const cuda::Sm90SharedExpert direct(H, I, 10.0f, w13v, w2v, max_tokens, 0);
  const auto pub = SharedExpert::create(H, I, 10.0f, w13v, w2v, Device::cuda(0), max_tokens);
  EXPECT_EQ(pub->device(), Device::cuda(0));
  cudaStream_t s;
  MOE_EP_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  for (const int64_t T : {int64_t{5}, int64_t{100}}) {
    EXPECT_EQ(pub->kernels(T), direct.uses_tensor_cores(T) ? "tensor cores" : "dot products") << "T = " << T;
    const std::vector<uint16_t> x = gaussian_bf16(T * H, 1.0f, 93 + T), y0 = gaussian_bf16(T * H, 0.5f, 94 + T);
    const cuda::DeviceBuffer dx = cuda::DeviceBuffer::upload(x);
    cuda::DeviceBuffer dy(T * H * 2);
    const TensorView xv = TensorView::contiguous(dx.get(), DType::kBF16, {T, H}, Device::cuda(0));
    const TensorView yv = TensorView::contiguous(dy.get(), DType::kBF16, {T, H}, Device::cuda(0));
    auto result = [&](const std::function<void()>& call, const std::vector<uint16_t>* start) {
      if (start)
        MOE_EP_CUDA_CHECK(cudaMemcpy(dy.get(), start->data(), dy.bytes(), cudaMemcpyHostToDevice));
      else
        MOE_EP_CUDA_CHECK(cudaMemset(dy.get(), 0xFF, dy.bytes()));
      call();
      MOE_EP_CUDA_CHECK(cudaDeviceSynchronize());
      std::vector<uint16_t> out(T * H);
      MOE_EP_CUDA_CHECK(cudaMemcpy(out.data(), dy.get(), dy.bytes(), cudaMemcpyDeviceToHost));
      return out;
    };
    const auto* xp = dx.get<uint16_t>();
    auto* yp = dy.get<uint16_t>();
    const std::vector<uint16_t> out = result([&] { direct.forward(xp, yp, T, s); }, nullptr);
    const std::vector<uint16_t> add = result([&] { direct.add_to(xp, yp, T, s); }, &y0);
    EXPECT_EQ(result([&] { pub->forward(xv, yv, s); }, nullptr), out) << "forward, T = " << T;
    EXPECT_EQ(result([&] { pub->add_to(xv, yv, s); }, &y0), add) << "add_to, T = " << T;
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    MOE_EP_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    pub->forward(xv, yv, s);
    MOE_EP_CUDA_CHECK(cudaStreamEndCapture(s, &graph));
    MOE_EP_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
    EXPECT_EQ(result([&] { MOE_EP_CUDA_CHECK(cudaGraphLaunch(exec, s)); }, nullptr), out) << "replay, T = " << T;
    MOE_EP_CUDA_CHECK(cudaGraphExecDestroy(exec));
    MOE_EP_CUDA_CHECK(cudaGraphDestroy(graph));
  }
  MOE_EP_CUDA_CHECK(cudaStreamDestroy(s));
  std::vector<uint16_t> host(2 * max_tokens * H);
  const TensorView on_host = TensorView::contiguous(host.data(), DType::kBF16, {4, H});
  const TensorView too_many = TensorView::contiguous(host.data(), DType::kBF16, {max_tokens + 1, H});
  for (const auto& [x, expected] : {std::pair{on_host, "shared expert x is on cpu; expected cuda:0"},
                                    std::pair{too_many, "expected at most max_tokens = 128"}}) {
    try {
      pub->forward(x, x);
      ADD_FAILURE() << expected;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.message();
      EXPECT_NE(e.message().find(expected), std::string::npos) << e.message();
    }
  }
  EXPECT_THROW(SharedExpert::create(H, I, 10.0f, w13v, w2v, Device::cuda(0), 0), Error);  // a GPU needs max_tokens
}

// ---- the tiled weight layout (SharedExpertParams::tiled_weights), kernel level ---------------
// The dot-product kernels on row-major weights and on the same weights in the tiled layout read
// the same terms in the same order: y bitwise equal. Opt-in timing of both at small T
// (MOE_EP_WGMMA_TIMING=1, the device runner's timing switch), flash and pro shapes.
struct SharedKernelRun {
  int64_t H, I, T;
  cuda::DeviceBuffer x, w13, w2, w13_tiled, w2_tiled, h, y;

  SharedKernelRun(int64_t H_, int64_t I_, int64_t T_, uint64_t seed) : H(H_), I(I_), T(T_) {
    const std::vector<uint16_t> w13h = gaussian_bf16(2 * I * H, 4.0f / std::sqrt(float(H)), seed);
    const std::vector<uint16_t> w2h = gaussian_bf16(H * I, 1.0f / std::sqrt(float(I)), seed + 1);
    // The tiled copies where the layout covers the sizes (elsewhere the index leaves the matrix:
    // the row-major bytes stand in, and the launch must refuse them).
    std::vector<uint16_t> t13 = w13h, t2 = w2h;
    if (cuda::shared_expert_tiles(H, I)) {
      for (int64_t r = 0; r < 2 * I; ++r)
        for (int64_t k = 0; k < H; ++k) t13[cuda::shared_expert_tiled_index(r, k, 2 * I, I)] = w13h[r * H + k];
      for (int64_t r = 0; r < H; ++r)
        for (int64_t k = 0; k < I; ++k) t2[cuda::shared_expert_tiled_index(r, k, H, 0)] = w2h[r * I + k];
    }
    x = cuda::DeviceBuffer::upload(gaussian_bf16(T * H, 1.0f, seed + 2));
    w13 = cuda::DeviceBuffer::upload(w13h);
    w2 = cuda::DeviceBuffer::upload(w2h);
    w13_tiled = cuda::DeviceBuffer::upload(t13);
    w2_tiled = cuda::DeviceBuffer::upload(t2);
    h = cuda::DeviceBuffer(T * I * 2);
    y = cuda::DeviceBuffer(T * H * 2);
  }

  cuda::SharedExpertParams params(bool tiled, bool bulk = false) {
    cuda::SharedExpertParams p;
    p.x = x.get<uint16_t>();
    p.w13 = (tiled ? w13_tiled : w13).get<uint16_t>();
    p.w2 = (tiled ? w2_tiled : w2).get<uint16_t>();
    p.h = h.get<uint16_t>();
    p.y = y.get<uint16_t>();
    p.num_tokens = static_cast<int32_t>(T);
    p.hidden = static_cast<int32_t>(H);
    p.intermediate = static_cast<int32_t>(I);
    p.clamp = 10.0f;
    p.path = cuda::SharedExpertPath::kDotProducts;
    p.tiled_weights = tiled ? 1 : 0;
    p.bulk_weights = bulk ? 1 : 0;
    return p;
  }

  std::vector<uint16_t> run(bool tiled, bool bulk = false) {
    MOE_EP_CUDA_CHECK(cudaMemset(h.get(), 0xFF, h.bytes()));  // each run writes h before reading it
    MOE_EP_CUDA_CHECK(cudaMemset(y.get(), 0xFF, y.bytes()));
    MOE_EP_CUDA_CHECK(cuda::launch_sm90_shared_expert(params(tiled, bulk), nullptr));
    MOE_EP_CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<uint16_t> out(T * H);
    MOE_EP_CUDA_CHECK(cudaMemcpy(out.data(), y.get(), y.bytes(), cudaMemcpyDeviceToHost));
    return out;
  }
};

// The tiled index is a permutation of each matrix, a warp's stage (4 rows x 256 terms, the rows
// each warp of the two kernels reads) is one contiguous 2 KB block, and the warps' blocks of one
// stage follow each other.
TEST(Sm90SharedExpertLayout, TiledIndexPermutesAndGroupsEachWarpsStage) {
  const int64_t H = 512, I = 256;
  std::vector<int> seen13(2 * I * H, 0), seen2(H * I, 0);
  for (int64_t r = 0; r < 2 * I; ++r)
    for (int64_t k = 0; k < H; ++k) ++seen13[cuda::shared_expert_tiled_index(r, k, 2 * I, I)];
  for (int64_t r = 0; r < H; ++r)
    for (int64_t k = 0; k < I; ++k) ++seen2[cuda::shared_expert_tiled_index(r, k, H, 0)];
  EXPECT_EQ(std::count(seen13.begin(), seen13.end(), 1), static_cast<int64_t>(seen13.size()));
  EXPECT_EQ(std::count(seen2.begin(), seen2.end(), 1), static_cast<int64_t>(seen2.size()));
  // gate_up warp b = 3 (gate rows 6, 7, up rows I + 6, I + 7), stage 1: one block, in row order.
  const int64_t base = cuda::shared_expert_tiled_index(6, 256, 2 * I, I);
  EXPECT_EQ(base, 2 * I * 256 + 3 * 1024);
  for (int r = 0; r < 4; ++r)
    for (int64_t k = 256; k < 512; ++k)
      EXPECT_EQ(cuda::shared_expert_tiled_index(r < 2 ? 6 + r : I + 4 + r, k, 2 * I, I), base + r * 256 + k - 256);
  // Warp b = 4's block of that stage follows warp 3's.
  EXPECT_EQ(cuda::shared_expert_tiled_index(8, 256, 2 * I, I), base + 1024);
  // down warp b = 5 (rows 20 .. 23), stages 0 and 1.
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(cuda::shared_expert_tiled_index(20 + r, 7, H, 0), 5 * 1024 + r * 256 + 7);
    EXPECT_EQ(cuda::shared_expert_tiled_index(20 + r, 256 + 7, H, 0), H * 256 + 5 * 1024 + r * 256 + 7);
  }
  EXPECT_EQ(cuda::shared_expert_tiled_stage_stride(H), H * 256);
}

TEST(Sm90SharedExpert, TiledWeightsGiveTheRowMajorResultsBitForBit) {
  MOE_EP_REQUIRE_CUDA();
  for (const auto& [H, I, T] : {std::tuple<int64_t, int64_t, int64_t>{256, 256, 1}, {512, 256, 7},
                                {4096, 2048, 1}, {4096, 2048, 5}}) {
    SharedKernelRun run(H, I, T, 17 + T);
    const std::vector<uint16_t> plain = run.run(false);
    // Tiled, and both layouts through bulk weight copies.
    for (const auto& [tiled, bulk] : {std::pair{true, false}, {false, true}, {true, true}}) {
      const std::vector<uint16_t> got = run.run(tiled, bulk);
      int64_t nan = 0;
      for (uint16_t v : got) nan += std::isnan(bf16_to_float(v));
      const std::string what = fmt::format("H={} I={} T={} tiled={} bulk={}", H, I, T, tiled, bulk);
      EXPECT_EQ(nan, 0) << what << ": unwritten (NaN-poisoned) outputs";
      EXPECT_EQ(got, plain) << what;
    }
  }
  // Partial last stages (H, I not multiples of 256) through bulk copies of the row-major rows:
  // 2 and 6 stages (the ring's slots reused), one and two token blocks.
  for (const auto& [H, I, T] : {std::tuple<int64_t, int64_t, int64_t>{400, 272, 3}, {1296, 784, 6}}) {
    SharedKernelRun part(H, I, T, 23);
    const std::vector<uint16_t> plain = part.run(false), bulk = part.run(false, true);
    int64_t nan = 0;
    for (uint16_t v : bulk) nan += std::isnan(bf16_to_float(v));
    EXPECT_EQ(nan, 0) << "H=" << H << " I=" << I << " bulk: unwritten (NaN-poisoned) outputs";
    EXPECT_EQ(bulk, plain) << "H=" << H << " I=" << I << " T=" << T << " bulk";
  }
  SharedKernelRun odd(384, 256, 1, 5);  // H % 256 != 0: the tiled layout is refused
  EXPECT_EQ(cuda::launch_sm90_shared_expert(odd.params(true), nullptr), cudaErrorInvalidValue);
}

TEST(Sm90SharedExpertTiming, TiledWeightsAtSmallT) {
  MOE_EP_REQUIRE_CUDA();
  if (!std::getenv("MOE_EP_WGMMA_TIMING")) GTEST_SKIP() << "set MOE_EP_WGMMA_TIMING=1 to run (timed)";
  cudaEvent_t a, b;
  MOE_EP_CUDA_CHECK(cudaEventCreate(&a));
  MOE_EP_CUDA_CHECK(cudaEventCreate(&b));
  // Read between runs so each starts with none of the weights in L2 (as in a layer, where the
  // routed experts stream through it) and no dirty lines to write back (a memset leaves an L2 of
  // them, written back while the next run reads: bench/RESULTS.md, stop 34).
  cuda::DeviceBuffer flush(size_t{256} << 20);
  cuda::DeviceBuffer sink(sizeof(uint32_t));
  MOE_EP_CUDA_CHECK(cudaMemset(flush.get(), 0, flush.bytes()));
  // Median of 20 timed launches of `launch`, each after the flush.
  auto median_us = [&](auto&& launch) {
    std::vector<double> us;
    for (int i = 0; i < 23; ++i) {
      MOE_EP_CUDA_CHECK(cuda::test::launch_stream_read(flush.get(), flush.bytes(), sink.get<uint32_t>(), nullptr));
      MOE_EP_CUDA_CHECK(cudaEventRecord(a));
      MOE_EP_CUDA_CHECK(launch());
      MOE_EP_CUDA_CHECK(cudaEventRecord(b));
      MOE_EP_CUDA_CHECK(cudaEventSynchronize(b));
      float ms = 0.0f;
      MOE_EP_CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
      if (i >= 3) us.push_back(ms * 1e3);
    }
    std::sort(us.begin(), us.end());
    return us[us.size() / 2];
  };
  for (const auto& [name, H, I] : {std::tuple<const char*, int64_t, int64_t>{"flash", 4096, 2048}, {"pro", 7168, 3072}})
    for (int64_t T : {1, 4}) {
      SharedKernelRun run(H, I, T, 29);
      const double bytes = 3.0 * H * I * 2;
      if (T == 1) {  // the floor in practice: plain reads of as many bytes, and of W13's alone
        cuda::DeviceBuffer stream(static_cast<size_t>(bytes));
        for (const double share : {1.0, 2.0 / 3.0}) {
          const size_t n = static_cast<size_t>(bytes * share);
          const double us =
              median_us([&] { return cuda::test::launch_stream_read(stream.get(), n, sink.get<uint32_t>(), nullptr); });
          fmt::print("[ shared   ] {:<5} plain read of {:4.1f} MiB (one kernel)     {:8.2f} us  {:5.2f} TB/s\n", name,
                     n / 1048576.0, us, n / us * 1e-6);
        }
      }
      for (const auto& [tiled, bulk] : {std::pair{false, false}, {true, false}, {false, true}, {true, true}}) {
        const cuda::SharedExpertParams p = run.params(tiled, bulk);
        const double us = median_us([&] { return cuda::launch_sm90_shared_expert(p, nullptr); });
        fmt::print("[ shared   ] {:<5} T={} {:<9} {:<8} {:8.2f} us  {:5.2f} TB/s of weights\n", name, T,
                   tiled ? "tiled" : "row-major", bulk ? "bulk" : "cp.async", us, bytes / us * 1e-6);
      }
    }
  MOE_EP_CUDA_CHECK(cudaEventDestroy(a));
  MOE_EP_CUDA_CHECK(cudaEventDestroy(b));
}

}  // namespace
}  // namespace moe_ep
