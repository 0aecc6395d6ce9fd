#include "cuda/side_stream.h"

#include "cuda/errors.h"

namespace moe_ep::cuda {

SideStream::SideStream(int device_index) {
  MOE_EP_CUDA_CHECK(cudaSetDevice(device_index));
  MOE_EP_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  MOE_EP_CUDA_CHECK(cudaEventCreateWithFlags(&forked_, cudaEventDisableTiming));
  MOE_EP_CUDA_CHECK(cudaEventCreateWithFlags(&joined_, cudaEventDisableTiming));
}

SideStream::~SideStream() {
  if (joined_) MOE_EP_CUDA_IGNORE(cudaEventDestroy(joined_));
  if (forked_) MOE_EP_CUDA_IGNORE(cudaEventDestroy(forked_));
  if (stream_) MOE_EP_CUDA_IGNORE(cudaStreamDestroy(stream_));
}

cudaStream_t SideStream::fork(cudaStream_t from) const {
  MOE_EP_CUDA_CHECK(cudaEventRecord(forked_, from));
  MOE_EP_CUDA_CHECK(cudaStreamWaitEvent(stream_, forked_, 0));
  return stream_;
}

cudaEvent_t SideStream::join() const {
  MOE_EP_CUDA_CHECK(cudaEventRecord(joined_, stream_));
  return joined_;
}

}  // namespace moe_ep::cuda
