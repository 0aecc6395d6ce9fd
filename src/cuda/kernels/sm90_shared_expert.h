// The shared expert on the GPU (moe_ep/shared_expert.h's precision recipe, bf16 weights), two
// kernels on one stream in one of two ways:
//
// Dot products (decode; any H, I that are multiples of 16), bitwise the CPU's sums:
//   kernel 1: gu = bf16(x . W13^T), gate = min(gu[:I], c), up = clamp(gu[I:], -c, c),
//             h = bf16(silu(gate) * up)           one warp per 2 intermediate indices (4 rows)
//   kernel 2: o = bf16(h . W2^T); out = o, or y = bf16(y + o) (accumulate)   one warp per 4 rows
// Each dot product runs in the CPU's order: 8 lanes of a weight row hold its 16 interleaved
// partial sums (term i into partial i % 16, in increasing i; lane q the partials 2q, 2q + 1),
// folded pairwise (p[j] += p[j+8], +4, +2 by shuffles, +1 in the lane); bf16 x bf16 products are
// exact in fp32, so the sums are the CPU's bit for bit.
// The weights stream through a cp.async ring in each warp's shared memory (stages of 4 rows x
// 256 terms, 3 in flight while one is read; read by ldmatrix); the activation terms of a stage
// come with it (x by 2-byte loads when not 16-byte aligned; h must be) and are widened to fp32
// once per stage.
// Both kernels are programmatic dependents (ptx/griddep.cuh): a warp copies its first weight
// stages before griddepcontrol.wait and touches x, h, y only after it; each kernel lets the next
// grid launch at once, so kernel 2 loads its first W2 stages while kernel 1 runs.
// SiLU uses expf (2 ulp), where the CPU uses std::exp: h may differ in a last bf16 bit.
// Every kTok tokens of a block share the weight loads. At large T each weight is re-read T/4
// times, so prefill takes the tensor-core way.
//
// Tensor cores (T >= kSharedExpertMmaMinTokens; H % 128 == 0, I % 64 == 0): bf16 mma.sync
// m16n8k16 with fp32 accumulation, 128 x 128 block tiles, k64 stages through cp.async
// (kernels/sm90_shared_expert_mma.cu). GEMM 1's block tile holds 64 gate and the matching 64 up
// columns so the SwiGLU runs in its epilogue; GEMM 2's epilogue stores o or y + o. Same element
// math; the fp32 sums run in the tensor cores' order, so results match the CPU by the recipe's
// threshold, not bit for bit.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

namespace moe_ep::cuda {

inline constexpr int kSharedExpertMmaMinTokens = 64;
inline constexpr int kSharedExpertMmaHiddenMultiple = 128;
inline constexpr int kSharedExpertMmaIntermediateMultiple = 64;

enum class SharedExpertPath : int32_t { kAuto = 0, kDotProducts = 1, kTensorCores = 2 };

struct SharedExpertParams {
  const uint16_t* x = nullptr;    // bf16 [T, H]
  const uint16_t* w13 = nullptr;  // bf16 [2I, H]
  const uint16_t* w2 = nullptr;   // bf16 [H, I]
  uint16_t* h = nullptr;          // bf16 [T, I] scratch, 16-byte aligned
  uint16_t* y = nullptr;          // bf16 [T, H]: out, or accumulated into
  int32_t num_tokens = 0, hidden = 0, intermediate = 0;
  float clamp = 0.0f;             // +inf when absent
  int32_t accumulate = 0;
  SharedExpertPath path = SharedExpertPath::kAuto;  // kTensorCores falls back when H, I do not fit
  // w13 / w2 in the tiled layout (shared_expert_tiled_index; shared_expert_tiles(H, I)), read by
  // both ways; launch_sm90_shared_expert refuses it for other shapes.
  int32_t tiled_weights = 0;
  // The dot-product kernels copy each warp's weight stages with bulk copies (four 512-byte row
  // pieces a stage, completing on a per-slot mbarrier) instead of 16-byte cp.async per lane;
  // either layout, w13 / w2 16-byte aligned. The same terms in the same order: the same bits.
  int32_t bulk_weights = 0;
};
// The layer's shared expert copies its weights with bulk copies up to this many tokens (the
// one-token kernels, where the copies keep more bytes in flight than the warps' loads; from a
// few tokens on the loads' overlap with the math wins).
inline constexpr int kSharedExpertBulkMaxTokens = 1;

// The tiled layout of the weights: the 4 rows one dot-product warp reads (W13: gate rows 2b,
// 2b + 1 and up rows I + 2b, I + 2b + 1; W2: rows 4b .. 4b + 3), 256 terms of each per stage,
// stage-major: [k / 256][b][4][256]. A warp's stage is one contiguous 2 KB block, and the warps'
// blocks of one stage are neighbours (warp b + 1's follows warp b's), so the warps streaming the
// same stage at a time read one region instead of rows a whole matrix row apart. Element (row, k)
// of a [rows, K] matrix (w13: rows = 2I and `intermediate` = I; w2: intermediate = 0). Any
// 8-aligned run of 8 terms of a row stays contiguous (16-byte loads keep their shape); a stage
// of every row is shared_expert_tiled_stage_stride(rows) elements.
constexpr int64_t shared_expert_tiled_stage_stride(int64_t rows) { return rows * 256; }
constexpr int64_t shared_expert_tiled_index(int64_t row, int64_t k, int64_t rows, int64_t intermediate) {
  const int64_t j = intermediate > 0 && row >= intermediate ? row - intermediate : row;
  const int64_t b = intermediate > 0 ? j / 2 : row / 4;
  const int64_t r = intermediate > 0 ? (row >= intermediate ? 2 : 0) + j % 2 : row % 4;
  return (k / 256) * shared_expert_tiled_stage_stride(rows) + b * 1024 + r * 256 + k % 256;
}
// Whether the tiled layout covers a shared expert of these sizes: whole stages of 256 terms, and
// element offsets within 32 bits (the tensor-core loader keeps them so).
constexpr bool shared_expert_tiles(int64_t hidden, int64_t intermediate) {
  return hidden % 256 == 0 && intermediate % 256 == 0 && 2 * hidden * intermediate < (int64_t{1} << 31);
}
// The layout a layer's shared expert takes when its sizes allow (Sm90SharedExpert::Layout::kAuto):
// row-major, the tiled one not being faster on the device.
inline constexpr bool kSharedExpertTiledByDefault = false;

// Whether launch_sm90_shared_expert takes the tensor-core way for these parameters.
bool shared_expert_uses_tensor_cores(const SharedExpertParams& params);
cudaError_t launch_sm90_shared_expert(const SharedExpertParams& params, cudaStream_t stream);
// The tensor-core kernels' shared-memory limit, once per device before their first launch.
cudaError_t configure_sm90_shared_expert_mma();
cudaError_t launch_sm90_shared_expert_mma(const SharedExpertParams& params, cudaStream_t stream);
// in row-major [rows, k] -> out in the tiled layout (device memory, not overlapping); w13: rows =
// 2 * intermediate, w2: intermediate = 0. rows % 4 == 0, k % 256 == 0 and rows * k < 2^31
// (cudaErrorInvalidValue otherwise).
cudaError_t launch_sm90_shared_expert_tile_weights(const uint16_t* in, uint16_t* out, int64_t rows, int64_t k,
                                                   int64_t intermediate, cudaStream_t stream);

}  // namespace moe_ep::cuda
