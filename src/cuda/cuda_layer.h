// The SM90 CUDA layer (world size 1): quantize x -> route -> grouped GEMM 1 (+ SwiGLU, + Q8 of h)
// -> grouped GEMM 2 -> combine, all on the caller's stream, with no host synchronization and no
// allocation after creation (CUDA-graph capturable; a replay gives the eager bits).
//
// core/layer.cpp includes this header when MOE_EP_WITH_CUDA is defined and calls
// make_cuda_layer / device_compute_capability (declared in core/layer_impl.h, defined in
// cuda_layer.cpp / device_info.cpp).
#pragma once

#include "core/layer_impl.h"
