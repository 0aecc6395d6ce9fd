#include "cpu/layer_shared_expert.h"

#include <fmt/format.h>

namespace moe_ep::cpu {

std::unique_ptr<const SharedExpert> make_layer_shared_expert(const LayerRequest& req, LayerInfo& info) {
  if (req.desc.shared_intermediate_size == 0) return nullptr;
  info.config.add("shared_expert", fmt::format("bf16, Is = {}, added to each token's y right after its combine",
                                               req.desc.shared_intermediate_size));
  return SharedExpert::create(req.desc.fleet.hidden_size, req.desc.shared_intermediate_size,
                              req.desc.activation_clamp, req.weights.shared_w13, req.weights.shared_w2);
}

void add_shared_expert_row(const SharedExpert& shared, const ForwardArgs& args, int64_t t) {
  const int64_t H = shared.hidden_size();
  auto row = [&](const TensorView& m) {
    return TensorView::contiguous(static_cast<uint16_t*>(m.data) + t * H, DType::kBF16, {1, H});
  };
  shared.add_to(row(args.x), row(args.y));
}

}  // namespace moe_ep::cpu
