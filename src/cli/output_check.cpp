#include "cli/output_check.h"

#include <cmath>

#include <fmt/format.h>

#include "cli/batch.h"
#include "moe_ep/formats.h"
#include "moe_ep/layer.h"
#include "moe_ep/runtime.h"

namespace moe_ep::cli {

std::vector<int64_t> sample_rows(int64_t T, int64_t max_rows) {
  std::vector<int64_t> rows;
  if (T <= max_rows) {
    for (int64_t t = 0; t < T; ++t) rows.push_back(t);
    return rows;
  }
  for (int64_t i = 0; i < max_rows; ++i) {
    const int64_t r = max_rows == 1 ? 0 : i * (T - 1) / (max_rows - 1);
    if (rows.empty() || rows.back() != r) rows.push_back(r);
  }
  return rows;
}

double rel_err_rows(std::span<const uint16_t> y, std::span<const uint16_t> ref, int64_t H,
                    std::span<const int64_t> rows) {
  double diff2 = 0.0, ref2 = 0.0;
  for (int64_t r : rows)
    for (int64_t h = 0; h < H; ++h) {
      const double a = bf16_to_float(y[r * H + h]), b = bf16_to_float(ref[r * H + h]);
      diff2 += (a - b) * (a - b);
      ref2 += b * b;
    }
  if (std::isnan(diff2)) return std::nan("");
  if (ref2 == 0.0) return diff2 == 0.0 ? 0.0 : INFINITY;
  return std::sqrt(diff2 / ref2);
}

bool bitwise_equal_rows(std::span<const uint16_t> y, std::span<const uint16_t> ref, int64_t H,
                        std::span<const int64_t> rows) {
  for (int64_t r : rows)
    for (int64_t h = 0; h < H; ++h)
      if (y[r * H + h] != ref[r * H + h]) return false;
  return true;
}

bool sanity_check(std::span<const uint16_t> y, const testing::HostInputs& in, std::string* detail,
                  const SanityRule& rule) {
  const bool shared_expert = rule.shared_expert;
  const int64_t T = in.num_tokens, H = in.hidden_size, K = in.top_k;
  std::vector<char> zero_is_right(static_cast<size_t>(T), rule.outputs_zero ? 1 : 0);
  for (int64_t t : rule.reference_rows) {
    bool ref_zero = true;
    for (int64_t h = 0; h < H && ref_zero; ++h) ref_zero = (rule.reference[t * H + h] & 0x7FFF) == 0;
    if (ref_zero) zero_is_right[t] = 1;
  }
  int64_t non_finite = 0, bad_empty_rows = 0, zero_rows = 0, nonzero_rows = 0, valid_rows = 0;
  int64_t first_bad = -1;
  for (int64_t t = 0; t < T; ++t) {
    bool any_valid = false;
    for (int64_t k = 0; k < K; ++k) any_valid |= in.topk_ids[t * K + k] >= 0;
    any_valid |= shared_expert;  // the shared expert's output: expected nonzero like a routed one
    double norm2 = 0.0;
    int64_t row_non_finite = 0;
    for (int64_t h = 0; h < H; ++h) {
      const float v = bf16_to_float(y[t * H + h]);
      if (!std::isfinite(v)) ++row_non_finite;
      else norm2 += static_cast<double>(v) * v;
    }
    non_finite += row_non_finite;
    const bool must_be_zero = !any_valid || rule.outputs_zero;
    const bool may_be_zero = must_be_zero || zero_is_right[t];
    const bool bad = row_non_finite > 0 || (must_be_zero && norm2 != 0.0) || (!may_be_zero && norm2 == 0.0);
    bad_empty_rows += (must_be_zero && norm2 != 0.0);
    zero_rows += (!may_be_zero && norm2 == 0.0);
    nonzero_rows += norm2 != 0.0;
    valid_rows += any_valid;
    if (bad && first_bad < 0) first_bad = t;
  }
  const bool ok = non_finite == 0 && bad_empty_rows == 0 && zero_rows == 0;
  if (detail) {
    if (!ok)
      *detail = fmt::format("{} non-finite values, {} tokens {} not zero, {} tokens {} all zero "
                            "(first bad row {})", non_finite, bad_empty_rows,
                            rule.outputs_zero ? "(activation_clamp = 0: all outputs zero)"
                                              : "without a valid slot",
                            zero_rows,
                            shared_expert ? "(all with the shared expert)" : "with valid slots", first_bad);
    else if (rule.outputs_zero)
      *detail = "all values finite; every token zero (activation_clamp = 0 makes every output zero)";
    else if (nonzero_rows == valid_rows)
      *detail = shared_expert ? "all values finite; every token nonzero (all pass the shared expert)"
                              : "all values finite; tokens without a valid slot are zero; the others are nonzero";
    else
      *detail = fmt::format("all values finite; tokens without a valid slot are zero; {} of the {} "
                            "others nonzero, the rest zero like their reference rows",
                            nonzero_rows, valid_rows);
  }
  return ok;
}

void scale_rows_to_unit_amax(std::span<uint16_t> x, int64_t H) {
  const int64_t rows = H > 0 ? static_cast<int64_t>(x.size()) / H : 0;
  for (int64_t r = 0; r < rows; ++r) {
    const std::span<uint16_t> row = x.subspan(r * H, H);
    float amax = 0.0f;
    bool finite = true;
    for (uint16_t v : row) {
      const float f = bf16_to_float(v);
      finite = finite && std::isfinite(f);
      amax = std::fmax(amax, std::fabs(f));
    }
    if (!finite || amax == 0.0f) continue;
    int e = 0;
    std::frexp(amax, &e);  // amax in [2^(e-1), 2^e)
    for (uint16_t& v : row) v = float_to_bf16(std::ldexp(bf16_to_float(v), 1 - e));
  }
}

std::vector<uint16_t> cpu_reference_rows(const ProblemSetup& s, const WeightPack& weights,
                                         const testing::HostInputs& in, std::span<const int64_t> rows,
                                         int num_threads) {
  auto driver = make_cpu_driver();
  Bootstrap boot;
  boot.device = Device::cpu();
  auto runtime = Runtime::acquire(boot);
  KernelOverrides overrides;
  overrides.num_threads = num_threads;
  auto layer = Layer::create(runtime, s.desc, weights, overrides);
  DeviceBatch batch = upload_batch(*driver, in);
  poison_y(*driver, batch);
  layer->forward_rows(batch.args, rows);
  return download_y(*driver, batch);
}

}  // namespace moe_ep::cli
