#include "support/ep_harness.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>

#include <fmt/format.h>

namespace moe_ep::testsupport {
namespace {

TensorView slice_view(const TensorView& t, int64_t first, int64_t count) {
  if (!t.defined()) return t;
  TensorView s = t;
  s.data = static_cast<uint8_t*>(t.data) + first * t.strides[0] * dtype_size(t.dtype);
  s.shape[0] = count;
  return s;
}

template <class T>
HostTensor<T> gather_rows(const HostTensor<T>& t, const std::vector<int64_t>& rows, DType dtype) {
  if (t.empty()) return t;
  std::vector<int64_t> shape = t.shape();
  const int64_t per = static_cast<int64_t>(t.size()) / shape[0];
  shape[0] = static_cast<int64_t>(rows.size());
  HostTensor<T> out(dtype, shape);
  for (size_t i = 0; i < rows.size(); ++i)
    std::copy_n(t.values().begin() + rows[i] * per, per, out.values().begin() + i * per);
  return out;
}

template <class T>
HostTensor<T> concat_rows(const std::vector<const HostTensor<T>*>& parts, DType dtype) {
  if (parts.empty() || parts[0]->empty()) return HostTensor<T>();
  std::vector<int64_t> shape = parts[0]->shape();
  shape[0] = 0;
  for (auto* p : parts) shape[0] += p->shape()[0];
  HostTensor<T> out(dtype, shape);
  size_t at = 0;
  for (auto* p : parts) {
    std::copy(p->values().begin(), p->values().end(), out.values().begin() + at);
    at += p->size();
  }
  return out;
}

}  // namespace

WeightPack slice_experts(const WeightPack& all, int64_t first, int64_t count) {
  WeightPack w = all;
  for (TensorView* t : {&w.w13, &w.w13_scale, &w.w13_global, &w.w2, &w.w2_scale, &w.w2_global})
    *t = slice_view(*t, first, count);
  return w;
}

WeightSet gather_experts(const WeightSet& w, const std::vector<int32_t>& experts) {
  std::vector<int64_t> rows(experts.begin(), experts.end());
  WeightSet g;
  g.format = w.format;
  g.w13 = gather_rows(w.w13, rows, DType::kU8);
  g.w13_scale = gather_rows(w.w13_scale, rows, w.w13_scale.empty() ? DType::kU8 : w.w13_scale.view().dtype);
  g.w2 = gather_rows(w.w2, rows, DType::kU8);
  g.w2_scale = gather_rows(w.w2_scale, rows, w.w2_scale.empty() ? DType::kU8 : w.w2_scale.view().dtype);
  g.w13_bf16 = gather_rows(w.w13_bf16, rows, DType::kBF16);
  g.w2_bf16 = gather_rows(w.w2_bf16, rows, DType::kBF16);
  g.w13_global = gather_rows(w.w13_global, rows, DType::kF32);
  g.w2_global = gather_rows(w.w2_global, rows, DType::kF32);
  g.shared_w13 = w.shared_w13;  // one shared expert, whatever the routed experts' placement
  g.shared_w2 = w.shared_w2;
  return g;
}

Inputs slice_inputs(const Inputs& in, int64_t begin, int64_t count) {
  std::vector<int64_t> rows(count);
  for (int64_t i = 0; i < count; ++i) rows[i] = begin + i;
  Inputs s;
  s.tokens = count;
  s.ids_i32 = in.ids_i32;
  s.x = gather_rows(in.x, rows, DType::kBF16);
  s.a = gather_rows(in.a, rows, in.a.empty() ? DType::kU8 : in.a.view().dtype);
  s.a_scale = gather_rows(in.a_scale, rows, in.a_scale.empty() ? DType::kU8 : in.a_scale.view().dtype);
  s.a_global = gather_rows(in.a_global, rows, DType::kF32);
  s.ids64 = gather_rows(in.ids64, rows, DType::kI64);
  s.ids32 = gather_rows(in.ids32, rows, DType::kI32);
  s.weights = gather_rows(in.weights, rows, DType::kF32);
  return s;
}

Inputs concat_inputs(const std::vector<Inputs>& parts) {
  Inputs c;
  c.ids_i32 = parts.at(0).ids_i32;
  std::vector<const HostTensor<uint16_t>*> x;
  std::vector<const HostTensor<uint8_t>*> a, a_scale;
  std::vector<const HostTensor<float>*> a_global, weights;
  std::vector<const HostTensor<int64_t>*> ids64;
  std::vector<const HostTensor<int32_t>*> ids32;
  for (const Inputs& p : parts) {
    c.tokens += p.tokens;
    x.push_back(&p.x);
    a.push_back(&p.a);
    a_scale.push_back(&p.a_scale);
    a_global.push_back(&p.a_global);
    weights.push_back(&p.weights);
    ids64.push_back(&p.ids64);
    ids32.push_back(&p.ids32);
  }
  c.x = concat_rows(x, DType::kBF16);
  c.a = concat_rows(a, parts[0].a.empty() ? DType::kU8 : parts[0].a.view().dtype);
  c.a_scale = concat_rows(a_scale, parts[0].a_scale.empty() ? DType::kU8 : parts[0].a_scale.view().dtype);
  c.a_global = concat_rows(a_global, DType::kF32);
  c.weights = concat_rows(weights, DType::kF32);
  c.ids64 = concat_rows(ids64, DType::kI64);
  c.ids32 = concat_rows(ids32, DType::kI32);
  return c;
}

std::vector<HostTensor<uint16_t>> run_ep(const Problem& p, const WeightSet& w, int R,
                                         const std::vector<Inputs>& per_rank, int forwards,
                                         int64_t timeout_ms) {
  std::vector<HostTensor<uint16_t>> y(R);
  const int64_t E_loc = p.num_experts / R;
  const WeightPack all = w.pack();
  auto out = run_ranks(R, [&](int r) {
    auto rt = Runtime::acquire(simulated_bootstrap(R, r, timeout_ms));
    auto layer = Layer::create(rt, p.desc(), slice_experts(all, r * E_loc, E_loc), p.overrides);
    for (int f = 0; f < forwards; ++f) y[r] = run_forward(*layer, p, per_rank[r]);
  });
  for (int r = 0; r < R; ++r)
    if (out[r].threw)
      throw std::runtime_error(fmt::format("R = {} ({}):\n{}", R, p.str(), outcomes_str(out)));
  return y;
}

HostTensor<uint16_t> reference_y(const Problem& p, const WeightSet& w, const Inputs& in) {
  Problem global = p;  // the global batch holds the tokens of every rank
  global.max_tokens = std::max<int64_t>({p.max_tokens, in.tokens, 1});
  auto layer = make_layer(global, w);
  return run_forward(*layer, global, in);
}

std::string compare_ranks_bitwise(const std::vector<HostTensor<uint16_t>>& y,
                                  const HostTensor<uint16_t>& ref, int64_t H) {
  int64_t offset = 0;
  for (size_t r = 0; r < y.size(); ++r) {
    const int64_t T = static_cast<int64_t>(y[r].size()) / H;
    for (int64_t t = 0; t < T; ++t)
      for (int64_t j = 0; j < H; ++j) {
        const uint16_t a = y[r][t * H + j], b = ref[(offset + t) * H + j];
        if (a != b)
          return fmt::format("rank {} row {} (global row {}) column {}: 0x{:04x}, reference "
                             "0x{:04x}", r, t, offset + t, j, a, b);
      }
    offset += T;
  }
  if (offset * H != static_cast<int64_t>(ref.size()))
    return fmt::format("the ranks hold {} rows, the reference {}", offset,
                       static_cast<int64_t>(ref.size()) / H);
  return "";
}

uint64_t hash_bytes(const void* data, size_t bytes, uint64_t h) {
  const auto* p = static_cast<const uint8_t*>(data);
  for (size_t i = 0; i < bytes; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

}  // namespace moe_ep::testsupport
