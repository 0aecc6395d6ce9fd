// Driver for host memory: plain allocations, memcpy, wall-clock timing.
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "cli/device_driver.h"
#include "core/check.h"

namespace moe_ep::cli {
namespace {

constexpr int64_t kAlignment = 256;

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

int hardware_threads() { return std::max(1u, std::thread::hardware_concurrency()); }

// Runs body(thread_idx) on n threads and waits.
template <class F>
void on_threads(int n, F body) {
  std::vector<std::thread> threads;
  for (int i = 1; i < n; ++i) threads.emplace_back(body, i);
  body(0);
  for (auto& t : threads) t.join();
}

class CpuDriver final : public Driver {
 public:
  ~CpuDriver() override {
    for (void* p : buffers_) std::free(p);
  }

  DeviceDescription describe() const override { return describe_cpu(); }

  void* allocate(int64_t bytes) override {
    MOE_EP_CHECK(bytes >= 0, "allocate: bytes = {}; expected >= 0", bytes);
    const int64_t rounded = std::max<int64_t>(kAlignment, (bytes + kAlignment - 1) / kAlignment * kAlignment);
    void* p = std::aligned_alloc(kAlignment, static_cast<size_t>(rounded));
    MOE_EP_CHECK_CODE(p != nullptr, ErrorCode::kDevice, "cannot allocate {} bytes of host memory",
                      bytes);
    buffers_.push_back(p);
    return p;
  }
  void upload(void* dst, const void* src, int64_t bytes) override {
    if (bytes > 0) std::memcpy(dst, src, static_cast<size_t>(bytes));
  }
  void download(void* dst, const void* src, int64_t bytes) override {
    if (bytes > 0) std::memcpy(dst, src, static_cast<size_t>(bytes));
  }
  void fill(void* dst, uint8_t byte, int64_t bytes) override {
    if (bytes > 0) std::memset(dst, byte, static_cast<size_t>(bytes));
  }
  void* stream() override { return nullptr; }
  void synchronize() override {}

  std::vector<double> time_forward(const std::function<void(void*)>& forward, int warmup,
                                   int iters, bool /*capture*/) override {
    for (int i = 0; i < warmup; ++i) forward(nullptr);
    std::vector<double> times_us;
    times_us.reserve(static_cast<size_t>(std::max(iters, 0)));
    for (int i = 0; i < iters; ++i) {
      const auto start = Clock::now();
      forward(nullptr);
      times_us.push_back(seconds_since(start) * 1e6);
    }
    return times_us;
  }

  // Each thread copies its own 64 MiB slice (well beyond the last-level cache) several times;
  // the best of the repetitions counts read + write bytes.
  double measure_copy_bandwidth() override {
    const int num_threads = hardware_threads();
    constexpr size_t kSliceBytes = size_t{64} << 20;
    constexpr int kReps = 5;
    std::vector<std::vector<char>> src(num_threads), dst(num_threads);
    on_threads(num_threads, [&](int i) {
      src[i].assign(kSliceBytes, static_cast<char>(i + 1));
      dst[i].assign(kSliceBytes, 0);
    });
    double best = 0.0;
    for (int rep = 0; rep < kReps; ++rep) {
      const auto start = Clock::now();
      on_threads(num_threads, [&](int i) { std::memcpy(dst[i].data(), src[i].data(), kSliceBytes); });
      const double s = seconds_since(start);
      best = std::max(best, 2.0 * static_cast<double>(kSliceBytes) * num_threads / s);
    }
    volatile char sink = dst[0][kSliceBytes / 2];
    (void)sink;
    return best;
  }

  // Independent multiply-add chains that the compiler can keep in vector registers.
  double measure_compute_rate() override {
    const int num_threads = hardware_threads();
    constexpr int kLanes = 64;
    constexpr int64_t kIters = 4'000'000;
    std::vector<float> results(num_threads);
    const auto start = Clock::now();
    on_threads(num_threads, [&](int t) {
      float acc[kLanes];
      for (int l = 0; l < kLanes; ++l) acc[l] = 1.0f + 1e-3f * (l + t);
      const float a = 0.999999f, b = 1e-7f;
      for (int64_t it = 0; it < kIters; ++it)
        for (int l = 0; l < kLanes; ++l) acc[l] = acc[l] * a + b;
      float sum = 0.0f;
      for (int l = 0; l < kLanes; ++l) sum += acc[l];
      results[t] = sum;
    });
    const double s = seconds_since(start);
    volatile float sink = results[0];
    (void)sink;
    return 2.0 * kLanes * static_cast<double>(kIters) * num_threads / s;
  }
  std::string compute_rate_kind() const override { return "fp32-fma"; }

 private:
  std::vector<void*> buffers_;
};

}  // namespace

std::unique_ptr<Driver> make_cpu_driver() { return std::make_unique<CpuDriver>(); }

}  // namespace moe_ep::cli
