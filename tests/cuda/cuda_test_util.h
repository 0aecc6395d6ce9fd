// Helpers of the GPU tests: device detection (tests skip with the reason when there is none),
// device copies of host tensors, running a layer on the GPU with a NaN-poisoned output, and
// comparing with the CPU reference.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include "cuda/device_buffer.h"
#include "moe_ep/layer.h"
#include "support/layer_problem.h"
#include "testing/synthetic.h"
#include "testing/tolerances.h"

namespace moe_ep::cudatest {

// "" when cuda:0 is an SM90 device the tests can use, else why not.
const std::string& cuda_unavailable_reason();

#define MOE_EP_REQUIRE_CUDA()                                                        \
  do {                                                                               \
    if (!::moe_ep::cudatest::cuda_unavailable_reason().empty())                      \
      GTEST_SKIP() << "no CUDA device: " << ::moe_ep::cudatest::cuda_unavailable_reason(); \
  } while (0)

// Relative-error threshold of the GPU layer against the CPU layer, same recipe
// (testing/tolerances.h, shared with `moe_ep run`). Both sides compute the recipe's exact
// products in fp32 and differ only in fp32 summation order (~1e-7 relative per dot product).
// That moves a bf16 rounding of gu or o only when a value sits that close to a rounding
// boundary; the flip then moves one code of the requantized h: an e4m3 step (2^-4 of one
// element) for mxfp4 -> expected ~1e-4, threshold 2e-3; an e2m1 step (up to 1/3 of one element)
// or a whole row's global scale for nvfp4 -> threshold 3e-2. Any indexing, layout or scaling bug
// gives errors of order 1.
inline double same_recipe_tolerance(Recipe recipe) { return testing::device_rel_err_threshold(recipe); }
// The FP8 wgmma GEMMs (NumericsPolicy::exact_accumulation = false): k32 sums with ~2^-14
// relative error, so more of those flips (testing/tolerances.h).
inline double wgmma_recipe_tolerance() { return testing::device_rel_err_threshold(Recipe::kMxfp4, false); }

// A device copy of a host tensor (same dtype and shape, Device::cuda(0)).
struct DeviceTensor {
  cuda::DeviceBuffer buffer;
  TensorView view;
};
DeviceTensor to_device(const TensorView& host);

// The per-call tensors of `in` on the device, and a device y.
struct DeviceInputs {
  DeviceTensor x, a, a_scale, a_global, ids, weights;
  cuda::DeviceBuffer y;
  int64_t tokens = 0, hidden = 0;
  ForwardArgs args(cudaStream_t stream) const;
};
DeviceInputs to_device(const testsupport::Problem& p, const testsupport::Inputs& in);

// Fills y with NaN, runs forward on `stream`, synchronizes and returns y (bf16 bits).
std::vector<uint16_t> run_on_gpu(Layer& layer, const DeviceInputs& in, cudaStream_t stream = nullptr);
// Captures one forward on `stream` (not the legacy default stream) into a CUDA graph and replays
// it `replays` times, y NaN-filled before each; returns each replay's y.
std::vector<std::vector<uint16_t>> replay_forward_graph(Layer& layer, const DeviceInputs& in, cudaStream_t stream,
                                                        int replays);

std::shared_ptr<Runtime> gpu_runtime();
// Rank r of R simulated ranks on cuda:0 (Bootstrap{comm = simulated}).
Bootstrap simulated_gpu_bootstrap(int world_size, int rank, int64_t timeout_ms);
std::unique_ptr<Layer> make_gpu_layer(const testsupport::Problem& p, const WeightPack& w);

// y of the CPU layer for `rows` (all rows when empty), in double; rows not computed are NaN.
std::vector<double> cpu_reference(const testsupport::Problem& p, const WeightPack& w,
                                  const testsupport::Inputs& in, std::span<const int64_t> rows = {});

// float64 relative error over `rows` (all when empty); NaN or Inf in y gives +inf.
double relative_error_rows(const std::vector<uint16_t>& y, const std::vector<double>& ref,
                           int64_t hidden, std::span<const int64_t> rows = {});

uint64_t hash_bits(const std::vector<uint16_t>& y);

// A Problem of a model preset (testing/presets.h) and its synthetic weights.
testsupport::Problem preset_problem(const std::string& preset, const std::string& family, int64_t max_tokens);
testing::HostWeights preset_weights(const testsupport::Problem& p, WeightFormat format, uint64_t seed);
// testing::make_inputs output as test Inputs (int32 ids, int64 copy kept).
testsupport::Inputs from_synthetic(const testing::HostInputs& h, int64_t K);
// Rows the CPU reference computes at large T: first, second, middle, last and random ones up to
// `count` (empty, i.e. all rows, when T <= 128).
std::vector<int64_t> row_subset(int64_t T, uint64_t seed, size_t count = 48);

}  // namespace moe_ep::cudatest
