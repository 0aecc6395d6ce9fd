// The prebuilt launch table of an SM90 layer: one entry per T bucket of the selected config
// (sm90_config.h), each a list of steps whose kernel parameters (workspace regions, weights,
// tiles, grid rules) are filled at layer creation. A forward picks the bucket of its T, patches
// T and the caller's pointers, and launches: no branching on recipe or kernel variant.
//
//   [quantize x] -> routing (m tiles of the bucket's block_m) -> GEMM 1 (+ SwiGLU, + Q8 of h)
//   -> [NVFP4 of h] -> GEMM 2 -> combine [+ the binding's y_add]
// A bucket of a whole-layer form (the one-token layer, kernels/sm90_one_token.h) runs its own two
// launches instead.
// Where config.fuses_quantize_route, the quantization of x and the routing are one launch. A
// bucket whose GEMM 1 form reads 16-bit x (sm90_forms.h) gets it written so by the Q8 launch where
// the layer quantizes x, else converted from the caller's rows; one whose GEMM 2 form reads
// 16-bit h converts h before GEMM 2.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <cuda_runtime.h>

#include "cuda/kernels/sm90_combine.h"
#include "cuda/kernels/sm90_grouped_gemm.h"
#include "cuda/kernels/sm90_nvfp4_quantize.h"
#include "cuda/kernels/sm90_one_token.h"
#include "cuda/kernels/sm90_permute.h"
#include "cuda/kernels/sm90_q8_quantize.h"
#include "cuda/plan.h"
#include "cuda/policy/sm90_config.h"

namespace moe_ep::cuda {

// What changes from one forward to the next.
struct Sm90Binding {
  int64_t num_tokens = 0;
  const uint16_t* x = nullptr;  // bf16 [T, H] when the layer quantizes x
  const uint8_t* a = nullptr;   // caller-quantized activations otherwise (ForwardArgs layout)
  const uint8_t* a_scale = nullptr;
  const float* a_global = nullptr;
  const void* topk_ids = nullptr;  // [T, K] int32 or int64
  bool ids_int64 = false;
  const float* topk_weights = nullptr;
  uint16_t* y = nullptr;  // bf16 [T, H]
  // Added to y by the combine (bf16 [T, H]: the shared expert's output), written on another
  // stream: the combine's stream waits for y_add_ready (when set) first.
  const uint16_t* y_add = nullptr;
  cudaEvent_t y_add_ready = nullptr;
};

// One GEMM's weights on the device (kernels/sm90_grouped_gemm.h layouts).
struct Sm90GemmWeights {
  const uint8_t* tiles = nullptr;
  const uint8_t* scales = nullptr;
  const float* global = nullptr;     // nvfp4 weight_scale_2 [E]
  const float* col_scale = nullptr;  // folded mxfp4 column factors [E][N]
};

class Sm90Pipeline {
 public:
  Sm90Pipeline(const Sm90Config& config, const Plan& plan, bool quantize_input, float clamp,
               const Sm90GemmWeights& w13, const Sm90GemmWeights& w2, std::byte* workspace,
               uint32_t* error_flags);

  // Launches every step of num_tokens' bucket on `stream`; T = 0 launches nothing.
  void run(const Sm90Binding& binding, cudaStream_t stream) const;
  // One plan entry per bucket ("T=1..512" -> the kernels, tiles and grid rules).
  void describe(SelectedConfig& out) const;

  struct Launch;
  using Step = cudaError_t (*)(const Launch& launch, const Sm90Binding& binding, cudaStream_t stream);
  using Gemm1Fn = cudaError_t (*)(const Gemm1Params&, int grid, cudaStream_t);
  using Gemm2Fn = cudaError_t (*)(const Gemm2Params&, int grid, cudaStream_t);
  // A conversion of quantized rows to the 16-bit activations of a register-operand GEMM
  // (launch_sm90_q8_to_rs_bf16, launch_sm90_nvfp4_to_rs_f16); rows = T (x) or T * K bounded by
  // the routed rows on the device (h).
  using ConvertFn = cudaError_t (*)(const uint8_t* q, const uint8_t* scales, int64_t rows, const int32_t* row_count,
                                    int k, uint16_t* out, cudaStream_t stream);
  struct To16Bit {
    ConvertFn convert = nullptr;
    const uint8_t* q = nullptr;
    const uint8_t* scales = nullptr;
    int k = 0;
    uint16_t* out = nullptr;
    const int32_t* row_count = nullptr;  // device; null: all rows
  };
  struct Launch {
    Sm90Bucket bucket;
    Plan plan;
    Q8QuantizeParams q8;
    To16Bit x_16bit, h_16bit;
    Nvfp4QuantizeParams x_nvfp4, h_nvfp4;
    PermuteParams permute;
    Gemm1Params gemm1;
    Gemm2Params gemm2;
    Gemm1Fn gemm1_fn = nullptr;  // the bucket's forms' kernels (sm90_form_kernels)
    Gemm2Fn gemm2_fn = nullptr;
    GridRule grid1, grid2;
    CombineParams combine;
    OneTokenParams one_token;  // a whole-layer bucket's (the one-token layer)
    int one_token_grid = 0;
    std::vector<Step> steps;
  };

 private:
  std::vector<Launch> launches_;  // one per bucket, ascending T
};

}  // namespace moe_ep::cuda
