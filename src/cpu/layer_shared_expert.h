// The shared expert of a CPU layer (MoeDesc::shared_intermediate_size > 0), shared by the
// single-rank and the multi-rank CPU layers: made from the request's weights, added to one token's
// y right after that token's combine (y = bf16(y + o): SharedExpert::add_to on one row).
#pragma once

#include <cstdint>
#include <memory>

#include "core/layer_impl.h"
#include "moe_ep/shared_expert.h"

namespace moe_ep::cpu {

// Null when the descriptor has no shared expert; otherwise also adds its entry to the layer's
// selected config (`info`).
std::unique_ptr<const SharedExpert> make_layer_shared_expert(const LayerRequest& request, LayerInfo& info);

// y[t] += o[t] for token t of a validated forward (x bf16 [T, H] in host memory). Thread-safe:
// tokens may be added concurrently.
void add_shared_expert_row(const SharedExpert& shared, const ForwardArgs& args, int64_t t);

}  // namespace moe_ep::cpu
