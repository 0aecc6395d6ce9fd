#include "cuda/sm90_routing.h"

#include <algorithm>

#include "core/check.h"
#include "cuda/device_buffer.h"
#include "cuda/errors.h"
#include "cuda/kernels/sm90_route.h"

namespace moe_ep::cuda {

struct DeviceEplb::Buffers {
  DeviceBuffer l2p, replica_count, flag, counters;
};

DeviceEplb::DeviceEplb(const EplbPlacement& placement, int device_index, int64_t max_replicas)
    : placement_(placement), device_index_(device_index), buf_(std::make_unique<Buffers>()) {
  check_eplb_placement(placement_);
  MOE_EP_CHECK(max_replicas >= 0, "max_replicas = {} is invalid; expected >= 0 (0: the placement's)",
               max_replicas);
  capacity_ = std::max(max_replicas, placement_.max_replicas);
  MOE_EP_CUDA_CHECK(cudaSetDevice(device_index_));
  const int64_t L = placement_.num_logical;
  buf_->l2p = DeviceBuffer(sizeof(int32_t) * L * capacity_);
  buf_->replica_count = DeviceBuffer(sizeof(int32_t) * L);
  buf_->flag = DeviceBuffer(sizeof(int32_t));
  buf_->counters = DeviceBuffer(sizeof(int32_t) * placement_.num_physical);
  MOE_EP_CUDA_CHECK(cudaMemset(buf_->flag.get(), 0, sizeof(int32_t)));
  set_placement(placement_);
  reset_counters();
}

DeviceEplb::~DeviceEplb() = default;

void DeviceEplb::set_placement(const EplbPlacement& p) {
  check_eplb_placement(p);
  MOE_EP_CHECK(p.num_logical == placement_.num_logical && p.num_physical == placement_.num_physical,
               "new placement has L = {}, E = {}; expected the device placement's L = {}, E = {} "
               "(its buffers may be captured by a CUDA graph and are never reallocated)",
               p.num_logical, p.num_physical, placement_.num_logical, placement_.num_physical);
  MOE_EP_CHECK(p.max_replicas <= capacity_,
               "new placement has max_replicas = {}; expected <= the device capacity {} (give "
               "DeviceEplb a larger max_replicas at creation)", p.max_replicas, capacity_);
  // Rows widened to the capacity's columns, -1 padded.
  std::vector<int32_t> l2p(p.num_logical * capacity_, -1);
  for (int64_t l = 0; l < p.num_logical; ++l)
    std::copy_n(p.logical_to_physical.begin() + l * p.max_replicas, p.max_replicas,
                l2p.begin() + l * capacity_);
  MOE_EP_CUDA_CHECK(cudaSetDevice(device_index_));
  MOE_EP_CUDA_CHECK(cudaDeviceSynchronize());  // no forward may read the old table meanwhile
  MOE_EP_CUDA_CHECK(cudaMemcpy(buf_->l2p.get(), l2p.data(), sizeof(int32_t) * l2p.size(),
                               cudaMemcpyHostToDevice));
  MOE_EP_CUDA_CHECK(cudaMemcpy(buf_->replica_count.get(), p.replica_count.data(),
                               sizeof(int32_t) * p.num_logical, cudaMemcpyHostToDevice));
  MOE_EP_CUDA_CHECK(cudaDeviceSynchronize());
  placement_ = p;
}

void DeviceEplb::set_recording(bool on) {
  const int32_t v = on ? 1 : 0;
  MOE_EP_CUDA_CHECK(cudaSetDevice(device_index_));
  MOE_EP_CUDA_CHECK(cudaMemcpy(buf_->flag.get(), &v, sizeof v, cudaMemcpyHostToDevice));
  MOE_EP_CUDA_CHECK(cudaDeviceSynchronize());  // visible to kernels on non-blocking streams
}

std::vector<int64_t> DeviceEplb::counter_values() const {
  std::vector<int32_t> c(placement_.num_physical);
  MOE_EP_CUDA_CHECK(cudaSetDevice(device_index_));
  MOE_EP_CUDA_CHECK(cudaDeviceSynchronize());
  MOE_EP_CUDA_CHECK(cudaMemcpy(c.data(), buf_->counters.get(), sizeof(int32_t) * c.size(),
                               cudaMemcpyDeviceToHost));
  return {c.begin(), c.end()};
}

void DeviceEplb::reset_counters() {
  MOE_EP_CUDA_CHECK(cudaSetDevice(device_index_));
  MOE_EP_CUDA_CHECK(cudaDeviceSynchronize());
  MOE_EP_CUDA_CHECK(cudaMemset(buf_->counters.get(), 0, buf_->counters.bytes()));
  MOE_EP_CUDA_CHECK(cudaDeviceSynchronize());
}

const int32_t* DeviceEplb::device_logical_to_physical() const { return buf_->l2p.get<int32_t>(); }
const int32_t* DeviceEplb::device_replica_count() const { return buf_->replica_count.get<int32_t>(); }
const int32_t* DeviceEplb::device_recording_flag() const { return buf_->flag.get<int32_t>(); }
int32_t* DeviceEplb::device_counters() const { return buf_->counters.get<int32_t>(); }

Sm90Router::Sm90Router(const RouterConfig* router, int64_t num_logical, int64_t top_k,
                       int device_index)
    : has_router_(router != nullptr), L_(num_logical), K_(top_k), device_index_(device_index) {
  MOE_EP_CHECK(num_logical >= 1 && num_logical <= kRouteMaxLogical,
               "routing stage num_logical = {} is invalid; expected 1..{}", num_logical,
               kRouteMaxLogical);
  MOE_EP_CHECK(top_k >= 1 && top_k <= std::min<int64_t>(kRouteMaxTopK, num_logical),
               "routing stage top_k = {} is invalid; expected 1..min({}, num_logical = {})", top_k,
               kRouteMaxTopK, num_logical);
  if (router) {
    check_router_config(*router);
    MOE_EP_CHECK(router->num_experts == num_logical && router->top_k == top_k,
                 "router num_experts = {}, top_k = {}; expected the routing stage's L = {}, K = {}",
                 router->num_experts, router->top_k, num_logical, top_k);
    config_ = *router;
  }
  MOE_EP_CUDA_CHECK(cudaSetDevice(device_index_));
  MOE_EP_CUDA_CHECK(cudaMalloc(&error_flags_, sizeof(uint32_t)));
  MOE_EP_CUDA_CHECK(cudaMemset(error_flags_, 0, sizeof(uint32_t)));
  MOE_EP_CUDA_CHECK(cudaDeviceSynchronize());
}

Sm90Router::~Sm90Router() {
  if (error_flags_) MOE_EP_CUDA_IGNORE(cudaFree(error_flags_));
}

void Sm90Router::route(const RouteBinding& b, const DeviceEplb* eplb, void* stream) const {
  MOE_EP_CHECK(b.num_tokens >= 0 && b.num_tokens <= INT32_MAX / K_,
               "routing num_tokens = {} is invalid; expected 0..{}", b.num_tokens, INT32_MAX / K_);
  MOE_EP_CHECK(b.topk_ids != nullptr || b.num_tokens == 0, "routing topk_ids is missing");
  RouteParams p;
  p.num_tokens = static_cast<int32_t>(b.num_tokens);
  p.num_logical = static_cast<int32_t>(L_);
  p.top_k = static_cast<int32_t>(K_);
  if (has_router_) {
    MOE_EP_CHECK(b.logits != nullptr || b.num_tokens == 0,
                 "routing logits are missing; expected f32 | bf16 [T, L = {}]", L_);
    MOE_EP_CHECK(b.topk_weights != nullptr || b.num_tokens == 0, "routing topk_weights is missing");
    MOE_EP_CHECK(b.logical_ids == nullptr,
                 "routing logical_ids are given to a router stage; expected logits only");
    p.logits = b.logits;
    p.logits_bf16 = b.logits_bf16 ? 1 : 0;
    p.bias = b.bias;
    p.routed_scaling_factor = config_.routed_scaling_factor;
    if (is_hash_layer(config_, b.layer_idx)) {
      MOE_EP_CHECK(b.token_ids != nullptr && b.hash_table != nullptr && b.vocab >= 1,
                   "layer_idx = {} < num_hash_layers = {} routes by hash: token_ids, hash_table "
                   "[vocab, K] and vocab >= 1 are required (got vocab = {})",
                   b.layer_idx, config_.num_hash_layers, b.vocab);
      MOE_EP_CHECK(b.vocab <= INT32_MAX / K_, "routing vocab = {} is too large; expected <= {}",
                   b.vocab, INT32_MAX / K_);
      p.token_ids = b.token_ids;
      p.token_ids_int64 = b.token_ids_int64 ? 1 : 0;
      p.hash_table = b.hash_table;
      p.vocab = static_cast<int32_t>(b.vocab);
    } else {
      MOE_EP_CHECK(b.token_ids == nullptr && b.hash_table == nullptr,
                   "token_ids / hash_table are given but layer_idx = {} is not a hash layer "
                   "(num_hash_layers = {}); leave them empty", b.layer_idx, config_.num_hash_layers);
    }
  } else {
    MOE_EP_CHECK(b.logical_ids != nullptr || b.num_tokens == 0,
                 "routing logical_ids are missing; expected i32 | i64 [T, K = {}]", K_);
    MOE_EP_CHECK(b.logits == nullptr, "routing logits are given to a remap-only stage");
    p.logical_ids = b.logical_ids;
    p.logical_ids_int64 = b.logical_ids_int64 ? 1 : 0;
  }
  if (eplb) {
    MOE_EP_CHECK(eplb->num_logical() == L_,
                 "eplb num_logical = {}; expected the routing stage's L = {}", eplb->num_logical(), L_);
    p.logical_to_physical = eplb->device_logical_to_physical();
    p.replica_count = eplb->device_replica_count();
    p.max_replicas = static_cast<int32_t>(eplb->capacity_replicas());
    p.recording_flag = eplb->device_recording_flag();
    p.counters = eplb->device_counters();
  }
  p.topk_ids = b.topk_ids;
  p.topk_ids_int64 = b.topk_ids_int64 ? 1 : 0;
  p.topk_weights = b.topk_weights;
  p.error_flags = error_flags_;
  MOE_EP_CUDA_CHECK(launch_sm90_route(p, static_cast<cudaStream_t>(stream)));
}

uint32_t Sm90Router::read_error_flags(bool clear) {
  uint32_t v = 0;
  MOE_EP_CUDA_CHECK(cudaSetDevice(device_index_));
  MOE_EP_CUDA_CHECK(cudaDeviceSynchronize());
  MOE_EP_CUDA_CHECK(cudaMemcpy(&v, error_flags_, sizeof v, cudaMemcpyDeviceToHost));
  if (clear && v) {
    MOE_EP_CUDA_CHECK(cudaMemset(error_flags_, 0, sizeof(uint32_t)));
    MOE_EP_CUDA_CHECK(cudaDeviceSynchronize());
  }
  return v;
}

}  // namespace moe_ep::cuda
