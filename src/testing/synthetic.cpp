#include "testing/synthetic.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <mutex>
#include <numeric>
#include <thread>

#include "core/check.h"
#include "core/host_memory.h"
#include "moe_ep/formats.h"
#include "moe_ep/quant.h"

namespace moe_ep::testing {
namespace {

uint64_t mix64(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

enum class Stream : uint64_t { kExpertWeights = 1, kActivations = 2, kRouting = 3 };

// SplitMix64: fast, and defined by this file alone (std:: distributions differ between
// standard libraries, which would make a seed mean different problems on different machines).
class Rng {
 public:
  Rng(uint64_t seed, Stream stream, uint64_t idx)
      : state_(mix64(mix64(seed) ^ mix64(static_cast<uint64_t>(stream) * 0x100000001B3ull + idx))) {}
  uint64_t next() {
    state_ += 0x9E3779B97F4A7C15ull;
    uint64_t z = state_;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }  // [0, 1)
  // Unit-variance bell curve from four 16-bit uniforms (Irwin–Hall); bounded by ±2·sqrt(3).
  float fast_normal() {
    const uint64_t r = next();
    const uint32_t sum = static_cast<uint32_t>(r & 0xFFFF) + ((r >> 16) & 0xFFFF) +
                         ((r >> 32) & 0xFFFF) + (r >> 48);
    constexpr float kScale = 1.7320508f / 65536.0f;  // sqrt(3) / 2^16
    return (static_cast<float>(sum) + 2.0f - 2.0f * 65536.0f) * kScale;
  }
  // Gaussian (Box–Muller), for activations where tails matter.
  double normal() {
    const double u1 = 1.0 - uniform(), u2 = uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }

 private:
  uint64_t state_;
};

int resolve_threads(int n) {
  return n > 0 ? n : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

void fill_fast_normal(Rng& rng, float stddev, std::span<float> out) {
  for (float& v : out) v = rng.fast_normal() * stddev;
}

// Quantizes rows [0, rows) of w [rows, k] into the slot's part of the packed/scale arrays.
void quantize_rows(WeightFormat format, const float* w, int64_t rows, int64_t k, float g,
                   uint8_t* packed, uint8_t* scales) {
  switch (format) {
    case WeightFormat::kMXFP4: quantize_mxfp4(w, rows, k, packed, scales); break;
    case WeightFormat::kNVFP4: quantize_nvfp4(w, rows, k, g, packed, scales); break;
    case WeightFormat::kBF16: {
      auto* out = reinterpret_cast<uint16_t*>(packed);
      for (int64_t i = 0; i < rows * k; ++i) out[i] = float_to_bf16(w[i]);
      break;
    }
  }
}

// Bytes of one [rows, k] tensor: (elements, scales).
std::pair<int64_t, int64_t> tensor_bytes(WeightFormat format, int64_t rows, int64_t k) {
  switch (format) {
    case WeightFormat::kMXFP4: return {rows * k / 2, rows * k / kMxBlock};
    case WeightFormat::kNVFP4: return {rows * k / 2, rows * k / kNvBlock};
    case WeightFormat::kBF16: return {rows * k * 2, 0};
  }
  return {0, 0};
}

}  // namespace

HostWeights make_weights(const WeightSpec& spec, const ProgressFn& progress) {
  const int64_t H = spec.hidden_size, I = spec.intermediate_size;
  const int64_t block = spec.format == WeightFormat::kNVFP4 ? kNvBlock : kMxBlock;
  MOE_EP_CHECK(H > 0 && H % block == 0, "make_weights: hidden_size = {}; expected a positive "
               "multiple of {}", H, block);
  MOE_EP_CHECK(I > 0 && I % block == 0, "make_weights: intermediate_size = {}; expected a "
               "positive multiple of {}", I, block);
  std::vector<int64_t> ids = spec.expert_ids;
  if (ids.empty()) {
    MOE_EP_CHECK(spec.num_slots >= 0, "make_weights: num_slots = {}; expected >= 0", spec.num_slots);
    ids.resize(static_cast<size_t>(spec.num_slots));
    std::iota(ids.begin(), ids.end(), int64_t{0});
  }
  for (size_t i = 0; i < ids.size(); ++i)
    MOE_EP_CHECK(ids[i] >= 0, "make_weights: expert_ids[{}] = {}; expected >= 0", i, ids[i]);

  HostWeights w;
  w.format = spec.format;
  w.num_slots = static_cast<int64_t>(ids.size());
  w.hidden_size = H;
  w.intermediate_size = I;
  const auto [w13_elem, w13_scale] = tensor_bytes(spec.format, 2 * I, H);
  const auto [w2_elem, w2_scale] = tensor_bytes(spec.format, H, I);
  const size_t n = ids.size();
  detail::require_host_bytes(
      detail::saturating_bytes({static_cast<int64_t>(n), static_cast<int64_t>(w13_elem + w13_scale + w2_elem + w2_scale)}),
      fmt::format("synthetic {} weights of {} experts", weight_format_name(spec.format), n),
      "WeightSpec.num_slots (or expert_ids), hidden_size and intermediate_size");
  w.w13.resize(n * w13_elem);
  w.w13_scale.resize(n * w13_scale);
  w.w2.resize(n * w2_elem);
  w.w2_scale.resize(n * w2_scale);
  if (spec.format == WeightFormat::kNVFP4) {
    w.w13_global.resize(n * 2);
    w.w2_global.resize(n);
  }

  std::atomic<int64_t> next_slot{0};
  std::mutex progress_mutex;
  int64_t done = 0;
  const float w13_std = 1.0f / std::sqrt(static_cast<float>(H));
  const float w2_std = 1.0f / std::sqrt(static_cast<float>(I));

  auto worker = [&] {
    std::vector<float> buf(static_cast<size_t>(2 * I * H));
    for (int64_t s = next_slot++; s < w.num_slots; s = next_slot++) {
      Rng rng(spec.seed, Stream::kExpertWeights, static_cast<uint64_t>(ids[s]));
      // W13: gate rows [0, I) and up rows [I, 2I). NVFP4: one global scale from the amax of the
      // whole W13, stored for both halves (a checkpoint may carry two; equal ones are the case
      // every backend accepts without folding).
      std::span<float> w13(buf.data(), static_cast<size_t>(2 * I * H));
      fill_fast_normal(rng, w13_std, w13);
      float g13 = 1.0f;
      if (spec.format == WeightFormat::kNVFP4) {
        g13 = nvfp4_global_encode(max_abs(w13.data(), 2 * I * H));
        w.w13_global[s * 2] = w.w13_global[s * 2 + 1] = 1.0f / g13;
      }
      quantize_rows(spec.format, w13.data(), 2 * I, H, g13, w.w13.data() + s * w13_elem,
                    w.w13_scale.data() + s * w13_scale);
      std::span<float> w2(buf.data(), static_cast<size_t>(H * I));
      fill_fast_normal(rng, w2_std, w2);
      float g = 1.0f;
      if (spec.format == WeightFormat::kNVFP4) {
        g = nvfp4_global_encode(max_abs(w2.data(), H * I));
        w.w2_global[s] = 1.0f / g;
      }
      quantize_rows(spec.format, w2.data(), H, I, g, w.w2.data() + s * w2_elem,
                    w.w2_scale.data() + s * w2_scale);
      if (progress) {
        std::lock_guard<std::mutex> lock(progress_mutex);
        progress(++done, w.num_slots);
      }
    }
  };
  const int num_threads = std::min<int64_t>(resolve_threads(spec.num_threads), std::max<int64_t>(1, w.num_slots));
  std::vector<std::thread> threads;
  for (int i = 1; i < num_threads; ++i) threads.emplace_back(worker);
  worker();
  for (auto& t : threads) t.join();
  return w;
}

WeightPack HostWeights::pack() const {
  auto view = [](const auto& vec, DType dtype, std::initializer_list<int64_t> shape) {
    return TensorView::contiguous(const_cast<void*>(static_cast<const void*>(vec.data())), dtype,
                                  shape);
  };
  const int64_t E = num_slots, H = hidden_size, I = intermediate_size;
  WeightPack p;
  p.format = format;
  switch (format) {
    case WeightFormat::kMXFP4:
      p.w13 = view(w13, DType::kU8, {E, 2 * I, H / 2});
      p.w13_scale = view(w13_scale, DType::kE8M0, {E, 2 * I, H / kMxBlock});
      p.w2 = view(w2, DType::kU8, {E, H, I / 2});
      p.w2_scale = view(w2_scale, DType::kE8M0, {E, H, I / kMxBlock});
      break;
    case WeightFormat::kNVFP4:
      p.w13 = view(w13, DType::kU8, {E, 2 * I, H / 2});
      p.w13_scale = view(w13_scale, DType::kE4M3, {E, 2 * I, H / kNvBlock});
      p.w2 = view(w2, DType::kU8, {E, H, I / 2});
      p.w2_scale = view(w2_scale, DType::kE4M3, {E, H, I / kNvBlock});
      p.w13_global = view(w13_global, DType::kF32, {E, 2});
      p.w2_global = view(w2_global, DType::kF32, {E});
      break;
    case WeightFormat::kBF16:
      p.w13 = view(w13, DType::kBF16, {E, 2 * I, H});
      p.w2 = view(w2, DType::kBF16, {E, H, I});
      break;
  }
  return shared ? shared->attach(p) : p;
}

TensorView SharedExpertWeights::w13_view() const {
  return TensorView::contiguous(const_cast<uint16_t*>(w13.data()), DType::kBF16, {2 * intermediate, hidden});
}

TensorView SharedExpertWeights::w2_view() const {
  return TensorView::contiguous(const_cast<uint16_t*>(w2.data()), DType::kBF16, {hidden, intermediate});
}

WeightPack SharedExpertWeights::attach(WeightPack pack) const {
  pack.shared_w13 = w13_view();
  pack.shared_w2 = w2_view();
  return pack;
}

int64_t HostWeights::nbytes() const {
  return static_cast<int64_t>(w13.size() + w13_scale.size() + w2.size() + w2_scale.size() +
                              sizeof(float) * (w13_global.size() + w2_global.size()));
}

HostInputs make_inputs(const InputSpec& spec) {
  const int64_t T = spec.num_tokens, H = spec.hidden_size, E = spec.num_experts, K = spec.top_k;
  MOE_EP_CHECK(T >= 0, "make_inputs: num_tokens = {}; expected >= 0", T);
  MOE_EP_CHECK(H > 0, "make_inputs: hidden_size = {}; expected > 0", H);
  MOE_EP_CHECK(K >= 1 && K <= E, "make_inputs: top_k = {}; expected 1..num_experts ({})", K, E);
  MOE_EP_CHECK(spec.hole_fraction >= 0.0 && spec.hole_fraction <= 1.0,
               "make_inputs: hole_fraction = {}; expected 0..1", spec.hole_fraction);
  detail::require_host_bytes(detail::saturating_bytes({T, 2 * H + 8 * K}),
                             "synthetic inputs (x bf16 [T, H], topk_ids and topk_weights [T, K])",
                             fmt::format("InputSpec.num_tokens = {}", T));
  HostInputs in;
  in.num_tokens = T;
  in.hidden_size = H;
  in.top_k = K;
  in.x.resize(static_cast<size_t>(T * H));
  in.topk_ids.resize(static_cast<size_t>(T * K));
  in.topk_weights.resize(static_cast<size_t>(T * K));

  Rng act(spec.seed, Stream::kActivations, static_cast<uint64_t>(spec.stream_idx));
  for (auto& v : in.x) v = float_to_bf16(static_cast<float>(act.normal()));

  Rng route(spec.seed, Stream::kRouting, static_cast<uint64_t>(spec.stream_idx));
  std::vector<int32_t> perm(static_cast<size_t>(E));
  for (int64_t t = 0; t < T; ++t) {
    std::iota(perm.begin(), perm.end(), 0);
    int32_t* ids = in.topk_ids.data() + t * K;
    float* wts = in.topk_weights.data() + t * K;
    double sum = 0.0;
    for (int64_t k = 0; k < K; ++k) {  // partial Fisher–Yates: K distinct experts
      const int64_t j = k + static_cast<int64_t>(route.next() % static_cast<uint64_t>(E - k));
      std::swap(perm[k], perm[j]);
      const bool hole = route.uniform() < spec.hole_fraction;
      const double raw = 0.2 + 0.8 * route.uniform();
      ids[k] = hole ? -1 : perm[k];
      wts[k] = hole ? 0.0f : static_cast<float>(raw);
      sum += hole ? 0.0 : raw;
    }
    if (sum > 0.0)
      for (int64_t k = 0; k < K; ++k)
        wts[k] = static_cast<float>(wts[k] / sum * spec.routed_scaling_factor);
  }
  return in;
}

TensorView HostInputs::x_view() const {
  return TensorView::contiguous(const_cast<uint16_t*>(x.data()), DType::kBF16, {num_tokens, hidden_size});
}
TensorView HostInputs::topk_ids_view() const {
  return TensorView::contiguous(const_cast<int32_t*>(topk_ids.data()), DType::kI32, {num_tokens, top_k});
}
TensorView HostInputs::topk_weights_view() const {
  return TensorView::contiguous(const_cast<float*>(topk_weights.data()), DType::kF32, {num_tokens, top_k});
}
int64_t HostInputs::num_valid_slots() const {
  return std::count_if(topk_ids.begin(), topk_ids.end(), [](int32_t id) { return id >= 0; });
}

int64_t count_unique_experts(const HostInputs& inputs) {
  std::vector<int32_t> ids;
  for (int32_t id : inputs.topk_ids)
    if (id >= 0) ids.push_back(id);
  std::sort(ids.begin(), ids.end());
  return std::unique(ids.begin(), ids.end()) - ids.begin();
}

}  // namespace moe_ep::testing
