#include "cli/device_routing.h"

#ifdef MOE_EP_WITH_CUDA

#include <cstring>

#include <fmt/format.h>

#include "cli/batch.h"

namespace moe_ep::cli {

DeviceRouting::DeviceRouting(Driver& driver, const SyntheticRouting& ref, int64_t redundant, int device_index)
    : driver_(driver), ref_(ref) {
  const int64_t L = ref.config.num_experts, K = ref.config.top_k;
  if (ref.router || redundant > 0) {
    RoutingStageOptions o;
    o.device = Device::cuda(device_index);
    o.num_logical = L;
    o.top_k = K;
    if (ref.router) o.router = ref.config;
    if (redundant > 0) o.placement = ref.placement;
    stage_ = RoutingStage::create(o);
  }
  if (ref.router) bias_ = upload_vector(driver, ref.bias);
  for (const RoutedBatch& r : ref.batches) {
    Batch& b = batches_.emplace_back();
    b.tokens_count = static_cast<int64_t>(r.logical.size()) / K;
    if (!stage_) {  // no stage: the reference routing as the layer's input
      b.ids = upload_vector(driver, r.logical);
      b.weights = upload_vector(driver, r.weights);
      continue;
    }
    b.ids = driver.allocate(static_cast<int64_t>(r.logical.size() * 4));
    if (ref.router) {
      b.weights = driver.allocate(static_cast<int64_t>(r.weights.size() * 4));
      b.logits = upload_vector(driver, r.logits);
      if (!r.table.empty()) {
        b.table = upload_vector(driver, r.table);
        b.tokens = upload_vector(driver, r.tokens);
      }
    } else {  // remap only: the generated weights stay the layer's
      b.weights = upload_vector(driver, r.weights);
      b.logical = upload_vector(driver, r.logical);
    }
  }
}

void DeviceRouting::route(int layer, int rank, void* stream) const {
  if (!stage_) return;
  const Batch& b = at(layer, rank);
  const Device dev = driver_.device();
  const int64_t T = b.tokens_count, L = ref_.config.num_experts, K = ref_.config.top_k;
  RoutingArgs r;
  r.layer_idx = layer;
  if (ref_.router) {
    r.logits = TensorView::contiguous(b.logits, DType::kF32, {T, L}, dev);
    if (!ref_.bias.empty()) r.bias = TensorView::contiguous(bias_, DType::kF32, {L}, dev);
    if (b.table) {
      r.token_ids = TensorView::contiguous(b.tokens, DType::kI32, {T}, dev);
      r.hash_table = TensorView::contiguous(b.table, DType::kI32, {kSyntheticVocab, K}, dev);
    }
    r.topk_weights = TensorView::contiguous(b.weights, DType::kF32, {T, K}, dev);
  } else {
    r.logical_ids = TensorView::contiguous(b.logical, DType::kI32, {T, K}, dev);
  }
  r.topk_ids = TensorView::contiguous(b.ids, DType::kI32, {T, K}, dev);
  r.stream = stream;
  stage_->route(r);
}

void DeviceRouting::poison() {
  if (!stage_) return;
  const int64_t K = ref_.config.top_k;
  for (const Batch& b : batches_) {
    driver_.fill(b.ids, 0x7F, b.tokens_count * K * 4);
    if (ref_.router) driver_.fill(b.weights, 0xFF, b.tokens_count * K * 4);
  }
}

void DeviceRouting::set_recording(bool on) {
  if (stage_ && stage_->has_placement()) stage_->set_recording(on);
}

std::vector<int64_t> DeviceRouting::counters() const {
  return stage_ ? stage_->counter_values() : std::vector<int64_t>{};
}

uint32_t DeviceRouting::read_error_flags() { return stage_ ? stage_->read_error_flags(true) : 0u; }

std::string DeviceRouting::compare() const {
  const int64_t K = ref_.config.top_k;
  for (int l = 0; l < ref_.layers; ++l)
    for (int r = 0; r < ref_.ranks; ++r) {
      const RoutedBatch& want = ref_.at(l, r);
      const Batch& b = at(l, r);
      const auto ids = download_vector<int32_t>(driver_, b.ids, want.physical.size());
      const auto w = download_vector<float>(driver_, b.weights, want.weights.size());
      for (size_t i = 0; i < want.physical.size(); ++i)
        if (ids[i] != want.physical[i] ||  // == logical without EPLB (identity placement)
            std::memcmp(&w[i], &want.weights[i], 4) != 0)
          return fmt::format("layer {} rank {} slot ({}, {}): device id {} weight {}, cpu id {} weight {}", l,
                             r, static_cast<int64_t>(i) / K, static_cast<int64_t>(i) % K, ids[i], w[i],
                             want.physical[i], want.weights[i]);
    }
  return "";
}

}  // namespace moe_ep::cli

#endif  // MOE_EP_WITH_CUDA
