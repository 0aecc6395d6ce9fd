// libFuzzer target: Layer::forward argument validation on the CPU (docs/spec.md §11).
//
// Four layers are built once (mxfp4 / nvfp4, the layer quantizing x — with a shared expert of
// Is = 32 — or the caller passing a + scales; H = I = 128, E = 4, K = 2, max_tokens_per_rank = 4). The input picks one, a token
// count (also above the maximum), and bends every ForwardArgs tensor (fuzz_tensors.h); ids are
// valid, -1 holes or out-of-range values, caller activations may carry NaN codes and scales.
// Findings, besides sanitizer reports: an exception that is not a moe_ep::Error of
// kInvalidArgument, a disagreement with this file's model of what must be accepted, a refused
// forward that wrote into y, and a probe forward that stops being bitwise identical to its first
// result (the layer must stay usable after every refused call).
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "fuzz/fuzz_tensors.h"
#include "moe_ep/formats.h"
#include "moe_ep/moe_ep.h"
#include "moe_ep/quant.h"

namespace moe_ep::fuzz {
namespace {

constexpr int64_t kH = 128, kI = 128, kE = 4, kK = 2, kMaxT = 4, kIs = 32;

[[noreturn]] void finding(const std::string& what) {
  std::fprintf(stderr, "fuzz_forward_args finding: %s\n", what.c_str());
  std::abort();
}

struct Fixture {
  std::shared_ptr<Runtime> runtime = Runtime::acquire(Bootstrap{});
  std::vector<uint8_t> w13, w13s, w2, w2s, w13n, w2n;
  std::vector<float> g13, g2;
  std::vector<uint16_t> shared13, shared2;  // the shared expert of the layers that quantize x
  std::unique_ptr<Layer> layers[4];  // [nvfp4 * 2 + caller_quantized]
  // Probe: x of 3 tokens, fixed routing with a hole; y of its first forward per layer.
  std::vector<uint16_t> probe_x;
  std::vector<int32_t> probe_ids{0, 3, -1, 1, 2, 2};
  std::vector<float> probe_w{0.5f, 0.25f, 1.0f, 0.75f, 0.5f, 0.5f};
  std::vector<uint16_t> probe_y[4];

  Fixture() {
    const int64_t n13 = kE * 2 * kI * kH, n2 = kE * kH * kI;
    w13.resize(n13 / 2), w2.resize(n2 / 2), w13s.resize(n13 / 32), w2s.resize(n2 / 32);
    w13n.resize(n13 / 16), w2n.resize(n2 / 16), g13.assign(kE * 2, 0.01f), g2.assign(kE, 0.01f);
    for (size_t i = 0; i < w13.size(); ++i) w13[i] = static_cast<uint8_t>(i * 2654435761u >> 13);
    for (size_t i = 0; i < w2.size(); ++i) w2[i] = static_cast<uint8_t>(i * 40503u >> 5);
    for (size_t i = 0; i < w13s.size(); ++i) w13s[i] = 120 + i % 5;
    for (size_t i = 0; i < w2s.size(); ++i) w2s[i] = 121 + i % 4;
    for (size_t i = 0; i < w13n.size(); ++i) w13n[i] = 0x30 + i % 9;
    for (size_t i = 0; i < w2n.size(); ++i) w2n[i] = 0x31 + i % 7;
    shared13.resize(2 * kIs * kH), shared2.resize(kH * kIs);
    for (size_t i = 0; i < shared13.size(); ++i) shared13[i] = float_to_bf16(std::cos(0.37f * i) * 0.3f);
    for (size_t i = 0; i < shared2.size(); ++i) shared2[i] = float_to_bf16(std::sin(0.53f * i) * 0.2f);
    probe_x.resize(3 * kH);
    for (size_t i = 0; i < probe_x.size(); ++i) probe_x[i] = float_to_bf16(std::sin(0.1f * i) * 4);
    for (int l = 0; l < 4; ++l) {
      const bool nv = l / 2, caller = l % 2;
      WeightPack p;
      p.format = nv ? WeightFormat::kNVFP4 : WeightFormat::kMXFP4;
      p.w13 = TensorView::contiguous(w13.data(), DType::kU8, {kE, 2 * kI, kH / 2});
      p.w2 = TensorView::contiguous(w2.data(), DType::kU8, {kE, kH, kI / 2});
      if (nv) {
        p.w13_scale = TensorView::contiguous(w13n.data(), DType::kE4M3, {kE, 2 * kI, kH / 16});
        p.w2_scale = TensorView::contiguous(w2n.data(), DType::kE4M3, {kE, kH, kI / 16});
        p.w13_global = TensorView::contiguous(g13.data(), DType::kF32, {kE, 2});
        p.w2_global = TensorView::contiguous(g2.data(), DType::kF32, {kE});
      } else {
        p.w13_scale = TensorView::contiguous(w13s.data(), DType::kE8M0, {kE, 2 * kI, kH / 32});
        p.w2_scale = TensorView::contiguous(w2s.data(), DType::kE8M0, {kE, kH, kI / 32});
      }
      MoeDesc c;
      c.fleet = {kE, kMaxT, kH};
      c.recipe = nv ? Recipe::kNvfp4 : Recipe::kMxfp4;
      c.intermediate_size = kI;
      c.top_k = kK;
      c.activation_clamp = 10.0f;
      c.quantize_input = !caller;
      if (!caller) {
        c.shared_intermediate_size = kIs;
        p.shared_w13 = TensorView::contiguous(shared13.data(), DType::kBF16, {2 * kIs, kH});
        p.shared_w2 = TensorView::contiguous(shared2.data(), DType::kBF16, {kH, kIs});
      }
      layers[l] = Layer::create(runtime, c, p);
      probe_y[l] = probe(l);
    }
  }

  // The probe forward of layer l (caller-quantized layers get the library's own quantization).
  std::vector<uint16_t> probe(int l) {
    const bool nv = l / 2, caller = l % 2;
    std::vector<uint16_t> y(3 * kH, 0x7FC0);
    ForwardArgs a;
    std::vector<float> v(kH), g(3);
    std::vector<uint8_t> codes(3 * kH), scales(3 * kH / 16);
    if (caller) {
      for (int t = 0; t < 3; ++t) {
        for (int j = 0; j < kH; ++j) v[j] = bf16_to_float(probe_x[t * kH + j]);
        if (nv)
          quantize_nvfp4_rows(v.data(), 1, kH, codes.data() + t * kH / 2,
                              scales.data() + t * kH / 16, g.data() + t);
        else
          quantize_q8(v.data(), kH, codes.data() + t * kH, scales.data() + t * kH / 32);
      }
      a.a = TensorView::contiguous(codes.data(), nv ? DType::kU8 : DType::kE4M3, {3, nv ? kH / 2 : kH});
      a.a_scale = TensorView::contiguous(scales.data(), nv ? DType::kE4M3 : DType::kE8M0,
                                         {3, nv ? kH / 16 : kH / 32});
      if (nv) a.a_global = TensorView::contiguous(g.data(), DType::kF32, {3});
    } else {
      a.x = TensorView::contiguous(probe_x.data(), DType::kBF16, {3, kH});
    }
    a.topk_ids = TensorView::contiguous(probe_ids.data(), DType::kI32, {3, kK});
    a.topk_weights = TensorView::contiguous(probe_w.data(), DType::kF32, {3, kK});
    a.y = TensorView::contiguous(y.data(), DType::kBF16, {3, kH});
    layers[l]->forward(a);
    return y;
  }
};

int run(FuzzBytes& in) {
  static Fixture fx;
  static uint64_t calls = 0;
  const int l = in.u8() % 4;
  const bool nv = l / 2, caller = l % 2;
  const int64_t T = in.pick<int64_t>({0, 1, 2, 3, 4, 4, 5, 1 << 20});
  const int mutate = in.pick<int>({4, 16, 64, 1 << 20});

  const DType id_dtype = in.flag() ? DType::kI32 : DType::kI64;
  FuzzTensor x, a, as, ag;
  if (!caller || in.flag(16)) x = make_tensor(in, {{DType::kBF16}, {T, kH}}, mutate);
  if (caller || in.flag(16)) {
    a = make_tensor(in, {nv ? std::vector<DType>{DType::kU8} : std::vector<DType>{DType::kE4M3, DType::kU8},
                         {T, nv ? kH / 2 : kH}}, mutate);
    as = make_tensor(in, {nv ? std::vector<DType>{DType::kU8, DType::kE4M3}
                             : std::vector<DType>{DType::kU8, DType::kE8M0},
                          {T, nv ? kH / 16 : kH / 32}}, mutate);
  }
  if ((caller && nv) || in.flag(16)) ag = make_tensor(in, {{DType::kF32}, {T}}, mutate);
  const DType other_id_dtype = id_dtype == DType::kI32 ? DType::kI64 : DType::kI32;
  FuzzTensor ids = make_tensor(in, {{id_dtype, other_id_dtype}, {T, kK}}, mutate);
  FuzzTensor tw = make_tensor(in, {{DType::kF32}, {T, kK}}, mutate);
  FuzzTensor y = make_tensor(in, {{DType::kBF16}, {T, kH}}, mutate);

  fill_tensor(in, x, [](int64_t i) -> uint8_t { return i % 2 ? 0x3F : i * 29; });
  fill_tensor(in, a, [](int64_t i) -> uint8_t { return (i * 11) & 0x77; });
  fill_tensor(in, as, [nv](int64_t i) -> uint8_t { return nv ? 0x38 + i % 3 : 126 + i % 3; });
  fill_tensor(in, ag, [](int64_t i) -> uint8_t { return i % 4 == 3 ? 0x3F : (i % 4 == 2 ? 0x80 : 0); });
  fill_tensor(in, tw, [](int64_t i) -> uint8_t { return i % 4 == 3 ? 0x3E : 0; });
  // Ids: valid or -1, then a few input-chosen values anywhere (out of range included).
  if (!ids.storage.empty()) {
    const int64_t n = ids.nbytes() / element_bytes(ids.view.dtype);
    for (int64_t i = 0; i < n; ++i) {
      const int64_t v = static_cast<int64_t>(in.u8() % (kE + 1)) - 1;
      if (ids.view.dtype == DType::kI64) reinterpret_cast<int64_t*>(ids.bytes())[i] = v;
      else if (ids.view.dtype == DType::kI32) reinterpret_cast<int32_t*>(ids.bytes())[i] = static_cast<int32_t>(v);
      else ids.bytes()[i] = static_cast<uint8_t>(v);
    }
    if (in.flag(3)) {
      const int64_t at = in.u32() % n;
      const int64_t bad = in.pick<int64_t>({-2, kE, kE + 1, INT32_MAX, INT32_MIN, INT64_MAX, INT64_MIN});
      if (ids.view.dtype == DType::kI64) reinterpret_cast<int64_t*>(ids.bytes())[at] = bad;
      else if (ids.view.dtype == DType::kI32) reinterpret_cast<int32_t*>(ids.bytes())[at] = static_cast<int32_t>(bad);
    }
  }
  const std::vector<uint64_t> y_before = y.storage;
  // The layer takes T from the activation it reads (x, or a when the caller quantizes): when the
  // input bent that tensor's first dimension, every other tensor is judged against that T.
  const FuzzTensor& act = caller ? a : x;
  const int64_t T_seen = act.present && act.view.ndim == 2 ? act.view.shape[0] : T;
  if (T_seen != T) {
    judge(x, {{DType::kBF16}, {T_seen, kH}});
    judge(a, {nv ? std::vector<DType>{DType::kU8} : std::vector<DType>{DType::kE4M3, DType::kU8},
              {T_seen, nv ? kH / 2 : kH}});
    judge(as, {nv ? std::vector<DType>{DType::kU8, DType::kE4M3} : std::vector<DType>{DType::kU8, DType::kE8M0},
               {T_seen, nv ? kH / 16 : kH / 32}});
    judge(ag, {{DType::kF32}, {T_seen}});
    judge(ids, {{id_dtype, other_id_dtype}, {T_seen, kK}});
    judge(tw, {{DType::kF32}, {T_seen, kK}});
    judge(y, {{DType::kBF16}, {T_seen, kH}});
  }

  // The model's verdict.
  bool ok = T_seen >= 0 && T_seen <= kMaxT && ids.layout_ok && tw.layout_ok && y.layout_ok;
  if (!caller) ok = ok && x.layout_ok && !a.present && !as.present && !ag.present;
  else ok = ok && !x.present && a.layout_ok && as.layout_ok && (nv ? ag.layout_ok : !ag.present);
  for (int64_t i = 0; ok && i < ids.numel; ++i) {
    const int64_t v = ids.view.dtype == DType::kI32 ? reinterpret_cast<const int32_t*>(ids.bytes())[i]
                                              : reinterpret_cast<const int64_t*>(ids.bytes())[i];
    ok = v >= -1 && v < kE;
  }
  if (ok && caller) {
    for (int64_t i = 0; ok && i < as.numel; ++i)
      ok = nv ? (as.bytes()[i] & 0x7F) != 0x7F : as.bytes()[i] != 0xFF;
    for (int64_t i = 0; ok && !nv && i < a.numel; ++i) ok = (a.bytes()[i] & 0x7F) != 0x7F;
    for (int64_t i = 0; ok && nv && i < ag.numel; ++i) {
      const float g = reinterpret_cast<const float*>(ag.bytes())[i];
      ok = std::isfinite(g) && g > 0;
    }
  }

  ForwardArgs args;
  args.x = x.view, args.a = a.view, args.a_scale = as.view, args.a_global = ag.view;
  args.topk_ids = ids.view, args.topk_weights = tw.view, args.y = y.view;
  bool accepted = false;
  std::string error;
  try {
    fx.layers[l]->forward(args);
    accepted = true;
  } catch (const Error& e) {
    if (e.code() != ErrorCode::kInvalidArgument)
      finding(std::string("forward threw ") + error_code_name(e.code()) + ": " + e.what());
    error = e.what();
  } catch (const std::exception& e) {
    finding(std::string("forward threw a non-moe_ep exception: ") + e.what());
  }
  if (accepted != ok)
    finding(std::string("forward ") + (accepted ? "accepted" : "refused") + " arguments the model " +
            (ok ? "accepts" : "refuses") + " (layer " + std::to_string(l) + ", T " +
            std::to_string(T) + "): " + error);
  if (!accepted && y.storage != y_before) finding("a refused forward wrote into y: " + error);
  if (++calls % 16 == 0 && fx.probe(l) != fx.probe_y[l])
    finding("the probe forward of layer " + std::to_string(l) + " changed after call " +
            std::to_string(calls));
  return 0;
}

}  // namespace
}  // namespace moe_ep::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  moe_ep::fuzz::FuzzBytes in(data, size);
  return moe_ep::fuzz::run(in);
}
