// The shared expert's tensor-core way (kernels/sm90_shared_expert.h): C[T, N] = A[T, K] . B[N, K]^T
// with A, B bf16 and K contiguous, on mma.sync m16n8k16 (fp32 accumulation).
//
// Block tile kBM x kBN x kBK = 128 x 128 x 64, kStages cp.async stages in dynamic shared memory.
// Eight warps as 2 (M) x 4 (N), each warp 64 x 32: 4 m16 tiles x 4 n8 tiles.
// Shared layout of one operand stage: 128 rows of 64 bf16 (128 bytes = eight 16-byte chunks);
// chunk c of row r sits at chunk position c ^ (r % 8), so the eight rows one ldmatrix reads (and
// the chunks one cp.async wave writes) fall in eight distinct bank groups.
//
// GEMM 1 (N = 2I): block column tile nb covers intermediate columns [64 nb, 64 nb + 64). Its B
// tile row b (warp column w = b / 32) is W13 row q * I + 64 nb + 16 w + b % 16 with q = (b % 32)
// / 16 (0: gate, 1: up), so a thread's n8 tiles 0, 1 are gate columns and tiles 2, 3 the up
// columns of the same intermediate indices: the SwiGLU needs no exchange between threads.
#include "cuda/kernels/sm90_shared_expert.h"

#include "cuda/kernels/sm90_shared_expert_math.cuh"
#include "cuda/ptx/cp_async.cuh"
#include "cuda/ptx/ldmatrix.cuh"
#include "cuda/ptx/mma.cuh"
#include "cuda/ptx/smem.cuh"

namespace moe_ep::cuda {
namespace {

constexpr int kBM = 128, kBN = 128, kBK = 64, kStages = 3, kThreads = 256;
constexpr int kStageBytes = (kBM + kBN) * kBK * 2;
constexpr int kSmemBytes = kStages * kStageBytes;
static_assert(kBK * 2 == 128, "one operand row is eight 16-byte chunks");

__device__ __forceinline__ uint32_t swizzled(uint32_t base, int row, int chunk) {
  return base + row * 128 + ((chunk ^ (row & 7)) << 4);
}

// B tile row b of block column nb -> weight row; its terms live row-major ([N, K]) or in the
// tiled layout (shared_expert_tiled_index with rows() and tiled_intermediate(); K % 256 == 0),
// where a row's 64 terms of a stage stay one contiguous 128-byte run, so the stage loads keep
// their shape.
template <bool kTiled>
struct GateUpRows {  // GEMM 1: B tile row -> W13 row
  static constexpr bool tiled = kTiled;
  int intermediate;
  __device__ __forceinline__ int64_t operator()(int nb, int b) const {
    return static_cast<int64_t>(((b % 32) / 16) * intermediate + nb * 64 + (b / 32) * 16 + b % 16);
  }
  __device__ __forceinline__ int64_t rows() const { return 2 * static_cast<int64_t>(intermediate); }
  __device__ __forceinline__ int64_t tiled_intermediate() const { return intermediate; }
};
template <bool kTiled>
struct DownRows {  // GEMM 2: B tile row -> W2 row
  static constexpr bool tiled = kTiled;
  int hidden;
  __device__ __forceinline__ int64_t operator()(int nb, int b) const { return static_cast<int64_t>(nb) * kBN + b; }
  __device__ __forceinline__ int64_t rows() const { return hidden; }
  __device__ __forceinline__ int64_t tiled_intermediate() const { return 0; }
};

// The B rows one thread copies in every stage (kBN * 8 / kThreads of them). Tiled: where each
// row's terms of stage 0 start, resolved once per block, and the stride between 256-term stages
// (a stage's k0 adds (k0 / 256) * stage_stride + k0 % 256). Row-major keeps nothing: the loader
// forms B + row * K + k as before.
template <class BRows, bool kTiled = BRows::tiled>
struct BSource {
  __device__ __forceinline__ BSource(const uint16_t*, BRows, int, int) {}
};
template <class BRows>
struct BSource<BRows, true> {
  uint32_t row[kBN * 8 / kThreads];  // element offsets from B (shared_expert_tiles: < 2^31)
  uint32_t stage_stride;
  __device__ __forceinline__ BSource(const uint16_t*, BRows brows, int nb, int) {
    stage_stride = static_cast<uint32_t>(shared_expert_tiled_stage_stride(brows.rows()));
#pragma unroll
    for (int i = 0; i < kBN * 8 / kThreads; ++i) {
      const int r = (static_cast<int>(threadIdx.x) + i * kThreads) / 8;
      row[i] = static_cast<uint32_t>(shared_expert_tiled_index(brows(nb, r), 0, brows.rows(), brows.tiled_intermediate()));
    }
  }
};

// One stage: A rows [m0, m0 + 128) (rows >= M zero-filled) and the B rows of block column nb,
// columns [k0, k0 + 64).
template <class BRows>
__device__ __forceinline__ void load_stage(uint32_t stage, const uint16_t* __restrict__ A, const uint16_t* __restrict__ B,
                                           BRows brows, const BSource<BRows>& bsrc, int m0, int M, int nb, int K,
                                           int k0) {
  const uint32_t a_base = stage, b_base = stage + kBM * 128;
#pragma unroll
  for (int i = 0; i < kBM * 8 / kThreads; ++i) {
    const int q = static_cast<int>(threadIdx.x) + i * kThreads, r = q / 8, c = q % 8;
    const bool inside = m0 + r < M;
    const uint16_t* src = A + (inside ? static_cast<int64_t>(m0 + r) * K + k0 + c * 8 : 0);
    ptx::cp_async_16(swizzled(a_base, r, c), src, inside ? 16u : 0u);
  }
#pragma unroll
  for (int i = 0; i < kBN * 8 / kThreads; ++i) {
    const int q = static_cast<int>(threadIdx.x) + i * kThreads, r = q / 8, c = q % 8;
    if constexpr (BRows::tiled)  // k0 % 64 == 0: the 64 terms stay inside one 256-term block
      ptx::cp_async_16(swizzled(b_base, r, c), B + (bsrc.row[i] + (k0 / 256) * bsrc.stage_stride + k0 % 256 + c * 8));
    else
      ptx::cp_async_16(swizzled(b_base, r, c), B + brows(nb, r) * K + k0 + c * 8);
  }
}

// The block's 128 x 128 fp32 tile of A . B^T into acc (warp (wm, wn): rows 64 wm + 16 mi + ...,
// B tile rows 32 wn + 8 nj + ...; mma.cuh's C fragment layout).
template <class BRows>
__device__ __forceinline__ void block_tile(const uint16_t* __restrict__ A, const uint16_t* __restrict__ B, BRows brows,
                                           int m0, int M, int nb, int K, float (&acc)[4][4][4]) {
  extern __shared__ __align__(128) unsigned char smem[];
  const uint32_t base = ptx::smem_addr(smem);
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int wm = warp / 4, wn = warp % 4;
#pragma unroll
  for (int mi = 0; mi < 4; ++mi)
#pragma unroll
    for (int nj = 0; nj < 4; ++nj)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[mi][nj][e] = 0.0f;

  const int k_tiles = K / kBK;
  const BSource<BRows> bsrc(B, brows, nb, K);
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < k_tiles) load_stage(base + s * kStageBytes, A, B, brows, bsrc, m0, M, nb, K, s * kBK);
    ptx::cp_async_commit();
  }
  for (int kt = 0; kt < k_tiles; ++kt) {
    ptx::cp_async_wait<kStages - 2>();
    __syncthreads();  // stage kt landed for every thread; stage kt - 1 is no longer read
    const int next = kt + kStages - 1;
    if (next < k_tiles)
      load_stage(base + (next % kStages) * kStageBytes, A, B, brows, bsrc, m0, M, nb, K, next * kBK);
    ptx::cp_async_commit();

    const uint32_t a_base = base + (kt % kStages) * kStageBytes, b_base = a_base + kBM * 128;
#pragma unroll
    for (int kk = 0; kk < kBK / 16; ++kk) {
      uint32_t a[4][4], b[4][2];
#pragma unroll
      for (int mi = 0; mi < 4; ++mi)
        ptx::ldmatrix_x4(a[mi], swizzled(a_base, wm * 64 + mi * 16 + lane % 16, kk * 2 + lane / 16));
#pragma unroll
      for (int pair = 0; pair < 2; ++pair) {
        uint32_t r[4];
        ptx::ldmatrix_x4(r, swizzled(b_base, wn * 32 + pair * 16 + (lane / 16) * 8 + lane % 8, kk * 2 + (lane / 8) % 2));
        b[pair * 2][0] = r[0];
        b[pair * 2][1] = r[1];
        b[pair * 2 + 1][0] = r[2];
        b[pair * 2 + 1][1] = r[3];
      }
#pragma unroll
      for (int mi = 0; mi < 4; ++mi)
#pragma unroll
        for (int nj = 0; nj < 4; ++nj) ptx::mma_m16n8k16_bf16(acc[mi][nj], a[mi], b[nj][0], b[nj][1], acc[mi][nj]);
    }
  }
  ptx::cp_async_wait<0>();
}

__device__ __forceinline__ uint32_t pack2(uint16_t lo, uint16_t hi) {
  return static_cast<uint32_t>(lo) | (static_cast<uint32_t>(hi) << 16);
}

template <bool kTiled>
__global__ void __launch_bounds__(kThreads) sm90_shared_gate_up_mma_kernel(const __grid_constant__ SharedExpertParams p) {
  const int nb = static_cast<int>(blockIdx.x), m0 = static_cast<int>(blockIdx.y) * kBM;
  float acc[4][4][4];
  block_tile(p.x, p.w13, GateUpRows<kTiled>{p.intermediate}, m0, p.num_tokens, nb, p.hidden, acc);
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int wm = warp / 4, wn = warp % 4;
#pragma unroll
  for (int mi = 0; mi < 4; ++mi)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int t = m0 + wm * 64 + mi * 16 + lane / 4 + half * 8;
      if (t >= p.num_tokens) continue;
#pragma unroll
      for (int nj = 0; nj < 2; ++nj) {
        const int i = nb * 64 + wn * 16 + nj * 8 + 2 * (lane % 4);
        const float* g = acc[mi][nj] + half * 2;
        const float* u = acc[mi][nj + 2] + half * 2;
        *reinterpret_cast<uint32_t*>(p.h + static_cast<int64_t>(t) * p.intermediate + i) =
            pack2(shared_expert::swiglu_h(g[0], u[0], p.clamp), shared_expert::swiglu_h(g[1], u[1], p.clamp));
      }
    }
}

template <bool kTiled>
__global__ void __launch_bounds__(kThreads) sm90_shared_down_mma_kernel(const __grid_constant__ SharedExpertParams p) {
  const int nb = static_cast<int>(blockIdx.x), m0 = static_cast<int>(blockIdx.y) * kBM;
  float acc[4][4][4];
  block_tile(p.h, p.w2, DownRows<kTiled>{p.hidden}, m0, p.num_tokens, nb, p.intermediate, acc);
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int wm = warp / 4, wn = warp % 4;
#pragma unroll
  for (int mi = 0; mi < 4; ++mi)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int t = m0 + wm * 64 + mi * 16 + lane / 4 + half * 8;
      if (t >= p.num_tokens) continue;
#pragma unroll
      for (int nj = 0; nj < 4; ++nj) {
        const int n = nb * kBN + wn * 32 + nj * 8 + 2 * (lane % 4);
        uint32_t* out = reinterpret_cast<uint32_t*>(p.y + static_cast<int64_t>(t) * p.hidden + n);
        const uint32_t old = p.accumulate ? *out : 0u;
        const float* o = acc[mi][nj] + half * 2;
        *out = pack2(shared_expert::down_out(o[0], static_cast<uint16_t>(old & 0xFFFFu), p.accumulate),
                     shared_expert::down_out(o[1], static_cast<uint16_t>(old >> 16), p.accumulate));
      }
    }
}

template <bool kTiled>
cudaError_t configure_mma() {
  cudaError_t err = cudaFuncSetAttribute(sm90_shared_gate_up_mma_kernel<kTiled>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes);
  if (err != cudaSuccess) return err;
  return cudaFuncSetAttribute(sm90_shared_down_mma_kernel<kTiled>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                              kSmemBytes);
}

template <bool kTiled>
void launch_mma(const SharedExpertParams& p, cudaStream_t stream) {
  const unsigned m_tiles = static_cast<unsigned>((p.num_tokens + kBM - 1) / kBM);
  sm90_shared_gate_up_mma_kernel<kTiled><<<dim3(static_cast<unsigned>(p.intermediate / 64), m_tiles), kThreads,
                                           kSmemBytes, stream>>>(p);
  sm90_shared_down_mma_kernel<kTiled><<<dim3(static_cast<unsigned>(p.hidden / kBN), m_tiles), kThreads, kSmemBytes,
                                        stream>>>(p);
}

}  // namespace

cudaError_t configure_sm90_shared_expert_mma() {
  const cudaError_t err = configure_mma<false>();
  return err != cudaSuccess ? err : configure_mma<true>();
}

cudaError_t launch_sm90_shared_expert_mma(const SharedExpertParams& p, cudaStream_t stream) {
  if (p.tiled_weights && !shared_expert_tiles(p.hidden, p.intermediate)) return cudaErrorInvalidValue;
  if (p.num_tokens == 0) return cudaSuccess;
  if (p.tiled_weights)
    launch_mma<true>(p, stream);
  else
    launch_mma<false>(p, stream);
  return cudaGetLastError();
}

}  // namespace moe_ep::cuda
