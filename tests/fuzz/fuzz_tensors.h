// Fuzzed tensor views and an independent model of which of them the layer must accept.
//
// A FuzzTensor starts from what the layer expects (one of the allowed dtypes, the expected shape,
// row-major strides, an owned CPU buffer) and the input may bend any part of it: leave it out,
// change the dtype (also to values outside the enum), ndim (also outside 1..4), one dimension,
// one stride, the data pointer, the device. `layout_ok` is this file's own verdict, written from
// docs/spec.md §11 and include/moe_ep/layer.h without the library's checking code. Buffers always
// hold exactly numel * element size bytes of the declared shape (or nothing), so a read past a
// declared shape is a finding of the sanitizers.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "fuzz/fuzz_bytes.h"
#include "moe_ep/tensor.h"

namespace moe_ep::fuzz {

// Largest buffer a fuzzed tensor may own; a declared shape above it gets no data pointer.
inline constexpr int64_t kMaxTensorBytes = int64_t{4} << 20;

inline int64_t element_bytes(DType d) {
  switch (d) {
    case DType::kBF16: case DType::kF16: return 2;
    case DType::kF32: case DType::kI32: return 4;
    case DType::kF64: case DType::kI64: return 8;
    default: return 1;  // u8, e4m3, e8m0 and values outside the enum
  }
}

struct FuzzTensor {
  std::vector<uint64_t> storage;  // 8-byte aligned
  TensorView view;
  bool present = false;   // view.defined()
  bool layout_ok = false;  // dtype, ndim, shape, strides, data and device as expected
  int64_t numel = 0;      // of the declared shape, when layout_ok
  uint8_t* bytes() { return reinterpret_cast<uint8_t*>(storage.data()); }
  int64_t nbytes() const { return static_cast<int64_t>(storage.size() * 8); }
};

// An expected tensor: allowed dtypes (the first is the canonical one) and shape.
struct Expected {
  std::vector<DType> dtypes;
  std::vector<int64_t> shape;
};

// Two's-complement wrap-around (expected dimensions may be huge; the harness must not overflow).
inline int64_t wrap_add(int64_t a, int64_t b) { return static_cast<int64_t>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b)); }

inline int64_t wild_dim(FuzzBytes& in, int64_t expected) {
  return in.pick<int64_t>({0, 1, -1, wrap_add(expected, -1), wrap_add(expected, 1),
                           wrap_add(expected, expected), expected / 2,
                           int64_t{1} << 31, int64_t{1} << 40, std::numeric_limits<int64_t>::max(),
                           std::numeric_limits<int64_t>::min(), expected});
}

// The model: whether the layer must accept t as the tensor e (sets layout_ok and numel).
inline void judge(FuzzTensor& t, const Expected& e) {
  const TensorView& v = t.view;
  if (!t.present) {
    t.layout_ok = false;
    t.numel = 0;
    return;
  }
  bool dtype_ok = false;
  for (DType d : e.dtypes) dtype_ok |= v.dtype == d;
  bool shape_ok = v.ndim == static_cast<int32_t>(e.shape.size());
  for (size_t d = 0; shape_ok && d < e.shape.size(); ++d) shape_ok = v.shape[d] == e.shape[d];
  bool strides_ok = true;
  int64_t numel = 1;
  if (shape_ok) {
    int64_t want = 1;
    for (int d = v.ndim - 1; d >= 0; --d) {
      if (v.shape[d] != 1 && v.strides[d] != want) strides_ok = false;
      if (__builtin_mul_overflow(want, v.shape[d], &want)) want = INT64_MAX;  // no such buffer
      numel = want;
    }
  }
  // Buffers exist only for shapes of at most kMaxTensorBytes, so numel is exact where used.
  const bool data_ok = shape_ok && (numel == 0 || v.data != nullptr);
  t.layout_ok = dtype_ok && shape_ok && strides_ok && data_ok && v.device == Device::cpu();
  t.numel = t.layout_ok ? numel : 0;
}

// `mutate_one_in`: roughly one tensor in that many is bent at all.
inline FuzzTensor make_tensor(FuzzBytes& in, const Expected& e, int mutate_one_in) {
  FuzzTensor t;
  TensorView& v = t.view;
  v.dtype = e.dtypes[in.u8() % e.dtypes.size()];
  v.device = Device::cpu();
  v.ndim = static_cast<int32_t>(e.shape.size());
  for (int d = 0; d < v.ndim; ++d) v.shape[d] = e.shape[d];
  bool null_data = false;
  if (in.flag(mutate_one_in)) {
    const uint8_t what = in.u8();
    if (what & 1) v.dtype = static_cast<DType>(in.u8() % 12);  // 9..11 are outside the enum
    if (what & 2) v.ndim = static_cast<int32_t>(in.range(-1, 6));
    if (what & 4) {
      const int d = in.u8() % kMaxTensorDims;
      v.shape[d] = wild_dim(in, v.shape[d]);
    }
    if (what & 16) null_data = true;
    if (what & 32) {
      v.device = in.pick<Device>({Device::cuda(0), Device{DeviceType::kCPU, 1},
                                  Device{static_cast<DeviceType>(7), 0}, Device::cpu()});
    }
    if (what & 64) {  // left out entirely
      t.present = false;
      t.view = TensorView{};
      return t;
    }
  }
  // Row-major strides of the declared shape (for the dims that exist).
  const int nd = std::clamp<int32_t>(v.ndim, 0, kMaxTensorDims);
  int64_t stride = 1;
  for (int d = nd - 1; d >= 0; --d) {
    v.strides[d] = stride;
    stride = (v.shape[d] > 0 && stride <= (int64_t{1} << 40) / v.shape[d]) ? stride * v.shape[d] : 1;
  }
  if (nd > 0 && in.flag(mutate_one_in * 2)) {
    const int d = in.u8() % nd;
    v.strides[d] = in.pick<int64_t>({0, -1, 2, v.strides[d] + 1, int64_t{1} << 40, v.strides[d]});
  }

  // Bytes of the declared shape; -1 when ndim is outside 1..4, a dimension is negative, or the
  // size is above the buffer limit.
  std::vector<int64_t> dims;
  for (int d = 0; d < nd; ++d) dims.push_back(v.shape[d]);
  int64_t numel = -1;
  if (v.ndim >= 1 && v.ndim <= kMaxTensorDims) {
    numel = 1;
    for (int64_t s : dims) {
      if (s < 0 || (s != 0 && numel > kMaxTensorBytes / s)) { numel = -1; break; }
      numel *= s;
    }
  }
  const int64_t bytes = numel < 0 ? -1 : numel * element_bytes(v.dtype);
  if (!null_data && bytes >= 0 && bytes <= kMaxTensorBytes) {
    t.storage.resize(static_cast<size_t>((bytes + 7) / 8));
    v.data = bytes > 0 ? t.storage.data() : nullptr;
    if (bytes == 0) {  // a zero-size tensor may point anywhere, e.g. at a dangling byte
      t.storage.resize(1);
      v.data = t.storage.data();
    }
  }
  t.present = v.ndim > 0 || v.data != nullptr;

  judge(t, e);
  return t;
}

// Fills a tensor's buffer: either raw input bytes, or `clean` bytes from make_clean(i) with a
// few input-chosen bytes written over them (NaN scales, 0xFF, huge values, ...).
template <class Clean>
void fill_tensor(FuzzBytes& in, FuzzTensor& t, Clean&& make_clean) {
  if (t.storage.empty()) return;
  const int64_t n = t.nbytes();
  uint8_t* p = t.bytes();
  if (in.flag(8)) {
    in.fill(p, static_cast<size_t>(n));
    return;
  }
  for (int64_t i = 0; i < n; ++i) p[i] = make_clean(i);
  const int overrides = in.u8() % 4;
  for (int k = 0; k < overrides; ++k) {
    const int64_t at = static_cast<int64_t>(in.u32() % static_cast<uint32_t>(n));
    p[at] = in.pick<uint8_t>({0xFF, 0x7F, 0x80, 0x00, 0xFE, 0x7E, 0xC0, in.u8()});
  }
}

inline bool bf16_finite(uint16_t b) { return (b & 0x7F80) != 0x7F80; }

}  // namespace moe_ep::fuzz
