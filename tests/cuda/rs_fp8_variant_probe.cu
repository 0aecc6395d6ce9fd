#include "rs_fp8_variant_probe.h"

#include "cuda/kernels/sm90_rs_kernel.cuh"

namespace moe_ep::cuda::test {
namespace {

template <int kBlockM, RsFp8Weights kWeights, class F>
cudaError_t with_work(int work, F&& f) {
  switch (work) {
    case 7: return f(RsFp8TileConfig<kBlockM, kWeights, 7>{});
    case 3: return f(RsFp8TileConfig<kBlockM, kWeights, 3>{});
    case 2: return f(RsFp8TileConfig<kBlockM, kWeights, 2>{});
    case 1: return f(RsFp8TileConfig<kBlockM, kWeights, 1>{});
    case 4: return f(RsFp8TileConfig<kBlockM, kWeights, 4>{});
    case 0: return f(RsFp8TileConfig<kBlockM, kWeights, 0>{});
  }
  return cudaErrorInvalidValue;
}

template <int kBlockM, class F>
cudaError_t with_weights(const RsFp8Variant& v, F&& f) {
  switch (v.weights) {
    case RsFp8WeightPath::kCpAsync: return with_work<kBlockM, RsFp8Weights::kCpAsync>(v.work, f);
    case RsFp8WeightPath::kBulk:  // with the weight copies (without them it is the cp.async kernel)
      if (v.work == 7) return f(RsFp8TileConfig<kBlockM, RsFp8Weights::kBulk, 7>{});
      if (v.work == 3) return f(RsFp8TileConfig<kBlockM, RsFp8Weights::kBulk, 3>{});
      if (v.work == 2) return f(RsFp8TileConfig<kBlockM, RsFp8Weights::kBulk, 2>{});
      return cudaErrorInvalidValue;
    case RsFp8WeightPath::kRegisters:  // the whole kernel, or without the activation copies; 64-token
                                       // tiles only (at 96 the two register slots spill)
      if constexpr (kBlockM == 64) {
        if (v.work == 7) return f(RsFp8TileConfig<kBlockM, RsFp8Weights::kRegisters, 7>{});
        if (v.work == 4) return f(RsFp8TileConfig<kBlockM, RsFp8Weights::kRegisters, 4>{});
      }
      return cudaErrorInvalidValue;
  }
  return cudaErrorInvalidValue;
}

// Calls f(Cfg{}) with the configuration of v; cudaErrorInvalidValue for none.
template <class F>
cudaError_t with_variant(const RsFp8Variant& v, F&& f) {
  if (v.consumers == 4) {
    if (v.block_m != 64 || v.weights != RsFp8WeightPath::kCpAsync) return cudaErrorInvalidValue;
    if (v.narrow_in_order)
      return v.work == 7 ? f(RsFp8TileConfig<64, RsFp8Weights::kCpAsync, 7, 4, RsFp8Tails::kNarrow>{})
                         : cudaErrorInvalidValue;
    if (v.work == 7) return f(RsFp8TileConfig<64, RsFp8Weights::kCpAsync, 7, 4>{});
    if (v.work == 4) return f(RsFp8TileConfig<64, RsFp8Weights::kCpAsync, 4, 4>{});
    return cudaErrorInvalidValue;
  }
  if (v.consumers != 2 || v.narrow_in_order) return cudaErrorInvalidValue;
  if (v.block_m == 64) return with_weights<64>(v, f);
  if (v.block_m == 96) return with_weights<96>(v, f);
  return cudaErrorInvalidValue;
}

template <class F>
cudaError_t with_rs16_wide_work(int work, int group_blocks, int block_m, F&& f) {
  if (block_m == 128)  // over the 64-row tile list, as the library's GEMM 1
    return work == 7 && group_blocks == 1 ? f(Rs16WideTileConfig<Mxfp4Bf16RsWeights, 7, 1, 128, 64>{})
                                          : cudaErrorInvalidValue;
  if (block_m != 64) return cudaErrorInvalidValue;
  if (group_blocks == 2)
    return work == 7 ? f(Rs16WideTileConfig<Mxfp4Bf16RsWeights, 7, 2>{}) : cudaErrorInvalidValue;
  if (group_blocks != 1) return cudaErrorInvalidValue;
  switch (work) {
    case 3: return f(Rs16WideTileConfig<Mxfp4Bf16RsWeights, 3>{});
    case 4: return f(Rs16WideTileConfig<Mxfp4Bf16RsWeights, 4>{});
  }
  return cudaErrorInvalidValue;
}

}  // namespace

cudaError_t configure_rs16_wide_work(int work, int group_blocks, int block_m, int* blocks_per_sm1,
                                     int* blocks_per_sm2) {
  return with_rs16_wide_work(work, group_blocks, block_m, [&](auto cfg) {
    using Cfg = decltype(cfg);
    cudaError_t err = configure_rs_kernel<Cfg, RsSwigluQ8Epilogue, Gemm1Params>(blocks_per_sm1);
    return err == cudaSuccess ? configure_rs_kernel<Cfg, RsStoreBf16Epilogue, Gemm2Params>(blocks_per_sm2) : err;
  });
}

cudaError_t launch_rs16_wide_work_gemm1(int work, int group_blocks, int block_m, const Gemm1Params& p, int grid,
                                        cudaStream_t stream) {
  return with_rs16_wide_work(work, group_blocks, block_m, [&](auto cfg) { return launch_rs_kernel<decltype(cfg), RsSwigluQ8Epilogue>(p, grid, stream); });
}

cudaError_t launch_rs16_wide_work_gemm2(int work, int group_blocks, int block_m, const Gemm2Params& p, int grid,
                                        cudaStream_t stream) {
  return with_rs16_wide_work(work, group_blocks, block_m, [&](auto cfg) { return launch_rs_kernel<decltype(cfg), RsStoreBf16Epilogue>(p, grid, stream); });
}

cudaError_t configure_rs_fp8_variant(const RsFp8Variant& v, int* blocks_per_sm1, int* blocks_per_sm2) {
  return with_variant(v, [&](auto cfg) {
    using Cfg = decltype(cfg);
    cudaError_t err = configure_rs_kernel<Cfg, RsSwigluQ8Epilogue, Gemm1Params>(blocks_per_sm1);
    return err == cudaSuccess ? configure_rs_kernel<Cfg, RsStoreBf16Epilogue, Gemm2Params>(blocks_per_sm2) : err;
  });
}

cudaError_t launch_rs_fp8_variant_gemm1(const RsFp8Variant& v, const Gemm1Params& p, int grid, cudaStream_t stream) {
  return with_variant(v, [&](auto cfg) { return launch_rs_kernel<decltype(cfg), RsSwigluQ8Epilogue>(p, grid, stream); });
}

cudaError_t launch_rs_fp8_variant_gemm2(const RsFp8Variant& v, const Gemm2Params& p, int grid, cudaStream_t stream) {
  return with_variant(v, [&](auto cfg) { return launch_rs_kernel<decltype(cfg), RsStoreBf16Epilogue>(p, grid, stream); });
}

}  // namespace moe_ep::cuda::test
