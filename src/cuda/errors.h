// CUDA error checks for host code: a failing call throws moe_ep::Error (kDevice) naming the
// statement, the error name and its description, with file:line.
#pragma once

#include <cuda_runtime.h>

#include "core/check.h"

#define MOE_EP_CUDA_CHECK(stmt)                                                          \
  do {                                                                                   \
    const cudaError_t moe_ep_cuda_err_ = (stmt);                                         \
    if (moe_ep_cuda_err_ != cudaSuccess)                                                 \
      MOE_EP_FAIL(::moe_ep::ErrorCode::kDevice, "CUDA call failed: {} returned {} ({})", \
                  #stmt, cudaGetErrorName(moe_ep_cuda_err_),                             \
                  cudaGetErrorString(moe_ep_cuda_err_));                                 \
  } while (0)

// For destructors and other places that must not throw: the first error is kept and dropped.
#define MOE_EP_CUDA_IGNORE(stmt) static_cast<void>(stmt)
