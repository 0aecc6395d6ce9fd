// Driver for one CUDA device: cudaMalloc'd buffers, one non-blocking stream, forwards timed as
// CUDA graph replays with events.
#include <algorithm>
#include <vector>

#include <cuda_runtime.h>

#include "cli/device_driver.h"
#include "core/check.h"
#include "cuda/device_info.h"
#include "cuda/errors.h"

namespace moe_ep::cli {
namespace {

// Dense FP8 tensor-core rate of an H200 (SXM) measured with a wgmma GEMM on this project's
// machines; the SM90 kernels' own ceiling. Not re-measured by this driver.
constexpr double kH200Fp8FlopPerS = 1400e12;

DeviceDescription describe(const cuda::CudaDeviceInfo& d) {
  DeviceDescription out;
  out.device = Device::cuda(d.index);
  out.name = d.name;
  out.compute_capability = d.compute_capability;
  out.memory_bytes = d.memory_bytes;
  out.num_units = d.sm_count;
  return out;
}

class Events {
 public:
  explicit Events(size_t n) : events_(n, nullptr) {
    for (auto& e : events_) MOE_EP_CUDA_CHECK(cudaEventCreate(&e));
  }
  ~Events() {
    for (auto e : events_)
      if (e) MOE_EP_CUDA_IGNORE(cudaEventDestroy(e));
  }
  cudaEvent_t operator[](size_t i) const { return events_[i]; }

 private:
  std::vector<cudaEvent_t> events_;
};

class CudaDriver final : public Driver {
 public:
  explicit CudaDriver(int index) : info_(cuda::device_info(index)) {
    MOE_EP_CUDA_CHECK(cudaSetDevice(index));
    MOE_EP_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  }
  ~CudaDriver() override {
    cudaSetDevice(info_.index);
    cudaStreamSynchronize(stream_);
    for (void* p : buffers_) MOE_EP_CUDA_IGNORE(cudaFree(p));
    MOE_EP_CUDA_IGNORE(cudaStreamDestroy(stream_));
  }

  DeviceDescription describe() const override { return cli::describe(info_); }

  void* allocate(int64_t bytes) override {
    MOE_EP_CHECK(bytes >= 0, "allocate: bytes = {}; expected >= 0", bytes);
    void* p = nullptr;
    const cudaError_t err = cudaMalloc(&p, static_cast<size_t>(std::max<int64_t>(bytes, 256)));
    if (err != cudaSuccess) {
      cudaGetLastError();
      MOE_EP_FAIL(ErrorCode::kDevice, "cudaMalloc of {} bytes on cuda:{} failed: {} ({})", bytes,
                  info_.index, cudaGetErrorName(err), cudaGetErrorString(err));
    }
    buffers_.push_back(p);
    return p;
  }
  void upload(void* dst, const void* src, int64_t bytes) override {
    if (bytes > 0) {
      MOE_EP_CUDA_CHECK(cudaMemcpyAsync(dst, src, static_cast<size_t>(bytes), cudaMemcpyHostToDevice, stream_));
      MOE_EP_CUDA_CHECK(cudaStreamSynchronize(stream_));
    }
  }
  void download(void* dst, const void* src, int64_t bytes) override {
    if (bytes > 0) {
      MOE_EP_CUDA_CHECK(cudaMemcpyAsync(dst, src, static_cast<size_t>(bytes), cudaMemcpyDeviceToHost, stream_));
      MOE_EP_CUDA_CHECK(cudaStreamSynchronize(stream_));
    }
  }
  void fill(void* dst, uint8_t byte, int64_t bytes) override {
    if (bytes > 0) {
      MOE_EP_CUDA_CHECK(cudaMemsetAsync(dst, byte, static_cast<size_t>(bytes), stream_));
      MOE_EP_CUDA_CHECK(cudaStreamSynchronize(stream_));
    }
  }
  void* stream() override { return stream_; }
  void synchronize() override { MOE_EP_CUDA_CHECK(cudaStreamSynchronize(stream_)); }

  std::vector<double> time_forward(const std::function<void(void*)>& forward, int warmup,
                                   int iters, bool capture) override {
    for (int i = 0; i < warmup; ++i) forward(stream_);
    MOE_EP_CUDA_CHECK(cudaStreamSynchronize(stream_));
    cudaGraphExec_t exec = nullptr;
    if (capture) {
      cudaGraph_t graph = nullptr;
      MOE_EP_CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
      try {
        forward(stream_);
      } catch (...) {
        cudaStreamEndCapture(stream_, &graph);
        if (graph) cudaGraphDestroy(graph);
        cudaGetLastError();
        throw;
      }
      MOE_EP_CUDA_CHECK(cudaStreamEndCapture(stream_, &graph));
      const cudaError_t err = cudaGraphInstantiate(&exec, graph, 0);
      cudaGraphDestroy(graph);
      MOE_EP_CUDA_CHECK(err);
      MOE_EP_CUDA_CHECK(cudaGraphLaunch(exec, stream_));  // one untimed replay
    }
    const size_t n = static_cast<size_t>(std::max(iters, 0));
    Events start(n), stop(n);
    for (size_t i = 0; i < n; ++i) {
      MOE_EP_CUDA_CHECK(cudaEventRecord(start[i], stream_));
      if (capture)
        MOE_EP_CUDA_CHECK(cudaGraphLaunch(exec, stream_));
      else
        forward(stream_);
      MOE_EP_CUDA_CHECK(cudaEventRecord(stop[i], stream_));
    }
    MOE_EP_CUDA_CHECK(cudaStreamSynchronize(stream_));
    if (exec) MOE_EP_CUDA_CHECK(cudaGraphExecDestroy(exec));
    std::vector<double> times_us(n);
    for (size_t i = 0; i < n; ++i) {
      float ms = 0.0f;
      MOE_EP_CUDA_CHECK(cudaEventElapsedTime(&ms, start[i], stop[i]));
      times_us[i] = ms * 1e3;
    }
    return times_us;
  }

  // Device-to-device copies of 2 GiB (far beyond the L2); best of 5, read + write bytes.
  double measure_copy_bandwidth() override {
    constexpr size_t kBytes = size_t{2} << 30;
    void* a = allocate(kBytes);
    void* b = allocate(kBytes);
    MOE_EP_CUDA_CHECK(cudaMemsetAsync(a, 0x5A, kBytes, stream_));
    Events ev(2);
    double best = 0.0;
    for (int rep = 0; rep < 6; ++rep) {
      MOE_EP_CUDA_CHECK(cudaEventRecord(ev[0], stream_));
      MOE_EP_CUDA_CHECK(cudaMemcpyAsync(b, a, kBytes, cudaMemcpyDeviceToDevice, stream_));
      MOE_EP_CUDA_CHECK(cudaEventRecord(ev[1], stream_));
      MOE_EP_CUDA_CHECK(cudaEventSynchronize(ev[1]));
      float ms = 0.0f;
      MOE_EP_CUDA_CHECK(cudaEventElapsedTime(&ms, ev[0], ev[1]));
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
    MOE_EP_CUDA_CHECK(cudaStreamSynchronize(stream_));
    buffers_.erase(std::find(buffers_.begin(), buffers_.end(), p));
    MOE_EP_CUDA_CHECK(cudaFree(p));
  }

  cuda::CudaDeviceInfo info_;
  cudaStream_t stream_ = nullptr;
  std::vector<void*> buffers_;
};

}  // namespace

std::unique_ptr<Driver> make_cuda_driver(int device_index) {
  return std::make_unique<CudaDriver>(device_index);
}

std::vector<DeviceDescription> cuda_driver_list_devices(std::string* status) {
  std::vector<DeviceDescription> out;
  for (const auto& d : cuda::list_devices(status)) out.push_back(describe(d));
  return out;
}

}  // namespace moe_ep::cli
