#include "rs_fp8_variant_probe.h"

#include "cuda/kernels/sm90_rs_kernel.cuh"

namespace moe_ep::cuda::test {
namespace {

template <int kBlockM, bool kBulk, class F>
cudaError_t with_work(int work, F&& f) {
  switch (work) {
    case 7: return f(RsFp8TileConfig<kBlockM, kBulk, 7>{});
    case 3: return f(RsFp8TileConfig<kBlockM, kBulk, 3>{});
    case 2: return f(RsFp8TileConfig<kBlockM, kBulk, 2>{});
    case 1: return f(RsFp8TileConfig<kBlockM, kBulk, 1>{});
    case 4: return f(RsFp8TileConfig<kBlockM, kBulk, 4>{});
    case 0: return f(RsFp8TileConfig<kBlockM, kBulk, 0>{});
  }
  return cudaErrorInvalidValue;
}

// Calls f(Cfg{}) with the configuration of v; cudaErrorInvalidValue for none.
template <class F>
cudaError_t with_variant(const RsFp8Variant& v, F&& f) {
  if (v.block_m == 64) return v.bulk_weights ? with_work<64, true>(v.work, f) : with_work<64, false>(v.work, f);
  if (v.block_m == 96) return v.bulk_weights ? with_work<96, true>(v.work, f) : with_work<96, false>(v.work, f);
  return cudaErrorInvalidValue;
}

}  // namespace

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
