// The scratch of world-size-1 CUDA layers (plan.h's workspace), shared by every layer of one
// runtime on one device (SPEC.md §6: a model's layers share one workspace; 43 private copies
// would cost 43x). A layer asks for the bytes its plan needs and keeps the buffer it gets:
// the runtime's current buffer when it is large enough, else a new, larger one that becomes
// the runtime's buffer for later layers. A buffer is never resized or freed while a layer holds
// it, so graphs captured over earlier layers stay valid.
//
// Every forward rewrites what it reads, so layers sharing the scratch may run back to back on
// one stream; forwards of layers sharing it must not run concurrently (other streams without
// ordering between them).
#pragma once

#include <cstddef>
#include <memory>

#include "cuda/device_buffer.h"

namespace moe_ep::cuda {

std::shared_ptr<DeviceBuffer> shared_layer_scratch(const void* runtime, int device_index, size_t bytes);

}  // namespace moe_ep::cuda
