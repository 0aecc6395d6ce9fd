#include "moe_ep/eplb.h"

#include <atomic>

#include "check.h"

namespace moe_ep {
namespace {

int64_t read_id(const TensorView& t, int64_t i) {
  return t.dtype == DType::kI32 ? t.ptr<const int32_t>()[i] : t.ptr<const int64_t>()[i];
}

void write_id(const TensorView& t, int64_t i, int64_t v) {
  if (t.dtype == DType::kI32)
    t.ptr<int32_t>()[i] = static_cast<int32_t>(v);
  else
    t.ptr<int64_t>()[i] = v;
}

void check_ids_tensor(const TensorView& t, const char* name) {
  MOE_EP_CHECK(t.defined(), "{} is missing; expected i32 | i64 [T, K]", name);
  MOE_EP_CHECK(t.dtype == DType::kI32 || t.dtype == DType::kI64,
               "{} has dtype {}; expected i32 | i64", name, dtype_name(t.dtype));
  MOE_EP_CHECK(t.ndim == 2, "{} has shape {}; expected [T, K]", name, t.shape_str());
  MOE_EP_CHECK(t.is_contiguous(), "{} with shape {} is not row-major contiguous", name,
               t.shape_str());
  MOE_EP_CHECK(t.device.type == DeviceType::kCPU, "{} is on {}; expected cpu", name,
               t.device.str());
  MOE_EP_CHECK(t.numel() == 0 || t.data != nullptr, "{} has a null data pointer", name);
}

}  // namespace

std::vector<int32_t> EplbPlacement::physical_to_logical() const {
  std::vector<int32_t> p2l(num_physical, -1);
  for (int64_t l = 0; l < num_logical; ++l)
    for (int64_t r = 0; r < replica_count[l]; ++r)
      p2l[logical_to_physical[l * max_replicas + r]] = static_cast<int32_t>(l);
  return p2l;
}

EplbPlacement make_eplb_placement(int64_t num_logical, std::span<const int64_t> replicated) {
  MOE_EP_CHECK(num_logical >= 1, "num_logical = {} is invalid; expected >= 1", num_logical);
  std::vector<std::vector<int32_t>> replicas(num_logical);
  for (int64_t l = 0; l < num_logical; ++l) replicas[l].push_back(static_cast<int32_t>(l));
  for (size_t j = 0; j < replicated.size(); ++j) {
    MOE_EP_CHECK(replicated[j] >= 0 && replicated[j] < num_logical,
                 "replicated[{}] = {} is outside [0, num_logical = {})", j, replicated[j],
                 num_logical);
    replicas[replicated[j]].push_back(static_cast<int32_t>(num_logical + j));
  }
  EplbPlacement p;
  p.num_logical = num_logical;
  p.num_physical = num_logical + static_cast<int64_t>(replicated.size());
  p.max_replicas = 1;
  for (const auto& r : replicas) p.max_replicas = std::max<int64_t>(p.max_replicas, r.size());
  p.logical_to_physical.assign(num_logical * p.max_replicas, -1);
  p.replica_count.resize(num_logical);
  for (int64_t l = 0; l < num_logical; ++l) {
    p.replica_count[l] = static_cast<int32_t>(replicas[l].size());
    for (size_t r = 0; r < replicas[l].size(); ++r)
      p.logical_to_physical[l * p.max_replicas + r] = replicas[l][r];
  }
  return p;
}

std::vector<int64_t> plan_redundant_experts(std::span<const int64_t> load, int64_t num_redundant) {
  MOE_EP_CHECK(!load.empty(), "load is empty; expected one value per logical expert");
  MOE_EP_CHECK(num_redundant >= 0, "num_redundant = {} is invalid; expected >= 0", num_redundant);
  std::vector<int64_t> replicas(load.size(), 1), picks;
  for (size_t l = 0; l < load.size(); ++l)
    MOE_EP_CHECK(load[l] >= 0, "load[{}] = {} is invalid; expected >= 0", l, load[l]);
  for (int64_t j = 0; j < num_redundant; ++j) {
    size_t best = 0;
    for (size_t l = 1; l < load.size(); ++l)
      // load[l] / replicas[l] > load[best] / replicas[best], exactly, in integers.
      if (static_cast<__int128>(load[l]) * replicas[best] >
          static_cast<__int128>(load[best]) * replicas[l])
        best = l;
    picks.push_back(static_cast<int64_t>(best));
    ++replicas[best];
  }
  return picks;
}

void check_eplb_placement(const EplbPlacement& p) {
  MOE_EP_CHECK(p.num_logical >= 1, "placement.num_logical = {} is invalid; expected >= 1",
               p.num_logical);
  MOE_EP_CHECK(p.num_physical >= p.num_logical,
               "placement.num_physical = {} is invalid; expected >= num_logical = {}",
               p.num_physical, p.num_logical);
  MOE_EP_CHECK(p.max_replicas >= 1, "placement.max_replicas = {} is invalid; expected >= 1",
               p.max_replicas);
  MOE_EP_CHECK(static_cast<int64_t>(p.logical_to_physical.size()) == p.num_logical * p.max_replicas,
               "placement.logical_to_physical has {} entries; expected [L, max_replicas] = [{}, "
               "{}] = {}", p.logical_to_physical.size(), p.num_logical, p.max_replicas,
               p.num_logical * p.max_replicas);
  MOE_EP_CHECK(static_cast<int64_t>(p.replica_count.size()) == p.num_logical,
               "placement.replica_count has {} entries; expected L = {}", p.replica_count.size(),
               p.num_logical);
  std::vector<int64_t> owner(p.num_physical, -1);
  for (int64_t l = 0; l < p.num_logical; ++l) {
    const int64_t n = p.replica_count[l];
    MOE_EP_CHECK(n >= 1 && n <= p.max_replicas,
                 "placement.replica_count[{}] = {} is invalid; expected 1..max_replicas = {}", l,
                 n, p.max_replicas);
    for (int64_t r = 0; r < p.max_replicas; ++r) {
      const int64_t phys = p.logical_to_physical[l * p.max_replicas + r];
      if (r >= n) {
        MOE_EP_CHECK(phys == -1,
                     "placement.logical_to_physical[{}, {}] = {}; expected -1 padding beyond "
                     "replica_count[{}] = {}", l, r, phys, l, n);
        continue;
      }
      MOE_EP_CHECK(phys >= 0 && phys < p.num_physical,
                   "placement.logical_to_physical[{}, {}] = {} is outside [0, num_physical = {})",
                   l, r, phys, p.num_physical);
      MOE_EP_CHECK(owner[phys] < 0,
                   "placement.logical_to_physical[{}, {}] = {}: physical expert {} already serves "
                   "logical expert {}", l, r, phys, phys, owner[phys]);
      owner[phys] = l;
    }
  }
  for (int64_t phys = 0; phys < p.num_physical; ++phys)
    MOE_EP_CHECK(owner[phys] >= 0, "physical expert {} serves no logical expert; every physical "
                 "expert must appear once in placement.logical_to_physical", phys);
}

Eplb::Eplb(EplbPlacement placement)
    : placement_(std::move(placement)),
      flag_(new int32_t[1]{0}),
      counters_(new int32_t[std::max<int64_t>(placement_.num_physical, 1)]()) {
  check_eplb_placement(placement_);
}

void Eplb::remap(const TensorView& logical_ids, const TensorView& physical_ids) {
  check_ids_tensor(logical_ids, "logical_ids");
  check_ids_tensor(physical_ids, "physical_ids");
  MOE_EP_CHECK(physical_ids.shape[0] == logical_ids.shape[0] &&
                   physical_ids.shape[1] == logical_ids.shape[1],
               "physical_ids has shape {}; expected the shape of logical_ids, {}",
               physical_ids.shape_str(), logical_ids.shape_str());
  const int64_t T = logical_ids.shape[0], K = logical_ids.shape[1];
  const int64_t L = placement_.num_logical, M = placement_.max_replicas;
  const bool record = recording();
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t k = 0; k < K; ++k) {
      const int64_t i = t * K + k;
      const int64_t l = read_id(logical_ids, i);
      int64_t phys = -1;
      if (l >= 0 && l < L) {
        phys = placement_.logical_to_physical[l * M + (t * K + k) % placement_.replica_count[l]];
        if (record) std::atomic_ref<int32_t>(counters_[phys]).fetch_add(1, std::memory_order_relaxed);
      }
      write_id(physical_ids, i, phys);
    }
  }
}

void Eplb::set_recording(bool on) {
  std::atomic_ref<int32_t>(flag_[0]).store(on ? 1 : 0, std::memory_order_relaxed);
}

bool Eplb::recording() const {
  return std::atomic_ref<int32_t>(flag_[0]).load(std::memory_order_relaxed) != 0;
}

std::vector<int64_t> Eplb::counter_values() const {
  std::vector<int64_t> v(placement_.num_physical);
  for (int64_t p = 0; p < placement_.num_physical; ++p)
    v[p] = std::atomic_ref<int32_t>(counters_[p]).load(std::memory_order_relaxed);
  return v;
}

void Eplb::reset_counters() {
  for (int64_t p = 0; p < placement_.num_physical; ++p)
    std::atomic_ref<int32_t>(counters_[p]).store(0, std::memory_order_relaxed);
}

}  // namespace moe_ep
