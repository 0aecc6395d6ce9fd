#include "cpu/layer_shared_expert.h"

#include <fmt/format.h>

#include "moe_ep/formats.h"

namespace moe_ep::cpu {

std::unique_ptr<const SharedExpert> make_layer_shared_expert(const LayerRequest& req, LayerInfo& info) {
  if (req.desc.shared_intermediate_size == 0) return nullptr;
  info.config.add("shared_expert", fmt::format("bf16, Is = {}, added to each token's y right after its combine",
                                               req.desc.shared_intermediate_size));
  return SharedExpert::create(req.desc.fleet.hidden_size, req.desc.shared_intermediate_size,
                              req.desc.activation_clamp, req.weights.shared_w13, req.weights.shared_w2);
}

void shared_expert_row(const SharedExpert& shared, const ForwardArgs& args, int64_t t, std::vector<uint16_t>& o) {
  const int64_t H = shared.hidden_size();
  o.resize(H);
  const auto* x = static_cast<const uint16_t*>(args.x.data) + t * H;
  shared.forward(TensorView::contiguous(const_cast<uint16_t*>(x), DType::kBF16, {1, H}),
                 TensorView::contiguous(o.data(), DType::kBF16, {1, H}));
}

void add_to_row(uint16_t* y_row, const std::vector<uint16_t>& o) {
  for (size_t j = 0; j < o.size(); ++j) y_row[j] = float_to_bf16(bf16_to_float(y_row[j]) + bf16_to_float(o[j]));
}

}  // namespace moe_ep::cpu
