#include "cuda/layer_scratch.h"

#include <map>
#include <utility>

#include "cuda/errors.h"

namespace moe_ep::cuda {

LayerScratch::LayerScratch(size_t bytes) : buffer_(bytes) {
  MOE_EP_CUDA_CHECK(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming));
}

LayerScratch::~LayerScratch() {
  if (done_) MOE_EP_CUDA_IGNORE(cudaEventDestroy(done_));
}

LayerScratch::Use::Use(LayerScratch& scratch, cudaStream_t stream)
    : s_(scratch), lock_(scratch.mutex_), stream_(stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  MOE_EP_CUDA_CHECK(cudaStreamIsCapturing(stream, &status));
  capturing_ = status != cudaStreamCaptureStatusNone;
  if (!capturing_ && s_.recorded_ && s_.last_stream_ != stream)
    MOE_EP_CUDA_CHECK(cudaStreamWaitEvent(stream, s_.done_, 0));
}

LayerScratch::Use::~Use() {
  if (capturing_) return;
  MOE_EP_CUDA_IGNORE(cudaEventRecord(s_.done_, stream_));
  s_.last_stream_ = stream_;
  s_.recorded_ = true;
}

std::shared_ptr<LayerScratch> shared_layer_scratch(const void* runtime, int device_index, size_t bytes) {
  static std::mutex mu;
  // Weak: the buffer lives as long as a layer holds it; a released runtime's entry expires.
  static std::map<std::pair<const void*, int>, std::weak_ptr<LayerScratch>> scratch;
  std::lock_guard<std::mutex> lock(mu);
  for (auto it = scratch.begin(); it != scratch.end();)
    it = it->second.expired() ? scratch.erase(it) : std::next(it);
  std::weak_ptr<LayerScratch>& slot = scratch[{runtime, device_index}];
  std::shared_ptr<LayerScratch> have = slot.lock();
  if (have && have->buffer().bytes() >= bytes) return have;
  auto fresh = std::make_shared<LayerScratch>(bytes);
  slot = fresh;
  return fresh;
}

}  // namespace moe_ep::cuda
