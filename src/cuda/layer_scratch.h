// The scratch of world-size-1 CUDA layers (plan.h's workspace), shared by every layer of one
// runtime on one device (docs/spec.md §7: a model's layers share one workspace; 43 private copies
// would cost 43x). A layer asks for the bytes its plan needs and keeps the buffer it gets:
// the runtime's current buffer when it is large enough, else a new, larger one that becomes
// the runtime's buffer for later layers. A buffer is never resized or freed while a layer holds
// it, so graphs captured over earlier layers stay valid.
//
// Every forward rewrites what it reads, so layers sharing the scratch run back to back on one
// stream with no cost. Forwards on different streams are ordered by the scratch itself: a
// forward (eager) on another stream than the previous one's first waits, on the device, for the
// previous forward's end (LayerScratch::Use), so two layers on two streams or two threads are
// serialized, never racing. A stream being captured adds no wait and records nothing (a graph's
// order is its launches' order: replays of graphs sharing a scratch must not overlap; README
// "Concurrency").
#pragma once

#include <cstddef>
#include <memory>
#include <mutex>

#include <cuda_runtime.h>

#include "cuda/device_buffer.h"

namespace moe_ep::cuda {

class LayerScratch {
 public:
  explicit LayerScratch(size_t bytes);
  ~LayerScratch();
  LayerScratch(const LayerScratch&) = delete;
  LayerScratch& operator=(const LayerScratch&) = delete;

  DeviceBuffer& buffer() { return buffer_; }

  // Holds the scratch for one forward on `stream`, from before its first launch to after its
  // last one.
  class Use {
   public:
    Use(LayerScratch& scratch, cudaStream_t stream);
    ~Use();
    Use(const Use&) = delete;
    Use& operator=(const Use&) = delete;

   private:
    LayerScratch& s_;
    std::lock_guard<std::mutex> lock_;
    cudaStream_t stream_;
    bool capturing_ = false;
  };

 private:
  DeviceBuffer buffer_;
  std::mutex mutex_;
  cudaEvent_t done_ = nullptr;      // end of the last eager forward
  cudaStream_t last_stream_ = nullptr;
  bool recorded_ = false;
};

std::shared_ptr<LayerScratch> shared_layer_scratch(const void* runtime, int device_index, size_t bytes);

}  // namespace moe_ep::cuda
