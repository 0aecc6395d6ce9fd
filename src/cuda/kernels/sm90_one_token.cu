// The one-token layer (sm90_one_token.h). Both GEMMs run the decode kernels' products on the
// token alone: per warp 16 weight rows (the mma's m side, decode_weight_fragment) against the
// token as column 0 of the n8 side (the other columns zero), promoted per k32 block into fp32
// exactly as Mxfp4DecodeMainloop::step does for a tile's first token, so gu, h, Q8(h) and o are
// bitwise the decode chain's; the combine adds the slots' outputs in slot order as
// sm90_combine.cu does.
//
// B fragment of the token (row 0 of the n8 side) for k32 block kb at byte offset `at` of its row:
// lanes 0..3 (g = 0, t = lane) hold bytes at + 4t .. + 3 (b0) and at + 16 + 4t .. + 3 (b1);
// every other lane holds zeros. Of the C fragment only lanes t = 0's c = 0 (row g) and c = 2
// (row g + 8) are the token's.
#include "cuda/kernels/sm90_one_token.h"

#include <algorithm>

#include <cuda_bf16.h>

#include "cuda/kernels/sm90_decode_tile.cuh"
#include "cuda/kernels/sm90_gemm_epilogues.cuh"
#include "cuda/kernels/sm90_kernel_config.cuh"
#include "cuda/kernels/sm90_mxfp4_decode_mainloop.cuh"
#include "cuda/kernels/sm90_q8_block.cuh"
#include "cuda/ptx/cp_async_bulk.cuh"
#include "cuda/ptx/griddep.cuh"
#include "cuda/ptx/mbarrier.cuh"
#include "cuda/ptx/mma.cuh"
#include "moe_ep/layer.h"

namespace moe_ep::cuda {
namespace {

constexpr int kWarps = kOneTokenThreads / 32;
// k steps of a gate_up warp's weights in registers ahead of its MMAs.
constexpr int kGateUpPrefetch = 4;
// A down unit: 16 W2 rows (two micro-tiles, K contiguous) and their scale words.
constexpr int64_t unit_bytes(int64_t intermediate) { return (intermediate / 128) * (2 * kWeightMicroTileBytes + 64); }

// The expert of slot k, or -1 for -1 and for a bad id (which gate_up flags). through_l2: read
// through L2 only (down reads the ids before it waits for gate_up).
__device__ __forceinline__ int slot_expert(const OneTokenParams& p, int k, bool through_l2) {
  int64_t id;
  if (p.ids_int64) {
    const long long* ids = static_cast<const long long*>(p.topk_ids);
    id = through_l2 ? __ldcg(ids + k) : ids[k];
  } else {
    const int* ids = static_cast<const int*>(p.topk_ids);
    id = through_l2 ? __ldcg(ids + k) : ids[k];
  }
  return id >= 0 && id < p.num_experts ? static_cast<int>(id) : -1;
}

// One 128-wide k step of a warp's 16 rows on the token: q = the token's Q8 row at this step,
// sa = its four k32 factors (lanes t = 0 use them).
template <bool kFolded>
__device__ __forceinline__ void token_step(const uint8_t* q, const float* sa, const uint4& w0, const uint4& w1,
                                           uint32_t sw0, uint32_t sw1, const DecodeTables& tables, float (&acc)[4]) {
  const int lane = threadIdx.x % 32;
  const bool token_lane = lane < 4;
#pragma unroll
  for (int kb = 0; kb < 4; ++kb) {
    uint32_t a[4];
    float s_w0, s_w1;
    decode_weight_fragment<kFolded>(kb, w0, w1, sw0, sw1, tables, a, s_w0, s_w1);
    const uint32_t b0 = token_lane ? *reinterpret_cast<const uint32_t*>(q + 32 * kb + 4 * lane) : 0u;
    const uint32_t b1 = token_lane ? *reinterpret_cast<const uint32_t*>(q + 32 * kb + 16 + 4 * lane) : 0u;
    float part[4];
    ptx::mma_m16n8k32_e4m3_via_f16(part, a, b0, b1);
    const float s = sa[kb];
    if constexpr (kFolded) {
      acc[0] = fmaf(part[0], s, acc[0]);
      acc[2] = fmaf(part[2], s, acc[2]);
    } else {  // the operand order of the decode step: sa * sw
      acc[0] = fmaf(part[0], s * s_w0, acc[0]);
      acc[2] = fmaf(part[2], s * s_w1, acc[2]);
    }
  }
}

// ---- gate_up ---------------------------------------------------------------------------------
// Shared memory: the token's Q8 row (H bytes), its scale bytes (H / 32), their fp32 values.
template <bool kFolded>
__global__ void __launch_bounds__(kOneTokenThreads, 2) sm90_one_token_gate_up_kernel(const __grid_constant__ OneTokenParams p) {
  extern __shared__ __align__(16) uint8_t smem[];
  __shared__ DecodeTables tables;
  const int H = p.w13.k, I = p.w2.k, K = p.top_k;
  uint8_t* xq = smem;
  uint8_t* xs = smem + H;
  float* xsf = reinterpret_cast<float*>(smem + H + ((H / 32 + 15) / 16) * 16);
  if constexpr (kFolded) init_decode_tables(tables);
  ptx::grid_dependency_wait();
  // down may start now: it reads the ids (written before this grid began) through L2 and waits
  // for this grid before it reads h.
  ptx::launch_dependents();
  if (blockIdx.x == 0 && threadIdx.x < K && slot_expert(p, threadIdx.x, false) < 0) {
    const int64_t id = p.ids_int64 ? static_cast<const long long*>(p.topk_ids)[threadIdx.x]
                                   : static_cast<const int*>(p.topk_ids)[threadIdx.x];
    if (id != -1) atomicOr(p.error_flags, kErrorExpertIdOutOfRange);
  }
  Q8QuantizeParams q;
  q.x = p.x;
  q.rows = 1;
  q.cols = H;
  q.q = xq;
  q.scales = xs;
  for (int b = threadIdx.x; b < H / 32; b += kOneTokenThreads) {
    q8_quantize_block(q, b);
    xsf[b] = e8m0_to_float_device(xs[b]);
  }
  __syncthreads();

  const int lane = threadIdx.x % 32, g = lane / 4;
  const int k_steps = H / kGemmBlockK, groups = 2 * I / 16, units = K * groups;
  const int total_warps = gridDim.x * kWarps;
  for (int u = blockIdx.x * kWarps + threadIdx.x / 32; u < units; u += total_warps) {
    const int k = u % K, group = u / K;
    const int e = slot_expert(p, k, false);
    if (e < 0) continue;
    // The decode stream of one 16-row group: n_chunk = the group (one group per "block").
    const DecodeTile t{e, 0, 1, group};
    DecodeWeightStream<uint32_t, kGateUpPrefetch, 1> ws(p.w13, t, k_steps);
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int round = 0; round * kGateUpPrefetch < k_steps; ++round) {
#pragma unroll
      for (int s = 0; s < kGateUpPrefetch; ++s) {
        const int ks = round * kGateUpPrefetch + s;
        if (ks >= k_steps) break;
        token_step<kFolded>(xq + ks * kGemmBlockK, xsf + 4 * ks, ws.w[s][0], ws.w[s][1], ws.s[s][0], ws.s[s][1],
                            tables, acc);
        if (ks + kGateUpPrefetch < k_steps) ws.fetch(s);
      }
      ws.advance();
    }
    // DecodeSwigluQ8's arithmetic before its Q8: rows g (gate) and g + 8 (up) of the group give
    // h column 8 group + g.
    if (lane % 4 == 0) {
      const int gate_col = 16 * group + g;
      const float gate = round_to_bf16_device(acc[0] * col_scale(p.w13, e, gate_col));
      const float up = round_to_bf16_device(acc[2] * col_scale(p.w13, e, gate_col + 8));
      p.h[static_cast<int64_t>(k) * I + 8 * group + g] =
          clamped_swiglu_device(gate, up, p.clamp, p.topk_weights[k], p.fast_math);
    }
  }
}

// ---- down ------------------------------------------------------------------------------------
// Shared memory: units (local group j / K, slot j % K) of unit_bytes each (two micro-tiles of K
// steps, then the K steps' 64-byte scale words of the 16 rows), Q8 of h (K x I bytes), its fp32
// factors (K x I / 32), the units' outputs (16 fp32 each), one mbarrier per unit.
struct DownLayout {
  int64_t unit, hq, hsf, out, bars, total;
  __host__ __device__ DownLayout(int64_t I, int64_t K, int groups_per_block) {
    const int64_t units = K * groups_per_block;
    unit = unit_bytes(I);
    hq = units * unit;
    hsf = hq + (K * I + 15) / 16 * 16;
    out = hsf + K * (I / 32) * 4;
    bars = out + units * 16 * 4;
    total = bars + units * 8;
  }
};

template <bool kFolded>
__global__ void __launch_bounds__(kOneTokenThreads, 2) sm90_one_token_down_kernel(const __grid_constant__ OneTokenParams p) {
  extern __shared__ __align__(16) uint8_t smem[];
  __shared__ DecodeTables tables;
  const int H = p.w2.n, I = p.w2.k, K = p.top_k, G = p.groups_per_block;
  const int k_steps = I / kGemmBlockK, units = K * G, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const DownLayout L(I, K, G);
  uint64_t* bars = reinterpret_cast<uint64_t*>(smem + L.bars);
  auto unit_group = [&](int j) { return blockIdx.x * G + j / K; };  // the unit's 16-column group of y
  // The slots' experts, read once (through L2, before the wait): every decision of the block
  // below (which units are copied, waited for, computed and summed) uses these.
  __shared__ int experts[kOneTokenMaxTopK];
  if (threadIdx.x < K) experts[threadIdx.x] = slot_expert(p, threadIdx.x, true);
  if constexpr (kFolded) init_decode_tables(tables);
  for (int j = threadIdx.x; j < units; j += kOneTokenThreads) ptx::mbarrier_init(&bars[j], 1);
  ptx::fence_mbarrier_init();
  __syncthreads();

  // The W2 rows of every valid unit, before gate_up is done.
  const uint64_t policy = ptx::l2_evict_first_policy();
  for (int j = warp; j < units; j += kWarps) {
    const int k = j % K, group = unit_group(j), e = experts[k];
    if (e < 0 || group * 16 >= H) continue;
    const uint32_t dst = ptx::smem_addr(smem + j * L.unit);
    const uint32_t tile_bytes = 2 * k_steps * kWeightMicroTileBytes;
    if (lane == 0) ptx::mbarrier_expect_tx(&bars[j], tile_bytes + 64 * k_steps);
    __syncwarp();
    const int64_t micro = static_cast<int64_t>(e) * (H / 8) + 2 * group;
    if (lane == 0) ptx::cp_async_bulk_g2s(dst, p.w2.w + micro * k_steps * kWeightMicroTileBytes, tile_bytes, &bars[j], policy);
    for (int ks = lane; ks < k_steps; ks += 32)
      ptx::cp_async_bulk_g2s(dst + tile_bytes + 64 * ks,
                             p.w2.w_scale + ((static_cast<int64_t>(e) * k_steps + ks) * H + 16 * group) * 4, 64,
                             &bars[j], policy);
    __syncwarp();
    if (lane == 0) ptx::mbarrier_arrive(&bars[j]);
  }

  ptx::grid_dependency_wait();  // gate_up's h
  ptx::launch_dependents();
  // Q8 of each valid slot's h (DecodeSwigluQ8's arithmetic), one 32-block per thread.
  uint8_t* hq = smem + L.hq;
  float* hsf = reinterpret_cast<float*>(smem + L.hsf);
  for (int b = threadIdx.x; b < K * (I / 32); b += kOneTokenThreads) {
    const int k = b / (I / 32);
    if (experts[k] < 0) continue;
    const float* h = p.h + static_cast<int64_t>(b) * 32;
    float v[32], amax = 0.0f;
#pragma unroll
    for (int i = 0; i < 32; ++i) {
      v[i] = h[i];
      amax = fmaxf(amax, fabsf(v[i]));
    }
    const uint32_t byte = q8_scale_byte_device(amax);
    const float s = e8m0_to_float_device(byte);
    uint32_t* dst = reinterpret_cast<uint32_t*>(hq + static_cast<int64_t>(b) * 32);
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      uint32_t word = 0;
#pragma unroll
      for (int j = 0; j < 4; ++j)
        word |= float_to_e4m3_device(__fdiv_rn(q8_saturate_device(v[4 * i + j]), s)) << (8 * j);
      dst[i] = word;
    }
    hsf[b] = s;
  }
  __syncthreads();

  float* out = reinterpret_cast<float*>(smem + L.out);
  const int g = lane / 4;
  for (int j = warp; j < units; j += kWarps) {
    const int k = j % K, group = unit_group(j), e = experts[k];
    if (e < 0 || group * 16 >= H) continue;
    ptx::mbarrier_wait_parity(&bars[j], 0);
    const uint8_t* w = smem + j * L.unit;
    const uint32_t* sw = reinterpret_cast<const uint32_t*>(w + 2 * k_steps * kWeightMicroTileBytes);
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int ks = 0; ks < k_steps; ++ks) {
      const uint4 w0 = *reinterpret_cast<const uint4*>(w + ks * kWeightMicroTileBytes + lane * 16);
      const uint4 w1 = *reinterpret_cast<const uint4*>(w + (k_steps + ks) * kWeightMicroTileBytes + lane * 16);
      token_step<kFolded>(hq + static_cast<int64_t>(k) * I + ks * kGemmBlockK, hsf + k * (I / 32) + 4 * ks, w0, w1,
                          sw[16 * ks + g], sw[16 * ks + 8 + g], tables, acc);
    }
    // DecodeStoreBf16: o = bf16(acc * column factor), kept as its fp32 value for the sum.
    if (lane % 4 == 0) {
      const int col = 16 * group + g;
      out[j * 16 + g] = __bfloat162float(__float2bfloat16_rn(acc[0] * col_scale(p.w2, e, col)));
      out[j * 16 + 8 + g] = __bfloat162float(__float2bfloat16_rn(acc[2] * col_scale(p.w2, e, col + 8)));
    }
  }
  __syncthreads();

  // y: the valid slots' outputs in slot order (Bf16x8Sum), then y_add as the combine adds it.
  for (int c = threadIdx.x; c < G * 16; c += kOneTokenThreads) {
    const int local = c / 16, r = c % 16, n = (blockIdx.x * G + local) * 16 + r;
    if (n >= H) continue;
    float v = 0.0f;
    for (int k = 0; k < K; ++k)
      if (experts[k] >= 0) v += out[(local * K + k) * 16 + r];
    if (p.y_add != nullptr)
      v = __fadd_rn(__bfloat162float(__float2bfloat16_rn(v)), __uint_as_float(static_cast<uint32_t>(p.y_add[n]) << 16));
    p.y[n] = __bfloat16_as_ushort(__float2bfloat16_rn(v));
  }
}

int gate_up_shared_bytes(int64_t hidden) { return static_cast<int>(hidden + (hidden / 32 + 15) / 16 * 16 + hidden / 32 * 4); }

template <class Kernel>
cudaError_t configure_kernel(Kernel kernel, int smem, bool large_carveout) {
  if (const cudaError_t e = raise_dynamic_shared_limit(kernel, smem); e != cudaSuccess) return e;
  if (large_carveout)
    return cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout, cudaSharedmemCarveoutMaxShared);
  return cudaSuccess;
}

}  // namespace

size_t one_token_down_shared_bytes(int64_t intermediate, int64_t top_k, int groups_per_block) {
  return static_cast<size_t>(DownLayout(intermediate, top_k, groups_per_block).total);
}

int one_token_groups_per_block(int64_t hidden, int sm_count) {
  const int64_t groups = hidden / 16;
  return static_cast<int>((groups + sm_count - 1) / sm_count);
}

cudaError_t configure_sm90_one_token(int64_t hidden, int64_t intermediate, int64_t top_k, int groups_per_block,
                                     int* fits) {
  *fits = 0;
  const int smem_a = gate_up_shared_bytes(hidden);
  const size_t smem_b = one_token_down_shared_bytes(intermediate, top_k, groups_per_block);
  int device = 0, optin = 0, per_sm = 0, regs_per_sm = 0;
  cudaError_t e = cudaGetDevice(&device);
  if (e == cudaSuccess) e = cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
  if (e == cudaSuccess) e = cudaDeviceGetAttribute(&per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, device);
  if (e == cudaSuccess) e = cudaDeviceGetAttribute(&regs_per_sm, cudaDevAttrMaxRegistersPerMultiprocessor, device);
  if (e != cudaSuccess) return e;
  // A down block within the per-block limit; then one block of each on an SM together: registers
  // and shared memory (dynamic, static, and each block's reserved 1 KB), the larger of each
  // kernel's two variants.
  int regs = 0;
  int64_t static_gate_up = 0, static_down = 0;
  auto take = [&](auto kernel, int64_t& static_smem) {
    cudaFuncAttributes a{};
    const cudaError_t err = cudaFuncGetAttributes(&a, kernel);
    regs = std::max(regs, a.numRegs);
    static_smem = std::max(static_smem, static_cast<int64_t>(a.sharedSizeBytes));
    return err;
  };
  for (auto kernel : {sm90_one_token_gate_up_kernel<true>, sm90_one_token_gate_up_kernel<false>})
    if ((e = take(kernel, static_gate_up)) != cudaSuccess) return e;
  for (auto kernel : {sm90_one_token_down_kernel<true>, sm90_one_token_down_kernel<false>})
    if ((e = take(kernel, static_down)) != cudaSuccess) return e;
  if (static_cast<int64_t>(smem_b) + static_down > optin) return cudaSuccess;  // does not fit: *fits stays 0
  for (auto kernel : {sm90_one_token_gate_up_kernel<true>, sm90_one_token_gate_up_kernel<false>})
    if ((e = configure_kernel(kernel, smem_a, true)) != cudaSuccess) return e;
  for (auto kernel : {sm90_one_token_down_kernel<true>, sm90_one_token_down_kernel<false>})
    if ((e = configure_kernel(kernel, static_cast<int>(smem_b), true)) != cudaSuccess) return e;
  int reserved = 0;
  if ((e = cudaDeviceGetAttribute(&reserved, cudaDevAttrReservedSharedMemoryPerBlock, device)) != cudaSuccess) return e;
  const bool smem_ok = static_cast<int64_t>(smem_a) + static_gate_up + static_cast<int64_t>(smem_b) + static_down +
                           2 * static_cast<int64_t>(reserved) <=
                       per_sm;
  const bool regs_ok = 2 * static_cast<int64_t>(regs) * kOneTokenThreads <= regs_per_sm;
  *fits = smem_ok && regs_ok ? 1 : 0;
  return cudaSuccess;
}

cudaError_t launch_sm90_one_token_gate_up(const OneTokenParams& p, int grid, cudaStream_t stream) {
  const int smem = gate_up_shared_bytes(p.w13.k);
  if (p.w13.w_col_scale != nullptr)
    return launch_dependent(sm90_one_token_gate_up_kernel<true>, grid, kOneTokenThreads, smem, stream, p);
  return launch_dependent(sm90_one_token_gate_up_kernel<false>, grid, kOneTokenThreads, smem, stream, p);
}

cudaError_t launch_sm90_one_token_down(const OneTokenParams& p, cudaStream_t stream) {
  const int groups = p.w2.n / 16;
  const int grid = (groups + p.groups_per_block - 1) / p.groups_per_block;
  const size_t smem = one_token_down_shared_bytes(p.w2.k, p.top_k, p.groups_per_block);
  if (p.w2.w_col_scale != nullptr)
    return launch_dependent(sm90_one_token_down_kernel<true>, grid, kOneTokenThreads, smem, stream, p);
  return launch_dependent(sm90_one_token_down_kernel<false>, grid, kOneTokenThreads, smem, stream, p);
}

}  // namespace moe_ep::cuda
