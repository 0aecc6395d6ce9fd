// Load-time preparation of one layer's expert weights on the GPU: canonical packed tensors
// (core/weight_prep.h layout) in host or device memory -> the SM90 kernel layout in device
// memory (cuda/weight_layout.h), with the E8M0 validation and the FP8-window analysis of MXFP4
// done by kernels (kernels/sm90_weight_prep.h). Each expert's bytes cross PCIe once, through two
// pinned staging slots that overlap the host copy of one chunk with the upload and conversion of
// the previous. Byte for byte the result of make_kernel_weights.
#pragma once

#include <cstdint>
#include <optional>

#include <cuda_runtime.h>

#include "core/thread_pool.h"
#include "core/weight_prep.h"
#include "cuda/device_buffer.h"
#include "cuda/weight_layout.h"

namespace moe_ep::cuda {

// Canonical tensors of one layer (pointers into host memory, or into device memory when
// on_device). `pack` names the tensors in errors when the scale bytes were not checked yet
// (validate = true: MXFP4 taken as given); nvfp4 global scales are host values.
struct CanonicalWeights {
  WeightFormat format = WeightFormat::kMXFP4;  // kMXFP4 or kNVFP4
  ExpertShape shape;
  const uint8_t* w13 = nullptr;
  const uint8_t* w13_scale = nullptr;
  const uint8_t* w2 = nullptr;
  const uint8_t* w2_scale = nullptr;
  const float* w13_global = nullptr;
  const float* w2_global = nullptr;
  bool on_device = false;
  const WeightPack* validate = nullptr;  // check scale bytes on the GPU, naming these tensors
};
CanonicalWeights canonical_view(const HostExpertWeights& w);

struct DeviceKernelTensor {
  DeviceBuffer tiles, scales;
  DeviceBuffer col_scale;  // folded only: row_factors_of(row_base), [E][N] fp32
  bool folded = false;
  std::vector<uint8_t> row_base;  // folded only (host copy, for tests)
};

struct DeviceKernelWeights {
  DeviceKernelTensor w13, w2;
  DeviceBuffer w13_global, w2_global;    // nvfp4 weight_scale_2 [E]
  std::optional<Fp8WindowStats> window;  // mxfp4
};

DeviceKernelWeights prepare_device_weights(const CanonicalWeights& w, Fp8Fold fold,
                                           const ParallelFor& parallel_for);

}  // namespace moe_ep::cuda
