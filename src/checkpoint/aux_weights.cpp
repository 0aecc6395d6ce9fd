#include "checkpoint/aux_weights.h"

#include <cmath>
#include <cstring>

#include "core/check.h"
#include "core/thread_pool.h"
#include "moe_ep/formats.h"

namespace moe_ep::checkpoint {
namespace {

std::string where(const CheckpointTensor& t, std::string_view role) {
  return fmt::format("{}: tensor '{}' ({})", *t.file, t.name, role);
}

float f16_to_float(uint16_t h) {
  const int sign = h >> 15, exponent = (h >> 10) & 0x1F, mantissa = h & 0x3FF;
  float v;
  if (exponent == 0)
    v = std::ldexp(static_cast<float>(mantissa), -24);
  else if (exponent == 31)
    v = mantissa ? NAN : INFINITY;
  else
    v = std::ldexp(static_cast<float>(mantissa | 0x400), exponent - 25);
  return sign ? -v : v;
}

// Element i of a BF16 / F16 / F32 tensor, widened exactly.
float element(const CheckpointTensor& t, int64_t i) {
  if (t.dtype == "F32") {
    float v;
    std::memcpy(&v, t.data + 4 * i, 4);
    return v;
  }
  uint16_t bits;
  std::memcpy(&bits, t.data + 2 * i, 2);
  return t.dtype == "BF16" ? bf16_to_float(bits) : f16_to_float(bits);
}

void expect_float_tensor(const CheckpointTensor& t, std::string_view role,
                         const std::vector<int64_t>& shape, std::string_view rule) {
  MOE_EP_CHECK(t.dtype == "BF16" || t.dtype == "F16" || t.dtype == "F32",
               "{}: dtype {}; expected BF16, F16 or F32", where(t, role), t.dtype);
  MOE_EP_CHECK(t.shape == shape, "{}: shape {}; expected {}", where(t, role), t.shape_str(), rule);
}

std::vector<float> widen_finite(const CheckpointTensor& t, std::string_view role) {
  std::vector<float> out(static_cast<size_t>(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i) {
    out[i] = element(t, i);
    MOE_EP_CHECK(std::isfinite(out[i]), "{}: element {} = {}; expected finite values",
                 where(t, role), i, out[i]);
  }
  return out;
}

// One shared-expert projection [rows, k] as bf16 bits into dst (row-major, k contiguous).
int64_t load_shared_projection(const Checkpoint& ck, const std::string& name, std::string_view role,
                               int64_t rows, int64_t k, int num_threads, uint16_t* dst) {
  const CheckpointTensor& w = ck.get(name, role);
  const std::string rule = fmt::format("[{}, {}]", rows, k);
  if (w.dtype != "F8_E4M3") {
    expect_float_tensor(w, role, {rows, k}, rule);
    shared_thread_pool(num_threads)->parallel_for(rows, [&](int64_t r) {
      for (int64_t c = 0; c < k; ++c) {
        const float v = element(w, r * k + c);
        MOE_EP_CHECK(std::isfinite(v), "{}: element [{}, {}] = {}; expected finite values",
                     where(w, role), r, c, v);
        dst[r * k + c] = float_to_bf16(v);
      }
    });
    return w.nbytes;
  }
  // FP8 with one fp32 scale per (bn x bk) block: w = e4m3 * weight_scale_inv[r / bn, c / bk].
  const auto& config = ck.config();
  const int64_t bn = config ? config->fp8_block_n : 128, bk = config ? config->fp8_block_k : 128;
  MOE_EP_CHECK(w.shape == (std::vector<int64_t>{rows, k}), "{}: shape {}; expected {}",
               where(w, role), w.shape_str(), rule);
  const std::string sname = name + "_scale_inv";
  const std::string srole = std::string(role) + " weight_scale_inv";
  const CheckpointTensor& s = ck.get(sname, srole);
  const int64_t sr = (rows + bn - 1) / bn, sc = (k + bk - 1) / bk;
  MOE_EP_CHECK(s.dtype == "F32", "{}: dtype {}; expected F32", where(s, srole), s.dtype);
  MOE_EP_CHECK(s.shape == (std::vector<int64_t>{sr, sc}),
               "{}: shape {}; expected [ceil({}/{}), ceil({}/{})] = [{}, {}] (weight_block_size)",
               where(s, srole), s.shape_str(), rows, bn, k, bk, sr, sc);
  shared_thread_pool(num_threads)->parallel_for(rows, [&](int64_t r) {
    for (int64_t c = 0; c < k; ++c) {
      const uint8_t q = w.data[r * k + c];
      MOE_EP_CHECK((q & 0x7F) != 0x7F, "{}: element [{}, {}] = 0x{:02X} is an e4m3 NaN",
                   where(w, role), r, c, q);
      const float scale = element(s, (r / bn) * sc + c / bk);
      MOE_EP_CHECK(std::isfinite(scale), "{}: element [{}, {}] = {}; expected a finite scale",
                   where(s, srole), r / bn, c / bk, scale);
      // A finite code times a finite scale can still overflow fp32 or bf16: name the tensor here,
      // not as a bf16 Inf that Layer::create would find later without a file to point at.
      const uint16_t v = float_to_bf16(e4m3_to_float(q) * scale);
      MOE_EP_CHECK(std::isfinite(bf16_to_float(v)), "{}: element [{}, {}] = {} times its scale "
                   "{} ({}, element [{}, {}]) is {} in bf16; expected finite values",
                   where(w, role), r, c, e4m3_to_float(q), scale, sname, r / bn, c / bk,
                   bf16_to_float(v));
      dst[r * k + c] = v;
    }
  });
  return w.nbytes + s.nbytes;
}

}  // namespace

int64_t load_router(const Checkpoint& ck, int64_t layer, int64_t E, int64_t H, CheckpointLayer& out) {
  int64_t bytes = 0;
  const std::string prefix = fmt::format("model.layers.{}.mlp.gate.", layer);
  if (const CheckpointTensor* w = ck.find(prefix + "weight")) {
    const std::string role = fmt::format("layer {} router weight", layer);
    expect_float_tensor(*w, role, {E, H}, fmt::format("[E, H] = [{}, {}]", E, H));
    out.router_weight = widen_finite(*w, role);
    bytes += w->nbytes;
  }
  if (const CheckpointTensor* b = ck.find(prefix + "e_score_correction_bias")) {
    const std::string role = fmt::format("layer {} router bias", layer);
    expect_float_tensor(*b, role, {E}, fmt::format("[E] = [{}]", E));
    out.router_bias = widen_finite(*b, role);
    bytes += b->nbytes;
  }
  return bytes;
}

int64_t load_shared_expert(const Checkpoint& ck, int64_t layer, int64_t H, int num_threads,
                           CheckpointLayer& out) {
  const std::string prefix = fmt::format("model.layers.{}.mlp.shared_experts.", layer);
  const CheckpointTensor* gate = ck.find(prefix + "gate_proj.weight");
  if (!gate) return 0;
  const std::string role = fmt::format("layer {} shared expert gate_proj weight", layer);
  MOE_EP_CHECK(gate->shape.size() == 2 && gate->shape[1] == H, "{}: shape {}; expected [Is, H = {}]",
               where(*gate, role), gate->shape_str(), H);
  const int64_t Is = gate->shape[0];
  out.shared_intermediate_size = Is;
  out.shared_w13.resize(static_cast<size_t>(2 * Is * H));
  out.shared_w2.resize(static_cast<size_t>(H * Is));
  int64_t bytes = 0;
  bytes += load_shared_projection(ck, prefix + "gate_proj.weight", role, Is, H, num_threads,
                                  out.shared_w13.data());
  bytes += load_shared_projection(ck, prefix + "up_proj.weight",
                                  fmt::format("layer {} shared expert up_proj weight", layer), Is, H,
                                  num_threads, out.shared_w13.data() + Is * H);
  bytes += load_shared_projection(ck, prefix + "down_proj.weight",
                                  fmt::format("layer {} shared expert down_proj weight", layer), H,
                                  Is, num_threads, out.shared_w2.data());
  out.notes.push_back(fmt::format("shared expert: Is = {} ({} -> bf16)", Is, gate->dtype));
  return bytes;
}

}  // namespace moe_ep::checkpoint
