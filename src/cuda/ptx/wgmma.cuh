// Warpgroup MMA (wgmma.mma_async, sm_90a): FP8 e4m3 x e4m3 -> fp32 with both operands in shared
// memory or A in registers, and bf16 with A in registers; shared operands described by 64-bit
// matrix descriptors.
//
// Operand layout used here (the only one FP8 allows: K-major for A and B): rows of 128 bytes
// (128 e4m3 along k), 8 rows = one 1024-byte swizzle atom, 16-byte chunk c of row r stored at
// chunk position c ^ (r % 8) (128-byte swizzle). Atoms of consecutive 8-row groups follow each
// other (stride 1024 bytes). The k32 slice kb of a tile is addressed by starting the descriptor
// 32 * kb bytes into the atom; the hardware applies the XOR on the absolute address, so every
// tile must start 1024-byte aligned.
//
// Accumulator fragment of m64nN (per warp w of the warpgroup, lane = 4 * g + t): d[4i + c] is
// row 16w + g (c = 0, 1) or 16w + g + 8 (c = 2, 3), column 8i + 2t + (c & 1): the m16n8 C layout
// of ptx/mma.cuh for each n8 chunk i.
#pragma once

#include <cstdint>

namespace moe_ep::cuda::ptx {

// Matrix descriptor of a K-major, 128-byte-swizzled tile starting at `smem_addr` (shared
// address, 16-byte units; the leading offset is unused for this layout, the stride offset is
// one 1024-byte atom of 8 rows).
__device__ __forceinline__ uint64_t wgmma_desc_k_major_sw128(uint32_t smem_addr) {
  constexpr uint64_t kLeadingOffset = 1;            // unused (K extent within the swizzle)
  constexpr uint64_t kStrideOffset = 1024 >> 4;     // 8 rows x 128 B
  constexpr uint64_t kSwizzle128B = 1;
  return static_cast<uint64_t>((smem_addr & 0x3FFFF) >> 4) | (kLeadingOffset << 16) |
         (kStrideOffset << 32) | (kSwizzle128B << 62);
}

// `desc` moved `units` 16-byte units further (the start address is the low 14 bits, and a shared
// address stays below 256 KB, so the add never carries into the other fields: one 32-bit add).
__device__ __forceinline__ uint64_t wgmma_desc_advance(uint64_t desc, uint32_t units) {
  return (desc & 0xFFFFFFFF00000000ull) | static_cast<uint32_t>(static_cast<uint32_t>(desc) + units);
}

// Orders this warpgroup's register accesses (accumulators, A fragments) before the wgmma that
// follows; shared-memory writes reach a wgmma through fence.proxy.async (ptx/mbarrier.cuh).
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }

__device__ __forceinline__ void wgmma_commit_group() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}

// Waits until at most kPending committed wgmma groups of this warpgroup are in flight.
template <int kPending>
__device__ __forceinline__ void wgmma_wait_group() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
}

// Keeps the compiler from moving accesses of `r` across a wgmma issue or wait.
__device__ __forceinline__ void fence_operand(float& r) { asm volatile("" : "+f"(r)::"memory"); }

template <int kN>
__device__ __forceinline__ void fence_operands(float (&r)[kN]) {
#pragma unroll
  for (int i = 0; i < kN; ++i) fence_operand(r[i]);
}

// The 64 fp32 accumulators of an m64n128 fragment as asm operands %0..%63 ("+f", d[0..63]).
#define MOE_EP_WGMMA_D64_REGS                                                            \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "               \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "      \
  "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "      \
  "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
#define MOE_EP_WGMMA_D64_OPERANDS(d)                                                                  \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),     \
      "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]),        \
      "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]),      \
      "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]),      \
      "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]),      \
      "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]),      \
      "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]),      \
      "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]),      \
      "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])

// D(64x128 fp32) = A(64x32 e4m3) * B(128x32 e4m3)^T, D not accumulated (scale-d = 0).
__device__ __forceinline__ void wgmma_m64n128k32_e4m3_zero_d(float (&d)[64], uint64_t desc_a, uint64_t desc_b) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 "
      MOE_EP_WGMMA_D64_REGS
      "%64, %65, p, 1, 1;\n"
      "}\n"
      : MOE_EP_WGMMA_D64_OPERANDS(d)
      : "l"(desc_a), "l"(desc_b), "n"(0));
}

// D(64x128 fp32) += A(64x16) * B(128x16)^T, both bf16 (kF16 false) or f16 (true), with A in
// registers: per warp w of the warpgroup, rows 16w..16w+15 as the A fragment of mma.sync m16n8k16
// (a[0] = row g, k 2t..2t+1; a[1] = row g + 8; a[2] = row g, k 2t+8..2t+9; a[3] = row g + 8;
// lane = 4g + t); B K-major in shared memory (the layout above: rows of 128 bytes = 64 16-bit
// values, one k16 slice = 32 bytes). The wgmma reads a[] after this returns: keep them unchanged
// (fence_operands) until a wgmma_wait_group has retired it.
template <bool kF16>
__device__ __forceinline__ void wgmma_m64n128k16_rs(float (&d)[64], const uint32_t (&a)[4], uint64_t desc_b) {
  if constexpr (kF16)
    asm volatile(
        "{\n"
        ".reg .pred p;\n"
        "setp.ne.b32 p, %69, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 "
        MOE_EP_WGMMA_D64_REGS
        "{%64, %65, %66, %67}, %68, p, 1, 1, 0;\n"
        "}\n"
        : MOE_EP_WGMMA_D64_OPERANDS(d)
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "n"(1));
  else
    asm volatile(
        "{\n"
        ".reg .pred p;\n"
        "setp.ne.b32 p, %69, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
        MOE_EP_WGMMA_D64_REGS
        "{%64, %65, %66, %67}, %68, p, 1, 1, 0;\n"
        "}\n"
        : MOE_EP_WGMMA_D64_OPERANDS(d)
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "n"(1));
}

// The m64n64k16 form of the wgmma above: D(64x64 fp32) += A(64x16) * B(64x16)^T, the same A
// fragment and B layout, d[32] (the accumulator fragment of the file's head for n64).
template <bool kF16>
__device__ __forceinline__ void wgmma_m64n64k16_rs(float (&d)[32], const uint32_t (&a)[4], uint64_t desc_b) {
#define MOE_EP_WGMMA_M64N64K16_RS(TYPE)                                                                 \
  asm volatile(                                                                                       \
      "{\n"                                                                                           \
      ".reg .pred p;\n"                                                                               \
      "setp.ne.b32 p, %37, 0;\n"                                                                      \
      "wgmma.mma_async.sync.aligned.m64n64k16.f32." TYPE "." TYPE " "                                 \
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "                       \
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "             \
      "{%32, %33, %34, %35}, %36, p, 1, 1, 0;\n"                                                      \
      "}\n"                                                                                           \
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]),        \
        "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]),      \
        "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]),      \
        "+f"(d[29]), "+f"(d[30]), "+f"(d[31])                                                          \
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "n"(1))
  if constexpr (kF16)
    MOE_EP_WGMMA_M64N64K16_RS("f16");
  else
    MOE_EP_WGMMA_M64N64K16_RS("bf16");
#undef MOE_EP_WGMMA_M64N64K16_RS
}

// D(64xN fp32) = A(64x32 e4m3) * B(Nx32 e4m3)^T with A in registers and D not accumulated
// (scale-d = 0), for N = 48, 64 and 96 (d[N / 2]; the narrow forms below: N = 8, 16). Per warp w
// of the warpgroup, rows 16w..16w+15 as the A fragment of mma.sync m16n8k32 e4m3 (a[0] = row g,
// k 4t..4t+3; a[1] = row g + 8; a[2] = row g, k 16+4t..16+4t+3; a[3] = row g + 8; lane = 4g + t);
// B K-major in shared memory (the layout above, one k32 slice = 32 bytes). As for the bf16 form,
// a[] and d[] belong to the wgmma until a wgmma_wait_group has retired it.
__device__ __forceinline__ void wgmma_m64n48k32_e4m3_rs_zero_d(float (&d)[24], const uint32_t (&a)[4], uint64_t desc_b) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %29, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n48k32.f32.e4m3.e4m3 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23}, "
      "{%24, %25, %26, %27}, %28, p, 1, 1;\n"
      "}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "n"(0));
}

__device__ __forceinline__ void wgmma_m64n64k32_e4m3_rs_zero_d(float (&d)[32], const uint32_t (&a)[4], uint64_t desc_b) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %37, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
      "{%32, %33, %34, %35}, %36, p, 1, 1;\n"
      "}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "n"(0));
}

__device__ __forceinline__ void wgmma_m64n96k32_e4m3_rs_zero_d(float (&d)[48], const uint32_t (&a)[4], uint64_t desc_b) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %53, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n96k32.f32.e4m3.e4m3 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47}, "
      "{%48, %49, %50, %51}, %52, p, 1, 1;\n"
      "}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
        "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
        "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "n"(0));
}

// The narrow forms for the decode kernels' tiles of at most 8 or 16 tokens: m64n8k32 (d[4]) and
// m64n16k32 (d[8]).
__device__ __forceinline__ void wgmma_m64n8k32_e4m3_rs_zero_d(float (&d)[4], const uint32_t (&a)[4], uint64_t desc_b) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %9, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n8k32.f32.e4m3.e4m3 "
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, %8, p, 1, 1;\n"
      "}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "n"(0));
}

__device__ __forceinline__ void wgmma_m64n16k32_e4m3_rs_zero_d(float (&d)[8], const uint32_t (&a)[4], uint64_t desc_b) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %13, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n16k32.f32.e4m3.e4m3 "
      "{%0, %1, %2, %3, %4, %5, %6, %7}, {%8, %9, %10, %11}, %12, p, 1, 1;\n"
      "}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "n"(0));
}

// The form of the wgmma above with d[kN] accumulators (N = 2 kN).
template <int kN>
__device__ __forceinline__ void wgmma_k32_e4m3_rs_zero_d(float (&d)[kN], const uint32_t (&a)[4], uint64_t desc_b) {
  static_assert(kN == 4 || kN == 8 || kN == 24 || kN == 32 || kN == 48,
                "m64n8k32, m64n16k32, m64n48k32, m64n64k32 or m64n96k32");
  if constexpr (kN == 4)
    wgmma_m64n8k32_e4m3_rs_zero_d(d, a, desc_b);
  else if constexpr (kN == 8)
    wgmma_m64n16k32_e4m3_rs_zero_d(d, a, desc_b);
  else if constexpr (kN == 24)
    wgmma_m64n48k32_e4m3_rs_zero_d(d, a, desc_b);
  else if constexpr (kN == 32)
    wgmma_m64n64k32_e4m3_rs_zero_d(d, a, desc_b);
  else
    wgmma_m64n96k32_e4m3_rs_zero_d(d, a, desc_b);
}

__device__ __forceinline__ void fence_operand(uint32_t& r) { asm volatile("" : "+r"(r)::"memory"); }

template <int kN>
__device__ __forceinline__ void fence_operands(uint32_t (&r)[kN]) {
#pragma unroll
  for (int i = 0; i < kN; ++i) fence_operand(r[i]);
}

// Register budget of the executing warpgroup (sm_90a; the kernel needs a register cap at entry,
// __launch_bounds__(threads, 1)). kRegs: a multiple of 8 in [24, 256].
template <int kRegs>
__device__ __forceinline__ void setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}

template <int kRegs>
__device__ __forceinline__ void setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}

}  // namespace moe_ep::cuda::ptx
