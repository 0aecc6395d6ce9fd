// The floor a forward cannot beat: reading the weights of every expert it touches once, or
// doing its matrix-multiply FLOPs at the device's rate, whichever takes longer.
#pragma once

#include <cstdint>

namespace moe_ep::cli {

struct RooflineRates {
  double bandwidth_bytes_per_s = 0.0;  // measured device-memory copy bandwidth
  double compute_flop_per_s = 0.0;     // measured rate of the kernels' arithmetic
};

struct Roofline {
  int64_t weight_bytes = 0;  // unique experts touched x bytes per expert (+ the shared expert's)
  double flops = 0.0;        // 2 * valid slots * (2I*H + H*I) (+ 2 * tokens * 3 * H * Is)
  double memory_floor_us = 0.0, compute_floor_us = 0.0, floor_us = 0.0;
};

// Dense bf16 tensor-core rate of an H200 (SXM) measured with a GEMM on this project's machines:
// the floor of the shared expert's FLOPs where they outweigh its bytes (prefill). Not re-measured.
inline constexpr double kH200Bf16FlopPerS = 780e12;

// The shared expert (shared_intermediate Is > 0) adds its bf16 weights (3 H Is x 2 bytes) and
// every token's FLOPs, counted at the same rate (a lower bound: bf16 runs at about half the FP8
// rate on Hopper).
Roofline roofline(int64_t unique_experts, int64_t expert_bytes, int64_t valid_slots,
                  int64_t hidden_size, int64_t intermediate_size, const RooflineRates& rates,
                  int64_t tokens = 0, int64_t shared_intermediate = 0);

}  // namespace moe_ep::cli
