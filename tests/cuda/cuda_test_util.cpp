#include "cuda_test_util.h"

#include <algorithm>
#include <cmath>
#include <random>

#include <fmt/format.h>

#include "cuda/device_info.h"
#include "cuda/errors.h"
#include "moe_ep/formats.h"
#include "testing/presets.h"

namespace moe_ep::cudatest {

const std::string& cuda_unavailable_reason() {
  static const std::string reason = [] {
    std::string status;
    const auto devices = cuda::list_devices(&status);
    if (devices.empty()) return status;
    if (devices[0].compute_capability != 90)
      return fmt::format("cuda:0 ({}) has compute capability {}; the SM90 kernels need 90",
                         devices[0].name, devices[0].compute_capability);
    return std::string();
  }();
  return reason;
}

DeviceTensor to_device(const TensorView& host) {
  DeviceTensor d;
  d.view = host;
  if (!host.defined()) return d;
  d.buffer = cuda::DeviceBuffer(static_cast<size_t>(std::max<int64_t>(host.nbytes(), 1)));
  if (host.nbytes() > 0)
    MOE_EP_CUDA_CHECK(cudaMemcpy(d.buffer.get(), host.data, host.nbytes(), cudaMemcpyHostToDevice));
  d.view.data = d.buffer.get();
  d.view.device = Device::cuda(0);
  return d;
}

DeviceInputs to_device(const testsupport::Problem& p, const testsupport::Inputs& in) {
  DeviceInputs d;
  d.tokens = in.tokens;
  d.hidden = p.hidden;
  if (p.quantize_input) {
    d.x = to_device(in.x.view());
  } else {
    d.a = to_device(in.a.view());
    d.a_scale = to_device(in.a_scale.view());
    d.a_global = to_device(in.a_global.view());
  }
  d.ids = to_device(in.ids_i32 ? in.ids32.view() : in.ids64.view());
  d.weights = to_device(in.weights.view());
  d.y = cuda::DeviceBuffer(static_cast<size_t>(std::max<int64_t>(in.tokens * p.hidden * 2, 2)));
  return d;
}

ForwardArgs DeviceInputs::args(cudaStream_t stream) const {
  ForwardArgs a;
  a.x = x.view;
  a.a = this->a.view;
  a.a_scale = a_scale.view;
  a.a_global = a_global.view;
  a.topk_ids = ids.view;
  a.topk_weights = weights.view;
  a.y = TensorView::contiguous(y.get(), DType::kBF16, {tokens, hidden}, Device::cuda(0));
  a.stream = stream;
  return a;
}

std::vector<uint16_t> run_on_gpu(Layer& layer, const DeviceInputs& in, cudaStream_t stream) {
  const size_t n = static_cast<size_t>(in.tokens * in.hidden);
  std::vector<uint16_t> y(n, testsupport::kBf16NaN);
  if (n) MOE_EP_CUDA_CHECK(cudaMemcpy(in.y.get(), y.data(), n * 2, cudaMemcpyHostToDevice));
  layer.forward(in.args(stream));
  MOE_EP_CUDA_CHECK(cudaStreamSynchronize(stream));
  MOE_EP_CUDA_CHECK(cudaGetLastError());
  if (n) MOE_EP_CUDA_CHECK(cudaMemcpy(y.data(), in.y.get(), n * 2, cudaMemcpyDeviceToHost));
  return y;
}

std::vector<std::vector<uint16_t>> replay_forward_graph(Layer& layer, const DeviceInputs& in, cudaStream_t stream,
                                                        int replays) {
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  MOE_EP_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  layer.forward(in.args(stream));
  MOE_EP_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  MOE_EP_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  std::vector<std::vector<uint16_t>> out;
  const size_t n = static_cast<size_t>(in.tokens * in.hidden);
  for (int rep = 0; rep < replays; ++rep) {
    std::vector<uint16_t> y(n, testsupport::kBf16NaN);
    if (n) MOE_EP_CUDA_CHECK(cudaMemcpy(in.y.get(), y.data(), n * 2, cudaMemcpyHostToDevice));
    MOE_EP_CUDA_CHECK(cudaGraphLaunch(exec, stream));
    MOE_EP_CUDA_CHECK(cudaStreamSynchronize(stream));
    if (n) MOE_EP_CUDA_CHECK(cudaMemcpy(y.data(), in.y.get(), n * 2, cudaMemcpyDeviceToHost));
    out.push_back(std::move(y));
  }
  MOE_EP_CUDA_CHECK(cudaGraphExecDestroy(exec));
  MOE_EP_CUDA_CHECK(cudaGraphDestroy(graph));
  return out;
}

std::shared_ptr<Runtime> gpu_runtime() {
  Bootstrap b;
  b.device = Device::cuda(0);
  return Runtime::acquire(b);
}

std::unique_ptr<Layer> make_gpu_layer(const testsupport::Problem& p, const WeightPack& w) {
  return Layer::create(gpu_runtime(), p.desc(), w, p.overrides);
}

std::vector<double> cpu_reference(const testsupport::Problem& p, const WeightPack& w,
                                  const testsupport::Inputs& in, std::span<const int64_t> rows) {
  // The CPU runtime must be released before a CUDA runtime is acquired: one runtime per process.
  // The CPU reference takes no GPU kernel overrides.
  auto layer = Layer::create(testsupport::cpu_runtime(), p.desc(), w);
  testsupport::HostTensor<uint16_t> y = testsupport::poisoned_output(p, in.tokens);
  if (rows.empty())
    layer->forward(in.args(y, p.quantize_input));
  else
    layer->forward_rows(in.args(y, p.quantize_input), rows);
  std::vector<double> out(y.size());
  for (size_t i = 0; i < y.size(); ++i) out[i] = bf16_to_float(y[i]);
  return out;
}

double relative_error_rows(const std::vector<uint16_t>& y, const std::vector<double>& ref,
                           int64_t hidden, std::span<const int64_t> rows) {
  if (y.size() != ref.size()) return INFINITY;
  double diff2 = 0.0, ref2 = 0.0, max_diff = 0.0;
  auto add_row = [&](int64_t t) {
    for (int64_t j = 0; j < hidden; ++j) {
      const size_t i = static_cast<size_t>(t * hidden + j);
      const double v = bf16_to_float(y[i]);
      if (!std::isfinite(v) || !std::isfinite(ref[i])) return false;
      const double d = v - ref[i];
      diff2 += d * d;
      ref2 += ref[i] * ref[i];
      max_diff = std::max(max_diff, std::fabs(d));
    }
    return true;
  };
  const int64_t tokens = hidden ? static_cast<int64_t>(y.size()) / hidden : 0;
  if (rows.empty()) {
    for (int64_t t = 0; t < tokens; ++t)
      if (!add_row(t)) return INFINITY;
  } else {
    for (int64_t t : rows)
      if (!add_row(t)) return INFINITY;
  }
  return ref2 > 0.0 ? std::sqrt(diff2 / ref2) : max_diff;
}

uint64_t hash_bits(const std::vector<uint16_t>& y) {
  uint64_t h = 1469598103934665603ull;
  for (uint16_t v : y) {
    h = (h ^ (v & 0xFF)) * 1099511628211ull;
    h = (h ^ (v >> 8)) * 1099511628211ull;
  }
  return h;
}

Bootstrap simulated_gpu_bootstrap(int world_size, int rank, int64_t timeout_ms) {
  Bootstrap b;
  b.world_size = world_size;
  b.rank = rank;
  b.device = Device::cuda(0);
  b.comm = CommSource::kSimulated;
  b.timeout_ms = timeout_ms;
  return b;
}

testsupport::Problem preset_problem(const std::string& preset, const std::string& family, int64_t max_tokens) {
  const testing::Preset& pr = testing::find_preset(preset);
  testsupport::Problem p;
  p.recipe = parse_recipe(family);
  p.num_experts = pr.num_experts;
  p.hidden = pr.hidden_size;
  p.intermediate = pr.intermediate_size;
  p.top_k = pr.top_k;
  p.clamp = pr.activation_clamp;
  p.max_tokens = max_tokens;
  return p;
}

testing::HostWeights preset_weights(const testsupport::Problem& p, WeightFormat format, uint64_t seed) {
  testing::WeightSpec spec;
  spec.hidden_size = p.hidden;
  spec.intermediate_size = p.intermediate;
  spec.format = format;
  spec.seed = seed;
  spec.num_slots = p.num_experts;
  return testing::make_weights(spec);
}

testsupport::Inputs from_synthetic(const testing::HostInputs& h, int64_t K) {
  testsupport::Inputs in;
  in.tokens = h.num_tokens;
  in.ids_i32 = true;
  in.x = testsupport::HostTensor<uint16_t>(DType::kBF16, {h.num_tokens, h.hidden_size});
  in.x.values() = h.x;
  in.ids32 = testsupport::HostTensor<int32_t>(DType::kI32, {h.num_tokens, K});
  in.ids32.values() = h.topk_ids;
  in.ids64 = testsupport::HostTensor<int64_t>(DType::kI64, {h.num_tokens, K});
  for (size_t i = 0; i < h.topk_ids.size(); ++i) in.ids64[i] = h.topk_ids[i];
  in.weights = testsupport::HostTensor<float>(DType::kF32, {h.num_tokens, K});
  in.weights.values() = h.topk_weights;
  return in;
}

std::vector<int64_t> row_subset(int64_t T, uint64_t seed, size_t count) {
  if (T <= 128) return {};
  std::vector<int64_t> rows = {0, 1, T / 2, T - 1};
  std::mt19937_64 rng(seed);
  while (rows.size() < count) rows.push_back(static_cast<int64_t>(rng() % T));
  std::sort(rows.begin(), rows.end());
  rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
  return rows;
}

}  // namespace moe_ep::cudatest
