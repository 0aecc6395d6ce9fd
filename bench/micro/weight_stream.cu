// How fast can a kernel stream FP4 expert weights at T = 1, by the way the bytes reach the
// warps? The one-token and decode kernels read each weight once: per unit (a slot's 16 weight
// rows) two micro-tiles of K/128 k steps x 512 bytes (sm90_grouped_gemm.h) and a 4-byte scale
// word per row group and k step. This program streams deepseek-v4-flash's W13 of one token (6
// slots x 256 units x 32 k steps: 48 MiB of codes + 3 MiB of scales) with a stand-in for the
// decode (`alu` rounds of about 8 dependent integer instructions with the loop, per k step and
// lane, on the loaded words) and reports the achieved bandwidth against a device-to-device copy,
// one CSV row per variant:
//
//   register ring  each warp keeps `depth` k steps of its unit in registers ahead of use
//                  (ld.global.nc.L1::no_allocate, as DecodeWeightStream does)
//   bulk ring      each warp has `stages` shared-memory stages of `chunk` k steps filled by
//                  cp.async.bulk on an mbarrier (bytes in flight without registers)
//   half units     register ring with each unit's K in two halves on two warps (twice the units)
//
// The buffer is 40 copies of the weights, one per launch in turn, so L2 (50 MiB) holds none of
// what a launch reads. Build: cmake -DMOE_EP_CUDA=ON -DMOE_EP_BUILD_BENCH=ON; run:
//   moe_ep_weight_stream [--commit C] > weight_stream.csv
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>

namespace {

#define CHECK_CUDA(x)                                                                                      \
  do {                                                                                                     \
    const cudaError_t e_ = (x);                                                                            \
    if (e_ != cudaSuccess) {                                                                               \
      std::fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, cudaGetErrorString(e_));                      \
      std::exit(1);                                                                                        \
    }                                                                                                      \
  } while (0)

constexpr int kTileBytes = 512;   // one micro-tile's k step
constexpr int kScaleBytes = 64;   // one unit's scale words of a k step (16 rows x 4 bytes)
constexpr int kStepBytes = 2 * kTileBytes + kScaleBytes;
constexpr int kUnits = 6 * 256;   // top_k x 2I / 16 at deepseek-v4-flash
constexpr int kSteps = 32;        // H / 128

__device__ __forceinline__ uint4 ld_stream_v4(const void* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  return v;
}
__device__ __forceinline__ uint32_t ld_stream_u32(const void* p) {
  uint32_t v;
  asm volatile("ld.global.nc.L1::no_allocate.u32 %0, [%1];" : "=r"(v) : "l"(p));
  return v;
}

// The decode's stand-in: depends on every loaded word; a round is 6 integer operations plus the
// loop's own (the SASS of the kernel counts them exactly).
__device__ __forceinline__ uint32_t consume(const uint4& a, const uint4& b, uint32_t s, uint32_t acc, int alu) {
  uint32_t x = a.x ^ b.y ^ s, y = a.y + b.x, z = a.z ^ b.w, w = a.w + b.z;
  for (int i = 0; i < alu; ++i) {
    x = __funnelshift_l(x, y, 3) + z;
    y ^= x * 0x9e3779b1u;
    z = __byte_perm(z, w, 0x5140) + x;
    w += y;
  }
  return acc + (x ^ y ^ z ^ w);
}

struct Stream {
  const uint8_t* w;  // [units][2][steps][512]
  const uint8_t* s;  // [units][steps][64]
  int units, steps, alu;
  uint32_t* sink;    // written only if the sum hits a value it never does, so nothing is elided
};

template <int kDepth>
__global__ void register_ring(Stream p) {
  const int lane = threadIdx.x % 32, warps = blockDim.x / 32;
  uint32_t acc = 0;
  for (int u = blockIdx.x * warps + threadIdx.x / 32; u < p.units; u += gridDim.x * warps) {
    const uint8_t* w0 = p.w + static_cast<int64_t>(u) * 2 * p.steps * kTileBytes + lane * 16;
    const uint8_t* w1 = w0 + p.steps * kTileBytes;
    const uint8_t* sw = p.s + static_cast<int64_t>(u) * p.steps * kScaleBytes + (lane / 4) * 4;
    uint4 r0[kDepth], r1[kDepth];
    uint32_t rs[kDepth];
#pragma unroll
    for (int i = 0; i < kDepth; ++i) {
      r0[i] = ld_stream_v4(w0 + i * kTileBytes);
      r1[i] = ld_stream_v4(w1 + i * kTileBytes);
      rs[i] = ld_stream_u32(sw + i * kScaleBytes);
    }
    for (int round = 0; round < p.steps / kDepth; ++round) {
#pragma unroll
      for (int i = 0; i < kDepth; ++i) {
        acc = consume(r0[i], r1[i], rs[i], acc, p.alu);
        const int next = (round + 1) * kDepth + i;
        if (next < p.steps) {
          r0[i] = ld_stream_v4(w0 + next * kTileBytes);
          r1[i] = ld_stream_v4(w1 + next * kTileBytes);
          rs[i] = ld_stream_u32(sw + next * kScaleBytes);
        }
      }
    }
  }
  if (acc == 0x9e3779b9u) p.sink[0] = acc;
}

__device__ __forceinline__ uint32_t smem_addr(const void* p) { return static_cast<uint32_t>(__cvta_generic_to_shared(p)); }

// Shared memory: warp w's ring of kStages stages (codes of micro-tile 0, of micro-tile 1, scale
// words: kChunk k steps each), then the warps' mbarriers.
template <int kStages, int kChunk>
__global__ void bulk_ring(Stream p) {
  extern __shared__ __align__(128) uint8_t smem[];
  constexpr int kStage = kChunk * kStepBytes;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  uint8_t* ring = smem + warp * kStages * kStage;
  uint64_t* bars = reinterpret_cast<uint64_t*>(smem + warps * kStages * kStage) + warp * kStages;
  if (lane == 0)
    for (int i = 0; i < kStages; ++i) asm volatile("mbarrier.init.shared.b64 [%0], 1;" ::"r"(smem_addr(&bars[i])));
  asm volatile("fence.mbarrier_init.release.cluster;");
  __syncwarp();
  uint32_t acc = 0, phases = 0;
  int stage = 0;
  const int chunks = p.steps / kChunk;
  for (int u = blockIdx.x * warps + warp; u < p.units; u += gridDim.x * warps) {
    const uint8_t* w0 = p.w + static_cast<int64_t>(u) * 2 * p.steps * kTileBytes;
    const uint8_t* sw = p.s + static_cast<int64_t>(u) * p.steps * kScaleBytes;
    auto fill = [&](int chunk, int into) {
      if (lane != 0) return;
      const uint32_t bar = smem_addr(&bars[into]), dst = smem_addr(ring + into * kStage);
      const uint8_t* src[3] = {w0 + chunk * kChunk * kTileBytes, w0 + (p.steps + chunk * kChunk) * kTileBytes,
                               sw + chunk * kChunk * kScaleBytes};
      const uint32_t bytes[3] = {kChunk * kTileBytes, kChunk * kTileBytes, kChunk * kScaleBytes};
      asm volatile("mbarrier.arrive.expect_tx.shared.b64 _, [%0], %1;" ::"r"(bar), "r"(kStage));
      uint32_t at = dst;
      for (int j = 0; j < 3; ++j) {
        asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(at),
                     "l"(src[j]), "r"(bytes[j]), "r"(bar)
                     : "memory");
        at += bytes[j];
      }
    };
    for (int c = 0, into = stage; c < kStages && c < chunks; ++c, into = (into + 1) % kStages) fill(c, into);
    for (int c = 0; c < chunks; ++c) {
      const uint32_t bar = smem_addr(&bars[stage]), parity = (phases >> stage) & 1;
      uint32_t done = 0;
      while (!done)
        asm volatile("{ .reg .pred q; mbarrier.try_wait.parity.shared.b64 q, [%1], %2; selp.u32 %0, 1, 0, q; }"
                     : "=r"(done)
                     : "r"(bar), "r"(parity)
                     : "memory");
      const uint8_t* in = ring + stage * kStage;
      for (int k = 0; k < kChunk; ++k) {
        const uint4 a = *reinterpret_cast<const uint4*>(in + k * kTileBytes + lane * 16);
        const uint4 b = *reinterpret_cast<const uint4*>(in + (kChunk + k) * kTileBytes + lane * 16);
        const uint32_t s = *reinterpret_cast<const uint32_t*>(in + 2 * kChunk * kTileBytes + k * kScaleBytes + (lane / 4) * 4);
        acc = consume(a, b, s, acc, p.alu);
      }
      __syncwarp();  // every lane is done with the stage before it is refilled
      phases ^= 1u << stage;
      if (c + kStages < chunks) fill(c + kStages, stage);
      stage = (stage + 1) % kStages;
    }
  }
  if (acc == 0x9e3779b9u) p.sink[0] = acc;
}

struct Device {
  int sms = 0;
  std::string name;
  uint8_t* buf = nullptr;
  int64_t region = 0;  // one copy of the codes and scales
  int regions = 40;
  uint32_t* sink = nullptr;
  cudaEvent_t begin{}, end{};
};

double copy_gbps(Device& d) {
  const int64_t bytes = int64_t{512} << 20;  // fits twice in the buffer
  float ms = 0;
  CHECK_CUDA(cudaEventRecord(d.begin));
  for (int i = 0; i < 10; ++i) CHECK_CUDA(cudaMemcpyAsync(d.buf + bytes, d.buf, bytes, cudaMemcpyDeviceToDevice));
  CHECK_CUDA(cudaEventRecord(d.end));
  CHECK_CUDA(cudaEventSynchronize(d.end));
  CHECK_CUDA(cudaEventElapsedTime(&ms, d.begin, d.end));
  return 10 * 2.0 * bytes / (ms * 1e-3) / 1e9;
}

template <class Kernel>
double time_us(Device& d, Kernel kernel, int threads, int smem, int alu, int split) {
  CHECK_CUDA(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  const int64_t codes = int64_t{kUnits} * 2 * kSteps * kTileBytes;
  auto launch = [&](int i) {
    const uint8_t* base = d.buf + (i % d.regions) * d.region;
    kernel<<<d.sms, threads, smem>>>(Stream{base, base + codes, kUnits * split, kSteps / split, alu, d.sink});
  };
  for (int i = 0; i < 3; ++i) launch(i);
  CHECK_CUDA(cudaDeviceSynchronize());
  const int n = 40;
  float ms = 0;
  CHECK_CUDA(cudaEventRecord(d.begin));
  for (int i = 0; i < n; ++i) launch(i);
  CHECK_CUDA(cudaEventRecord(d.end));
  CHECK_CUDA(cudaEventSynchronize(d.end));
  CHECK_CUDA(cudaGetLastError());
  CHECK_CUDA(cudaEventElapsedTime(&ms, d.begin, d.end));
  return ms * 1e3 / n;
}

}  // namespace

int main(int argc, char** argv) {
  std::string commit = "unknown";
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], "--commit") == 0) commit = argv[i + 1];
  Device d;
  cudaDeviceProp prop{};
  CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
  d.sms = prop.multiProcessorCount;
  d.name = prop.name;
  const int64_t bytes = int64_t{kUnits} * kSteps * kStepBytes;
  d.region = bytes + (int64_t{1} << 20);
  CHECK_CUDA(cudaMalloc(&d.buf, d.region * d.regions));
  CHECK_CUDA(cudaMemset(d.buf, 0x5a, d.region * d.regions));
  CHECK_CUDA(cudaMalloc(&d.sink, 64));
  CHECK_CUDA(cudaEventCreate(&d.begin));
  CHECK_CUDA(cudaEventCreate(&d.end));
  const double copy = copy_gbps(d);
  char date[16];
  const std::time_t now = std::time(nullptr);
  std::strftime(date, sizeof date, "%Y-%m-%d", std::gmtime(&now));

  std::printf("gpu,date,commit,mechanism,threads,depth,alu,units,time_us,gbps,copy_gbps\n");
  auto row = [&](const char* mechanism, int depth, auto kernel, int threads, int smem, int alu, int split = 1) {
    const double us = time_us(d, kernel, threads, smem, alu, split);
    std::printf("%s,%s,%s,%s,%d,%d,%d,%d,%.2f,%.0f,%.0f\n", d.name.c_str(), date, commit.c_str(), mechanism, threads,
                depth, alu, kUnits * split, us, bytes / (us * 1e-6) / 1e9, copy);
    std::fflush(stdout);
  };
  auto bulk_smem = [](int warps, int stages, int chunk) { return warps * stages * (chunk * kStepBytes + 8); };
  for (const int alu : {0, 16, 32}) {
    row("register ring", 4, register_ring<4>, 384, 0, alu);
    row("register ring", 8, register_ring<8>, 384, 0, alu);
    row("register ring", 4, register_ring<4>, 768, 0, alu);
    row("register ring", 2, register_ring<2>, 1024, 0, alu);
    row("register ring (half units)", 4, register_ring<4>, 768, 0, alu, 2);
    row("register ring (half units)", 2, register_ring<2>, 1024, 0, alu, 2);
    row("bulk ring 4 x 4 steps", 16, bulk_ring<4, 4>, 384, bulk_smem(12, 4, 4), alu);
    row("bulk ring 2 x 4 steps", 8, bulk_ring<2, 4>, 768, bulk_smem(24, 2, 4), alu);
    row("bulk ring 2 x 2 steps", 4, bulk_ring<2, 2>, 1024, bulk_smem(32, 2, 2), alu);
  }
  return 0;
}
