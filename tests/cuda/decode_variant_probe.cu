#include "decode_variant_probe.h"

#include "cuda/kernels/sm90_mxfp4_decode_kernel.cuh"

namespace moe_ep::cuda::test {
namespace {

// Calls f.template operator()<kSlots>() for slots = 2 or 3; cudaErrorInvalidValue otherwise.
template <class F>
cudaError_t with_slots(int slots, F&& f) {
  if (slots == 2) return f.template operator()<2>();
  if (slots == 3) return f.template operator()<3>();
  return cudaErrorInvalidValue;
}

}  // namespace

cudaError_t configure_decode_bulk(int slots, int k1, int k2, int* blocks_per_sm1, int* blocks_per_sm2) {
  return with_slots(slots, [&]<int kSlots>() {
    const cudaError_t err = configure_decode<DecodeSwigluQ8, Gemm1Params, kDecodePrefetch, 1, kSlots>(k1, blocks_per_sm1);
    return err == cudaSuccess
               ? configure_decode<DecodeStoreBf16<false>, Gemm2Params, kDecodePrefetch, 1, kSlots>(k2, blocks_per_sm2)
               : err;
  });
}

cudaError_t launch_decode_bulk_gemm1(int slots, const Gemm1Params& p, int m_tile_bound, cudaStream_t stream) {
  return with_slots(slots, [&]<int kSlots>() {
    return launch_decode<DecodeSwigluQ8, kDecodePrefetch, 1, kSlots>(p, m_tile_bound, stream);
  });
}

cudaError_t launch_decode_bulk_gemm2(int slots, const Gemm2Params& p, int m_tile_bound, cudaStream_t stream) {
  return with_slots(slots, [&]<int kSlots>() {
    return launch_decode<DecodeStoreBf16<false>, kDecodePrefetch, 1, kSlots>(p, m_tile_bound, stream);
  });
}

}  // namespace moe_ep::cuda::test
