// The CLI's device seam: memory, copies and timing for `moe_ep run` and `moe_ep bench`.
//
// The library's Layer is device-agnostic; what differs per device is where the per-call tensors
// live and how a forward is timed. cpu_driver.cpp implements this for host memory;
// cuda_driver.cpp (compiled only with MOE_EP_WITH_CUDA, and only when the file exists) for one
// CUDA device (it calls the CUDA runtime directly; the library's CUDA backend stays behind the
// public API).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "moe_ep/backend.h"
#include "moe_ep/tensor.h"

namespace moe_ep::cli {

// A device as the library lists it (moe_ep/backend.h).
using DeviceDescription = DeviceProperties;

// Owns every buffer it allocates (freed with the driver) and one stream.
class Driver {
 public:
  virtual ~Driver() = default;

  virtual DeviceDescription describe() const = 0;
  Device device() const { return describe().device; }

  // Memory on the driver's device, aligned to at least 256 bytes; bytes == 0 gives a valid,
  // non-null pointer. Throws moe_ep::Error (kDevice) naming the size when allocation fails.
  virtual void* allocate(int64_t bytes) = 0;
  virtual void upload(void* device_dst, const void* host_src, int64_t bytes) = 0;
  virtual void download(void* host_dst, const void* device_src, int64_t bytes) = 0;
  virtual void fill(void* device_dst, uint8_t byte, int64_t bytes) = 0;  // e.g. NaN poison

  // The stream to pass as ForwardArgs::stream (nullptr on the CPU).
  virtual void* stream() = 0;
  virtual void synchronize() = 0;

  // Calls forward(stream) `warmup` times untimed, then returns `iters` per-call times in
  // microseconds. CUDA: the forward is captured once into a CUDA graph after the warm-up and
  // each graph replay is timed with events; the caller may also pass capture = false to time
  // eager calls. CPU: wall-clock time of each call.
  virtual std::vector<double> time_forward(const std::function<void(void* stream)>& forward,
                                           int warmup, int iters, bool capture = true) = 0;

  // Roofline inputs, measured on this device (each call may take up to about a second).
  // Sustained device-memory copy bandwidth in bytes/s (read + write counted once each).
  virtual double measure_copy_bandwidth() = 0;
  // Matrix-multiply rate of the kernels' arithmetic in FLOP/s: FP8 tensor-core MMA on CUDA,
  // a plain fp32 multiply-add loop over all threads on the CPU.
  virtual double measure_compute_rate() = 0;
  virtual std::string compute_rate_kind() const = 0;  // "fp8-mma", "fp32-fma"
};

// Makes the driver for `device`. Throws moe_ep::Error kUnsupported with a clear message when
// the device type is not compiled into this build or the device does not exist.
std::unique_ptr<Driver> make_driver(Device device);

// CUDA devices visible to this process (list_devices). Empty when the build has no CUDA or no
// device is present; `status` then says which.
std::vector<DeviceDescription> list_cuda_devices(std::string* status);

// The host CPU (name from /proc/cpuinfo where available, hardware threads).
DeviceDescription describe_cpu();

// ---- implemented per device ----
std::unique_ptr<Driver> make_cpu_driver();
#ifdef MOE_EP_CLI_HAS_CUDA_DRIVER
// cuda_driver.cpp: throws kUnsupported naming the index when the device does not exist.
std::unique_ptr<Driver> make_cuda_driver(int device_index);
#endif

}  // namespace moe_ep::cli
