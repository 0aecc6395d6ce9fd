// RoutingStage::create / route: the options and every call's tensors are checked here, so the
// backends' stages receive validated requests only (docs/spec.md §11).
#include "moe_ep/routing_stage.h"

#include <algorithm>
#include <string>

#include <fmt/format.h>

#include "core/check.h"
#include "core/registry.h"
#include "core/routing_stage_impl.h"
#include "core/tensor_checks.h"

namespace moe_ep {
namespace {

using detail::check_absent;
using detail::check_tensor;
using detail::Dim;

void check_options(const RoutingStageOptions& o) {
  MOE_EP_CHECK_PARAM(o.num_logical >= 1, "num_logical",
                     "routing stage num_logical = {} is invalid; expected >= 1", o.num_logical);
  MOE_EP_CHECK_PARAM(o.top_k >= 1 && o.top_k <= o.num_logical, "top_k",
                     "routing stage top_k = {} is invalid; expected 1..num_logical ({})", o.top_k,
                     o.num_logical);
  MOE_EP_CHECK_PARAM(o.router || o.placement, "router",
                     "a routing stage needs a router, a placement or both; neither is given");
  if (o.router) {
    check_router_config(*o.router);
    MOE_EP_CHECK_PARAM(o.router->num_experts == o.num_logical && o.router->top_k == o.top_k, "router",
                       "router num_experts = {}, top_k = {}; expected the stage's num_logical = {}, "
                       "top_k = {}", o.router->num_experts, o.router->top_k, o.num_logical, o.top_k);
  }
  if (o.placement) {
    check_eplb_placement(*o.placement);
    MOE_EP_CHECK_PARAM(o.placement->num_logical == o.num_logical, "placement",
                       "placement num_logical = {}; expected the stage's num_logical = {}",
                       o.placement->num_logical, o.num_logical);
  }
  MOE_EP_CHECK_PARAM(o.max_replicas >= 0, "max_replicas",
                     "max_replicas = {} is invalid; expected >= 0 (0: the placement's)", o.max_replicas);
  MOE_EP_CHECK_PARAM(o.placement || o.max_replicas == 0, "max_replicas",
                     "max_replicas = {} is given without a placement; expected 0", o.max_replicas);
}

}  // namespace

RouterArgs router_args(const RoutingArgs& a) {
  RouterArgs r;
  r.layer_idx = a.layer_idx;
  r.logits = a.logits;
  r.bias = a.bias;
  r.token_ids = a.token_ids;
  r.hash_table = a.hash_table;
  r.topk_ids = a.topk_ids;
  r.topk_weights = a.topk_weights;
  return r;
}

std::unique_ptr<RoutingStage> RoutingStage::create(const RoutingStageOptions& options) {
  check_options(options);
  const detail::BackendEntry& backend = detail::backend_for(options.device, "a routing stage");
  MOE_EP_CHECK_CODE(backend.create_routing_stage != nullptr, ErrorCode::kUnsupported,
                    "a routing stage on {}: backend '{}' has none", options.device.str(),
                    backend.info.name);
  RoutingStageOptions o = options;
  if (o.placement) o.max_replicas = std::max(o.max_replicas, o.placement->max_replicas);
  std::unique_ptr<Impl> impl = backend.create_routing_stage(o);
  impl->options = std::move(o);
  return std::unique_ptr<RoutingStage>(new RoutingStage(std::move(impl)));
}

RoutingStage::RoutingStage(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
RoutingStage::~RoutingStage() = default;

void RoutingStage::route(const RoutingArgs& a) {
  const RoutingStageOptions& o = impl_->options;
  const Device dev = o.device;
  const std::string rule = fmt::format("{} (the routing stage's device)", dev.str());
  auto on = [&](const TensorView& t) { return t.device == dev; };
  MOE_EP_CHECK_PARAM(a.layer_idx >= 0, "layer_idx", "routing layer_idx = {} is invalid; expected >= 0",
                     a.layer_idx);
  const int64_t L = o.num_logical, K = o.top_k;
  // T comes from the input that each kind of stage reads.
  const TensorView& input = o.router ? a.logits : a.logical_ids;
  MOE_EP_CHECK_PARAM(input.defined() && input.ndim == 2, o.router ? "logits" : "logical_ids",
                     "{} is {}; expected {}", o.router ? "logits" : "logical_ids",
                     input.defined() ? "of shape " + input.shape_str() : "missing",
                     o.router ? fmt::format("f32 | bf16 [T, L = {}]", L)
                              : fmt::format("i32 | i64 [T, K = {}]", K));
  const int64_t T = input.shape[0];
  MOE_EP_CHECK_PARAM(T <= INT32_MAX / K, "T", "routing T = {} is too large; expected <= {}", T,
                     INT32_MAX / K);
  const Dim t{T, "T"}, l{L, "L"}, k{K, "K"};
  if (o.router) {
    check_tensor(a.logits, "logits", {DType::kF32, DType::kBF16}, {t, l}, rule, on(a.logits));
    if (a.bias.defined()) check_tensor(a.bias, "bias", {DType::kF32}, {l}, rule, on(a.bias));
    check_tensor(a.topk_weights, "topk_weights", {DType::kF32}, {t, k}, rule, on(a.topk_weights));
    check_absent(a.logical_ids, "logical_ids", "by a stage with a router (it routes the logits)");
    if (is_hash_layer(*o.router, a.layer_idx)) {
      const std::string why = fmt::format("(layer_idx = {} < num_hash_layers = {} routes by hash)",
                                          a.layer_idx, o.router->num_hash_layers);
      check_tensor(a.token_ids, "token_ids", {DType::kI32, DType::kI64}, {t}, rule,
                   on(a.token_ids));
      MOE_EP_CHECK_PARAM(a.hash_table.defined() && a.hash_table.ndim == 2, "hash_table",
                         "hash_table is {}; expected [vocab, K = {}] {}",
                         a.hash_table.defined() ? "of shape " + a.hash_table.shape_str() : "missing",
                         K, why);
      const int64_t vocab = a.hash_table.shape[0];
      MOE_EP_CHECK_PARAM(vocab >= 1 && vocab <= INT32_MAX / K, "hash_table",
                         "hash_table vocab = {} is invalid; expected 1..{}", vocab, INT32_MAX / K);
      if (dev.type == DeviceType::kCPU)
        check_tensor(a.hash_table, "hash_table", {DType::kI32, DType::kI64}, {{vocab, "vocab"}, k},
                     rule, on(a.hash_table));
      else
        check_tensor(a.hash_table, "hash_table", {DType::kI32}, {{vocab, "vocab"}, k}, rule,
                     on(a.hash_table));
    } else {
      const std::string why = fmt::format("when layer_idx = {} is not a hash layer (num_hash_layers = {})",
                                          a.layer_idx, o.router->num_hash_layers);
      check_absent(a.token_ids, "token_ids", why);
      check_absent(a.hash_table, "hash_table", why);
    }
  } else {
    check_tensor(a.logical_ids, "logical_ids", {DType::kI32, DType::kI64}, {t, k}, rule,
                 on(a.logical_ids));
    for (const auto& [view, name] : {std::pair{&a.logits, "logits"}, {&a.bias, "bias"},
                                     {&a.token_ids, "token_ids"}, {&a.hash_table, "hash_table"}})
      check_absent(*view, name, "by a remap-only stage (no router)");
    check_absent(a.topk_weights, "topk_weights", "by a remap-only stage (the weights stay the caller's)");
  }
  check_tensor(a.topk_ids, "topk_ids", {DType::kI32, DType::kI64}, {t, k}, rule, on(a.topk_ids));
  impl_->route(a);
}

void RoutingStage::set_placement(const EplbPlacement& p) {
  RoutingStageOptions& o = impl_->options;
  MOE_EP_CHECK_PARAM(o.placement.has_value(), "placement",
                     "set_placement on a routing stage created without a placement; create it with one");
  check_eplb_placement(p);
  MOE_EP_CHECK_PARAM(p.num_logical == o.placement->num_logical && p.num_physical == o.placement->num_physical,
                     "placement",
                     "new placement has L = {}, E = {}; expected the stage's L = {}, E = {} (its "
                     "buffers may be captured by a CUDA graph and are never reallocated)",
                     p.num_logical, p.num_physical, o.placement->num_logical, o.placement->num_physical);
  MOE_EP_CHECK_PARAM(p.max_replicas <= o.max_replicas, "placement",
                     "new placement has max_replicas = {}; expected <= the stage's capacity {} (give "
                     "RoutingStageOptions::max_replicas at creation)", p.max_replicas, o.max_replicas);
  impl_->set_placement(p);
  o.placement = p;
}

void RoutingStage::set_recording(bool on) {
  MOE_EP_CHECK_PARAM(has_placement() || !on, "recording",
                     "the load counters need a placement; this routing stage has none");
  if (has_placement()) impl_->set_recording(on);
}

std::vector<int64_t> RoutingStage::counter_values() const {
  return has_placement() ? impl_->counter_values() : std::vector<int64_t>{};
}

void RoutingStage::reset_counters() {
  if (has_placement()) impl_->reset_counters();
}

uint32_t RoutingStage::read_error_flags(bool clear) { return impl_->read_error_flags(clear); }

void RoutingStage::check_error_flags() {
  const uint32_t flags = read_error_flags(true);
  MOE_EP_CHECK_CODE(flags == 0, ErrorCode::kDevice,
                    "routing stage error flags 0x{:x} raised (bit 1, kErrorRouterInput: non-finite "
                    "logits, a token id outside [0, vocab) or a hash-table id outside [0, L); those "
                    "slots were set to -1)", flags);
}

const RoutingStageOptions& RoutingStage::options() const { return impl_->options; }

int64_t RoutingStage::num_physical() const {
  return has_placement() ? options().placement->num_physical : options().num_logical;
}

}  // namespace moe_ep
