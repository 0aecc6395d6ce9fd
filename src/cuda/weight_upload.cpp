#include "cuda/weight_upload.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <limits>
#include <vector>

#include "core/check.h"
#include "cuda/kernels/sm90_weight_prep.h"
#include "moe_ep/formats.h"
#include "moe_ep/quant.h"

namespace moe_ep::cuda {
namespace {

constexpr size_t kStageBytes = size_t{64} << 20;  // per slot
constexpr size_t kHostCopyPiece = size_t{4} << 20;

class Stream {
 public:
  Stream() { MOE_EP_CUDA_CHECK(cudaStreamCreateWithFlags(&s_, cudaStreamNonBlocking)); }
  ~Stream() { MOE_EP_CUDA_IGNORE(cudaStreamDestroy(s_)); }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  cudaStream_t get() const { return s_; }

 private:
  cudaStream_t s_ = nullptr;
};

// Two staging slots in device memory, fed from pinned host buffers (host sources) or by
// device-to-device copies. stage() waits until the work enqueued after the slot's previous use
// is done, so the host copy of chunk c + 1 runs while chunk c is uploaded and converted.
class Stager {
 public:
  Stager(cudaStream_t stream, bool host_sources, const ParallelFor& parallel_for)
      : stream_(stream), parallel_for_(parallel_for) {
    for (Slot& s : slots_) {
      s.device = DeviceBuffer(kStageBytes);
      MOE_EP_CUDA_CHECK(cudaEventCreateWithFlags(&s.done, cudaEventDisableTiming));
      if (host_sources) MOE_EP_CUDA_CHECK(cudaHostAlloc(&s.pinned, kStageBytes, cudaHostAllocDefault));
    }
  }
  ~Stager() {
    for (Slot& s : slots_) {
      if (s.done) MOE_EP_CUDA_IGNORE(cudaEventSynchronize(s.done));
      if (s.done) MOE_EP_CUDA_IGNORE(cudaEventDestroy(s.done));
      if (s.pinned) MOE_EP_CUDA_IGNORE(cudaFreeHost(s.pinned));
    }
  }
  Stager(const Stager&) = delete;
  Stager& operator=(const Stager&) = delete;

  // The device copy of [src, src + bytes); valid for the work enqueued before release().
  const uint8_t* stage(const uint8_t* src, size_t bytes, bool on_device) {
    MOE_EP_ASSERT(bytes <= kStageBytes);
    Slot& s = slots_[next_];
    MOE_EP_CUDA_CHECK(cudaEventSynchronize(s.done));
    if (on_device) {
      MOE_EP_CUDA_CHECK(cudaMemcpyAsync(s.device.get(), src, bytes, cudaMemcpyDeviceToDevice, stream_));
    } else {
      const int64_t pieces = static_cast<int64_t>((bytes + kHostCopyPiece - 1) / kHostCopyPiece);
      parallel_for_(pieces, [&](int64_t p) {
        const size_t begin = static_cast<size_t>(p) * kHostCopyPiece;
        std::memcpy(s.pinned + begin, src + begin, std::min(kHostCopyPiece, bytes - begin));
      });
      MOE_EP_CUDA_CHECK(cudaMemcpyAsync(s.device.get(), s.pinned, bytes, cudaMemcpyHostToDevice, stream_));
    }
    return s.device.get();
  }
  void release() {
    MOE_EP_CUDA_CHECK(cudaEventRecord(slots_[next_].done, stream_));
    next_ = 1 - next_;
  }

 private:
  struct Slot {
    DeviceBuffer device;
    uint8_t* pinned = nullptr;
    cudaEvent_t done = nullptr;
  };
  cudaStream_t stream_;
  const ParallelFor& parallel_for_;
  std::array<Slot, 2> slots_;
  int next_ = 0;
};

// One GEMM: canonical [E, N, K/2] codes + [E, N, K/B] scales.
struct GemmSource {
  const uint8_t* packed;
  const uint8_t* scales;
  int64_t n, k, interleave_half;
  const TensorView* scale_view;  // non-null: validate, naming this tensor
  const char* scale_name;
};

struct ScanResult {
  std::vector<Mxfp4RowExponents> rows;  // canonical [E * N]; empty for nvfp4
  DeviceBuffer zero_mask;
};

DeviceBuffer upload_bytes(const void* src, size_t bytes, bool on_device, cudaStream_t stream) {
  DeviceBuffer b(bytes);
  if (bytes)
    MOE_EP_CUDA_CHECK(cudaMemcpyAsync(b.get(), src, bytes,
                                      on_device ? cudaMemcpyDeviceToDevice : cudaMemcpyHostToDevice, stream));
  return b;
}

template <class T>
std::vector<T> download(const DeviceBuffer& b, size_t count, cudaStream_t stream) {
  std::vector<T> out(count);
  if (count) MOE_EP_CUDA_CHECK(cudaMemcpyAsync(out.data(), b.get(), count * sizeof(T), cudaMemcpyDeviceToHost, stream));
  MOE_EP_CUDA_CHECK(cudaStreamSynchronize(stream));
  return out;
}

DeviceKernelTensor prepare_gemm(const GemmSource& g, const CanonicalWeights& w, Fp8Fold fold,
                                Stager& stager, cudaStream_t stream, ScanResult& scan,
                                const ParallelFor& parallel_for) {
  const bool mxfp4 = w.format == WeightFormat::kMXFP4;
  const int64_t E = w.shape.num_experts, block = mxfp4 ? kMxBlock : kNvBlock;
  const size_t packed_per_expert = static_cast<size_t>(g.n * g.k / 2);
  const size_t scales_bytes = static_cast<size_t>(E * g.n * (g.k / block));
  DeviceKernelTensor out;
  out.tiles = DeviceBuffer(static_cast<size_t>(E) * packed_per_expert);
  out.scales = DeviceBuffer(scales_bytes);
  DeviceBuffer raw_scales = upload_bytes(g.scales, scales_bytes, w.on_device, stream);

  DeviceBuffer row_lo, row_hi, first_bad;
  if (mxfp4) {
    row_lo = DeviceBuffer(static_cast<size_t>(E * g.n));
    row_hi = DeviceBuffer(static_cast<size_t>(E * g.n));
    scan.zero_mask = DeviceBuffer(static_cast<size_t>(E * g.n * mxfp4_zero_mask_words(g.k)) * sizeof(uint32_t));
    first_bad = DeviceBuffer(sizeof(unsigned long long));
    MOE_EP_CUDA_CHECK(cudaMemsetAsync(first_bad.get(), 0xFF, sizeof(unsigned long long), stream));
  }
  const int64_t chunk = std::max<int64_t>(1, static_cast<int64_t>(kStageBytes / packed_per_expert));
  MOE_EP_CHECK_CODE(packed_per_expert <= kStageBytes, ErrorCode::kUnsupported,
                    "one expert's {} weights ({} bytes) exceed the {}-byte staging slot", g.scale_name,
                    packed_per_expert, kStageBytes);
  for (int64_t e0 = 0; e0 < E; e0 += chunk) {
    const int64_t count = std::min(chunk, E - e0);
    const uint8_t* staged = stager.stage(g.packed + e0 * packed_per_expert, count * packed_per_expert, w.on_device);
    if (mxfp4) {
      Mxfp4RowScanParams p;
      p.packed = staged;
      p.scales = raw_scales.get() + e0 * g.n * (g.k / block);
      p.rows = count * g.n;
      p.first_row = e0 * g.n;
      p.k = static_cast<int32_t>(g.k);
      p.row_lo = row_lo.get();
      p.row_hi = row_hi.get();
      p.zero_mask = scan.zero_mask.get<uint32_t>();
      p.first_bad = first_bad.get<unsigned long long>();
      MOE_EP_CUDA_CHECK(launch_mxfp4_row_scan(p, stream));
    }
    WeightTileParams t;
    t.packed = staged;
    t.tiles = out.tiles.get() + e0 * packed_per_expert;
    t.experts = count;
    t.n = g.n;
    t.k = g.k;
    t.interleave_half = g.interleave_half;
    MOE_EP_CUDA_CHECK(launch_weight_tiles(t, stream));
    stager.release();
  }

  DeviceBuffer base_device;
  if (mxfp4) {
    const auto bad = download<unsigned long long>(first_bad, 1, stream)[0];
    if (g.scale_view != nullptr && bad != std::numeric_limits<unsigned long long>::max())
      fail_invalid_scale_byte(*g.scale_view, g.scale_name, w.format, static_cast<int64_t>(bad));
    const auto lo = download<uint8_t>(row_lo, static_cast<size_t>(E * g.n), stream);
    const auto hi = download<uint8_t>(row_hi, static_cast<size_t>(E * g.n), stream);
    scan.rows.resize(lo.size());
    for (size_t r = 0; r < lo.size(); ++r)
      scan.rows[r] = hi[r] < lo[r] ? Mxfp4RowExponents{} : Mxfp4RowExponents{lo[r], hi[r]};
    if (fold == Fp8Fold::kWhenInside) {
      out.row_base = fold_row_bases(
          E, g.n,
          [&](int64_t e, int64_t n) {
            const int64_t src = g.interleave_half ? gemm1_source_row(n, g.interleave_half) : n;
            return scan.rows[static_cast<size_t>(e * g.n + src)];
          },
          parallel_for);
      out.folded = !out.row_base.empty();
    }
    if (out.folded) {
      base_device = upload_bytes(out.row_base.data(), out.row_base.size(), false, stream);
      out.col_scale = DeviceBuffer::upload(row_factors_of(out.row_base));
    }
  }
  WeightScaleParams s;
  s.scales = raw_scales.get();
  s.out = out.scales.get();
  s.row_base = out.folded ? base_device.get() : nullptr;
  s.zero_mask = scan.zero_mask.get<uint32_t>();
  s.experts = E;
  s.n = g.n;
  s.k = g.k;
  s.interleave_half = g.interleave_half;
  s.block = static_cast<int32_t>(block);
  MOE_EP_CUDA_CHECK(launch_weight_scales(s, stream));
  MOE_EP_CUDA_CHECK(cudaStreamSynchronize(stream));
  return out;
}

}  // namespace

CanonicalWeights canonical_view(const HostExpertWeights& w) {
  CanonicalWeights c;
  c.format = w.format;
  c.shape = w.shape;
  c.w13 = w.w13.get();
  c.w13_scale = w.w13_scale.get();
  c.w2 = w.w2.get();
  c.w2_scale = w.w2_scale.get();
  c.w13_global = w.w13_global.get();
  c.w2_global = w.w2_global.get();
  return c;
}

DeviceKernelWeights prepare_device_weights(const CanonicalWeights& w, Fp8Fold fold,
                                           const ParallelFor& parallel_for) {
  MOE_EP_ASSERT(w.format == WeightFormat::kMXFP4 || w.format == WeightFormat::kNVFP4);
  MOE_EP_ASSERT(w.validate == nullptr || w.format == WeightFormat::kMXFP4);
  const int64_t E = w.shape.num_experts, H = w.shape.hidden, I = w.shape.intermediate;
  MOE_EP_ASSERT(H % 128 == 0 && I % 128 == 0);
  Stream stream;
  Stager stager(stream.get(), !w.on_device, parallel_for);
  const GemmSource g13{w.w13, w.w13_scale, 2 * I, H, I, w.validate ? &w.validate->w13_scale : nullptr, "w13_scale"};
  const GemmSource g2{w.w2, w.w2_scale, H, I, 0, w.validate ? &w.validate->w2_scale : nullptr, "w2_scale"};
  DeviceKernelWeights out;
  ScanResult scan13, scan2;
  out.w13 = prepare_gemm(g13, w, fold, stager, stream.get(), scan13, parallel_for);
  out.w2 = prepare_gemm(g2, w, fold, stager, stream.get(), scan2, parallel_for);
  if (w.format == WeightFormat::kMXFP4) {
    out.window = fp8_window_from_rows(E, scan13.rows, scan2.rows);
  } else {
    out.w13_global = DeviceBuffer::upload(std::vector<float>(w.w13_global, w.w13_global + E));
    out.w2_global = DeviceBuffer::upload(std::vector<float>(w.w2_global, w.w2_global + E));
  }
  return out;
}

}  // namespace moe_ep::cuda
