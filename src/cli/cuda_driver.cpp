// Driver for one CUDA device: cudaMalloc'd buffers, one non-blocking stream, forwards timed as
// CUDA graph replays with events. It calls the CUDA runtime itself; the device's description
// comes from the library (moe_ep/backend.h list_devices).
#include <algorithm>
#include <vector>

#include <cuda_runtime.h>

#include "cli/device_driver.h"
#include "core/check.h"
#include "moe_ep/backend.h"

// A failing CUDA runtime call throws kDevice naming the statement, the error and its description.
#define CLI_CUDA_CHECK(stmt)                                                             \
  do {                                                                                   \
    const cudaError_t cli_cuda_err_ = (stmt);                                            \
    if (cli_cuda_err_ != cudaSuccess)                                                    \
      MOE_EP_FAIL(::moe_ep::ErrorCode::kDevice, "CUDA call failed: {} returned {} ({})", \
                  #stmt, cudaGetErrorName(cli_cuda_err_), cudaGetErrorString(cli_cuda_err_)); \
  } while (0)

namespace moe_ep::cli {
namespace {

// Dense FP8 tensor-core rate of an H200 (SXM) measured with a wgmma GEMM on this project's
// machines; the SM90 kernels' own ceiling. Not re-measured by this driver.
constexpr double kH200Fp8FlopPerS = 1400e12;

// cuda:index as the library lists it; kUnsupported naming the index when it cannot be used.
DeviceDescription describe_device(int index) {
  std::string status;
  const std::vector<DeviceDescription> devices = list_devices(DeviceType::kCUDA, &status);
  MOE_EP_CHECK_CODE(!devices.empty(), ErrorCode::kUnsupported, "cuda:{} is not available: {}", index, status);
  for (const DeviceDescription& d : devices)
    if (d.device.index == index) return d;
  MOE_EP_FAIL(ErrorCode::kUnsupported, "cuda:{} does not exist; this machine has {} CUDA device(s) (cuda:0..cuda:{})",
              index, devices.size(), devices.size() - 1);
}

class Events {
 public:
  explicit Events(size_t n) : events_(n, nullptr) {
    for (auto& e : events_) CLI_CUDA_CHECK(cudaEventCreate(&e));
  }
  ~Events() {
    for (auto e : events_)
      if (e) cudaEventDestroy(e);
  }
  cudaEvent_t operator[](size_t i) const { return events_[i]; }

 private:
  std::vector<cudaEvent_t> events_;
};

class CudaDriver final : public Driver {
 public:
  explicit CudaDriver(int index) : info_(describe_device(index)) {
    CLI_CUDA_CHECK(cudaSetDevice(index));
    CLI_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  }
  ~CudaDriver() override {  // must not throw: errors here are dropped
    cudaSetDevice(info_.device.index);
    cudaStreamSynchronize(stream_);
    for (void* p : buffers_) cudaFree(p);
    cudaStreamDestroy(stream_);
  }

  DeviceDescription describe() const override { return info_; }

  void* allocate(int64_t bytes) override {
    MOE_EP_CHECK(bytes >= 0, "allocate: bytes = {}; expected >= 0", bytes);
    void* p = nullptr;
    const cudaError_t err = cudaMalloc(&p, static_cast<size_t>(std::max<int64_t>(bytes, 256)));
    if (err != cudaSuccess) {
      cudaGetLastError();
      MOE_EP_FAIL(ErrorCode::kDevice, "cudaMalloc of {} bytes on cuda:{} failed: {} ({})", bytes,
                  info_.device.index, cudaGetErrorName(err), cudaGetErrorString(err));
    }
    buffers_.push_back(p);
    return p;
  }
  void upload(void* dst, const void* src, int64_t bytes) override {
    if (bytes > 0) {
      CLI_CUDA_CHECK(cudaMemcpyAsync(dst, src, static_cast<size_t>(bytes), cudaMemcpyHostToDevice, stream_));
      CLI_CUDA_CHECK(cudaStreamSynchronize(stream_));
    }
  }
  void download(void* dst, const void* src, int64_t bytes) override {
    if (bytes > 0) {
      CLI_CUDA_CHECK(cudaMemcpyAsync(dst, src, static_cast<size_t>(bytes), cudaMemcpyDeviceToHost, stream_));
      CLI_CUDA_CHECK(cudaStreamSynchronize(stream_));
    }
  }
  void fill(void* dst, uint8_t byte, int64_t bytes) override {
    if (bytes > 0) {
      CLI_CUDA_CHECK(cudaMemsetAsync(dst, byte, static_cast<size_t>(bytes), stream_));
      CLI_CUDA_CHECK(cudaStreamSynchronize(stream_));
    }
  }
  void* stream() override { return stream_; }
  void synchronize() override { CLI_CUDA_CHECK(cudaStreamSynchronize(stream_)); }

  std::vector<double> time_forward(const std::function<void(void*)>& forward, int warmup,
                                   int iters, bool capture) override {
    for (int i = 0; i < warmup; ++i) forward(stream_);
    CLI_CUDA_CHECK(cudaStreamSynchronize(stream_));
    cudaGraphExec_t exec = nullptr;
    if (capture) {
      cudaGraph_t graph = nullptr;
      CLI_CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
      try {
        forward(stream_);
      } catch (...) {
        cudaStreamEndCapture(stream_, &graph);
        if (graph) cudaGraphDestroy(graph);
        cudaGetLastError();
        throw;
      }
      CLI_CUDA_CHECK(cudaStreamEndCapture(stream_, &graph));
      const cudaError_t err = cudaGraphInstantiate(&exec, graph, 0);
      cudaGraphDestroy(graph);
      CLI_CUDA_CHECK(err);
      CLI_CUDA_CHECK(cudaGraphLaunch(exec, stream_));  // one untimed replay
    }
    const size_t n = static_cast<size_t>(std::max(iters, 0));
    Events start(n), stop(n);
    for (size_t i = 0; i < n; ++i) {
      CLI_CUDA_CHECK(cudaEventRecord(start[i], stream_));
      if (capture)
        CLI_CUDA_CHECK(cudaGraphLaunch(exec, stream_));
      else
        forward(stream_);
      CLI_CUDA_CHECK(cudaEventRecord(stop[i], stream_));
    }
    CLI_CUDA_CHECK(cudaStreamSynchronize(stream_));
    if (exec) CLI_CUDA_CHECK(cudaGraphExecDestroy(exec));
    std::vector<double> times_us(n);
    for (size_t i = 0; i < n; ++i) {
      float ms = 0.0f;
      CLI_CUDA_CHECK(cudaEventElapsedTime(&ms, start[i], stop[i]));
      times_us[i] = ms * 1e3;
    }
    return times_us;
  }

  // Device-to-device copies of 2 GiB (far beyond the L2); best of 5, read + write bytes.
  double measure_copy_bandwidth() override {
    constexpr size_t kBytes = size_t{2} << 30;
    void* a = allocate(kBytes);
    void* b = allocate(kBytes);
    CLI_CUDA_CHECK(cudaMemsetAsync(a, 0x5A, kBytes, stream_));
    Events ev(2);
    double best = 0.0;
    for (int rep = 0; rep < 6; ++rep) {
      CLI_CUDA_CHECK(cudaEventRecord(ev[0], stream_));
      CLI_CUDA_CHECK(cudaMemcpyAsync(b, a, kBytes, cudaMemcpyDeviceToDevice, stream_));
      CLI_CUDA_CHECK(cudaEventRecord(ev[1], stream_));
      CLI_CUDA_CHECK(cudaEventSynchronize(ev[1]));
      float ms = 0.0f;
      CLI_CUDA_CHECK(cudaEventElapsedTime(&ms, ev[0], ev[1]));
      if (rep > 0) best = std::max(best, 2.0 * kBytes / (ms * 1e-3));
    }
    release(a);
    release(b);
    return best;
  }

  double measure_compute_rate() override { return kH200Fp8FlopPerS; }
  std::string compute_rate_kind() const override { return "fp8-mma (H200 1400 TFLOP/s, not re-measured)"; }

 private:
  void release(void* p) {
    CLI_CUDA_CHECK(cudaStreamSynchronize(stream_));
    buffers_.erase(std::find(buffers_.begin(), buffers_.end(), p));
    CLI_CUDA_CHECK(cudaFree(p));
  }

  DeviceDescription info_;
  cudaStream_t stream_ = nullptr;
  std::vector<void*> buffers_;
};

}  // namespace

std::unique_ptr<Driver> make_cuda_driver(int device_index) {
  return std::make_unique<CudaDriver>(device_index);
}

}  // namespace moe_ep::cli
