// A second stream inside one forward: work forked from the caller's stream (an event the side
// stream waits for) and joined back (an event the caller's stream waits for before the step that
// needs it). Both are stream-ordered, so a forward under CUDA-graph capture records the side
// work as a parallel branch of the graph; no host synchronization.
#pragma once

#include <cuda_runtime.h>

namespace moe_ep::cuda {

class SideStream {
 public:
  explicit SideStream(int device_index);  // a non-blocking stream and two timing-free events
  ~SideStream();
  SideStream(const SideStream&) = delete;
  SideStream& operator=(const SideStream&) = delete;

  // The side stream, after it waited for everything launched on `from` so far.
  cudaStream_t fork(cudaStream_t from) const;
  // Records the side stream's progress; the caller's stream waits for the returned event.
  cudaEvent_t join() const;

 private:
  cudaStream_t stream_ = nullptr;
  cudaEvent_t forked_ = nullptr, joined_ = nullptr;
};

}  // namespace moe_ep::cuda
