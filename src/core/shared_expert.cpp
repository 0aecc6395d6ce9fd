#include "moe_ep/shared_expert.h"

#include <cmath>
#include <string_view>

#include "check.h"
#include "core/registry.h"
#include "moe_ep/desc.h"
#include "moe_ep/formats.h"

namespace moe_ep {
namespace {

// On the expert's `device`, or in host memory too where `host_too` (the weights).
void check_bf16_matrix(const TensorView& t, std::string_view name, int64_t rows, int64_t cols,
                       std::string_view dims, Device device, bool host_too) {
  MOE_EP_CHECK(t.defined(), "{} is missing; expected bf16 {} = [{}, {}]", name, dims, rows, cols);
  MOE_EP_CHECK(t.dtype == DType::kBF16, "{} has dtype {}; expected bf16", name,
               dtype_name(t.dtype));
  MOE_EP_CHECK(t.ndim == 2 && t.shape[0] == rows && t.shape[1] == cols,
               "{} has shape {}; expected {} = [{}, {}]", name, t.shape_str(), dims, rows, cols);
  MOE_EP_CHECK(t.is_contiguous(), "{} with shape {} is not row-major contiguous", name,
               t.shape_str());
  const bool host = t.device.type == DeviceType::kCPU;
  MOE_EP_CHECK(t.device == device || (host_too && host), "{} is on {}; expected {}{}", name,
               t.device.str(), device.str(),
               host_too && device.type != DeviceType::kCPU ? " or cpu" : "");
  MOE_EP_CHECK(t.numel() == 0 || t.data != nullptr, "{} has a null data pointer", name);
}

void check_finite(const TensorView& t, std::string_view name) {
  if (t.device.type != DeviceType::kCPU) return;  // device values are the caller's to check
  const auto* p = t.ptr<const uint16_t>();
  const int64_t cols = t.shape[1];
  for (int64_t i = 0; i < t.numel(); ++i) {
    const float v = bf16_to_float(p[i]);
    MOE_EP_CHECK(std::isfinite(v), "{}[{}, {}] = {} is not finite", name, i / cols, i % cols, v);
  }
}

}  // namespace

std::unique_ptr<SharedExpert> SharedExpert::create(int64_t H, int64_t I,
                                                   std::optional<float> clamp,
                                                   const TensorView& w13, const TensorView& w2,
                                                   Device device, int64_t max_tokens) {
  MOE_EP_CHECK(H >= 16 && H % 16 == 0,
               "shared expert hidden_size = {} is invalid; expected a positive multiple of 16", H);
  MOE_EP_CHECK(I >= 16 && I % 16 == 0,
               "shared expert intermediate_size = {} is invalid; expected a positive multiple of "
               "16", I);
  check_activation_clamp(clamp, "shared expert activation_clamp");
  MOE_EP_CHECK(max_tokens >= 0, "shared expert max_tokens = {} is invalid; expected >= 0",
               max_tokens);
  check_bf16_matrix(w13, "shared w13", 2 * I, H, "[2I, H]", device, true);
  check_bf16_matrix(w2, "shared w2", H, I, "[H, I]", device, true);
  const detail::BackendEntry& backend = detail::backend_for(device, "a standalone shared expert");
  MOE_EP_CHECK_CODE(backend.create_shared_expert != nullptr, ErrorCode::kUnsupported,
                    "a standalone shared expert on {}: backend '{}' has none", device.str(),
                    backend.info.name);
  check_finite(w13, "shared w13");
  check_finite(w2, "shared w2");
  const SharedExpertRequest request{H, I, clamp, w13, w2, device, max_tokens};
  return std::unique_ptr<SharedExpert>(
      new SharedExpert(backend.create_shared_expert(request), H, I, device, max_tokens));
}

SharedExpert::SharedExpert(std::unique_ptr<Impl> impl, int64_t H, int64_t I, Device device,
                           int64_t max_tokens)
    : impl_(std::move(impl)), H_(H), I_(I), device_(device), max_tokens_(max_tokens) {}

SharedExpert::~SharedExpert() = default;

void SharedExpert::forward(const TensorView& x, const TensorView& out, void* stream) const {
  run(x, out, false, stream);
}

void SharedExpert::add_to(const TensorView& x, const TensorView& y, void* stream) const {
  run(x, y, true, stream);
}

std::string SharedExpert::kernels(int64_t num_tokens) const { return impl_->kernels(num_tokens); }

void SharedExpert::run(const TensorView& x, const TensorView& y, bool accumulate, void* stream) const {
  MOE_EP_CHECK(x.defined() && x.ndim == 2, "shared expert x has shape {}; expected bf16 [T, H = {}]",
               x.shape_str(), H_);
  const int64_t T = x.shape[0];
  MOE_EP_CHECK(max_tokens_ == 0 || T <= max_tokens_,
               "shared expert x has T = {} tokens; expected at most max_tokens = {}", T, max_tokens_);
  check_bf16_matrix(x, "shared expert x", T, H_, "[T, H]", device_, false);
  check_bf16_matrix(y, accumulate ? "shared expert y" : "shared expert out", T, H_, "[T, H]",
                    device_, false);
  impl_->run(x, y, accumulate, stream);
}

}  // namespace moe_ep
