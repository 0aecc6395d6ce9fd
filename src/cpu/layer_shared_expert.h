// The shared expert of a CPU layer (MoeDesc::shared_intermediate_size > 0), shared by the
// single-rank and the multi-rank CPU layers: made from the request's weights; per token, its
// output o is computed from x[t] before the combine writes y[t] (x and y may be one buffer), then
// added to it: y = bf16(y + o), SharedExpert::add_to's two roundings.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/layer_impl.h"
#include "moe_ep/shared_expert.h"

namespace moe_ep::cpu {

// Null when the descriptor has no shared expert; otherwise also adds its entry to the layer's
// selected config (`info`).
std::unique_ptr<const SharedExpert> make_layer_shared_expert(const LayerRequest& request, LayerInfo& info);

// o = the shared expert's bf16 output for token t of a validated forward (x bf16 [T, H] in host
// memory). Thread-safe: tokens may be computed concurrently.
void shared_expert_row(const SharedExpert& shared, const ForwardArgs& args, int64_t t, std::vector<uint16_t>& o);
// y_row[j] = bf16(y_row[j] + o[j]).
void add_to_row(uint16_t* y_row, const std::vector<uint16_t>& o);

}  // namespace moe_ep::cpu
