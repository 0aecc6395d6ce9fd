// Problem descriptors: what the caller asks for. Validated once at layer creation.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace moe_ep {

// The expert-parallel fleet: shapes shared by every layer that runs on one runtime.
struct FleetParams {
  int64_t num_experts = 0;          // E: global physical experts, E % world_size == 0
  int64_t max_tokens_per_rank = 0;  // upper bound on T of any forward on any rank
  int64_t hidden_size = 0;          // H
};

// One MoE layer's kernel configuration.
struct KernelConfig {
  std::string family = "mxfp4";     // kernel family: "mxfp4" or "nvfp4" (see backend.h)
  int64_t intermediate_size = 0;    // I
  int64_t top_k = 0;                // K
  std::optional<float> activation_clamp;  // c; absent = +inf; must be finite and >= 0
  bool fast_math = false;           // approximate exp/reciprocal in SiLU on the GPU
  bool quantize_input = true;       // the layer quantizes bf16 x; false: caller passes a + scales
  bool preprocess_weights = true;   // convert weights at load into the kernels' layout
  // mxfp4 on SM90: true keeps every k32 block sum in fp32 as SPEC.md §3 states (mma.sync
  // kernels, bitwise equal to the CPU layer). false (default) lets large batches use FP8
  // wgmma, whose k32 sums carry ~2^-14 relative error (the Hopper tensor-core accumulator):
  // 2-3x faster at prefill, layer error vs the CPU layer ~3e-3 instead of ~1e-5.
  bool exact_accumulation = false;
};

}  // namespace moe_ep
