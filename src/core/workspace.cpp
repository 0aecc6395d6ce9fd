#include "moe_ep/workspace.h"

#include <limits>

#include <fmt/format.h>

#include "check.h"

namespace moe_ep {
namespace {

// a * b with an overflow check that names what was being sized.
int64_t mul(int64_t a, int64_t b, std::string_view what) {
  MOE_EP_CHECK(a == 0 || b <= std::numeric_limits<int64_t>::max() / a,
               "workspace region {} overflows int64 ({} x {})", what, a, b);
  return a * b;
}

int64_t align_up(int64_t v) { return (v + kWorkspaceAlign - 1) / kWorkspaceAlign * kWorkspaceAlign; }

void check_shape(const WorkspaceShape& s) {
  MOE_EP_CHECK(s.world_size >= 1, "workspace world_size (R) = {} is invalid; expected >= 1",
               s.world_size);
  MOE_EP_CHECK(s.num_experts >= 1 && s.num_experts % s.world_size == 0,
               "workspace num_experts (E) = {} is invalid; expected a positive multiple of R = {}",
               s.num_experts, s.world_size);
  MOE_EP_CHECK(s.max_tokens_per_rank >= 1,
               "workspace max_tokens_per_rank (T) = {} is invalid; expected >= 1",
               s.max_tokens_per_rank);
  MOE_EP_CHECK(s.hidden_size >= 32 && s.hidden_size % 32 == 0,
               "workspace hidden_size (H) = {} is invalid; expected a positive multiple of 32",
               s.hidden_size);
  MOE_EP_CHECK(s.intermediate_size >= 32 && s.intermediate_size % 32 == 0,
               "workspace intermediate_size (I) = {} is invalid; expected a positive multiple of 32",
               s.intermediate_size);
  MOE_EP_CHECK(s.top_k >= 1, "workspace top_k (K) = {} is invalid; expected >= 1", s.top_k);
}

constexpr std::string_view kRegionNames[kNumWorkspaceRegions] = {
    "recv_counts", "expert_counts", "recv_token", "recv_slot_expert", "recv_slot_weight",
    "recv_codes",  "recv_scales",   "recv_global", "expert_h",        "expert_out",
    "combine"};

}  // namespace

std::string WorkspaceShape::str() const {
  return fmt::format("R={} E={} T={} H={} I={} K={}", world_size, num_experts,
                     max_tokens_per_rank, hidden_size, intermediate_size, top_k);
}

WorkspaceLayout workspace_layout(const WorkspaceShape& s) {
  check_shape(s);
  const int64_t R = s.world_size, T = s.max_tokens_per_rank, H = s.hidden_size,
                I = s.intermediate_size, K = s.top_k, E_loc = s.num_experts / s.world_size;
  const int64_t rows = mul(R, T, "rows (R*T)");
  const int64_t slots = mul(rows, K, "slots (R*T*K)");
  const int64_t sizes[kNumWorkspaceRegions] = {
      mul(4, R, "recv_counts"),
      mul(4, E_loc, "expert_counts"),
      mul(4, rows, "recv_token"),
      mul(4, slots, "recv_slot_expert"),
      mul(4, slots, "recv_slot_weight"),
      mul(rows, H, "recv_codes"),
      mul(rows, H / 16, "recv_scales"),
      mul(4, rows, "recv_global"),
      mul(slots, I + I / 16 + 4, "expert_h"),
      mul(mul(2, slots, "expert_out"), H, "expert_out"),
      mul(mul(2, T * K, "combine"), H, "combine"),
  };
  WorkspaceLayout layout;
  layout.shape = s;
  int64_t offset = 0;
  for (int i = 0; i < kNumWorkspaceRegions; ++i) {
    layout.regions[i] = {kRegionNames[i], offset, sizes[i]};
    MOE_EP_CHECK(align_up(sizes[i]) <= std::numeric_limits<int64_t>::max() - offset,
                 "workspace size overflows int64 for {}", s.str());
    offset += align_up(sizes[i]);
  }
  layout.total_bytes = offset;
  return layout;
}

int64_t workspace_bytes(int64_t world_size, int64_t num_experts, int64_t max_tokens_per_rank,
                        int64_t hidden_size, int64_t intermediate_size, int64_t top_k) {
  return workspace_layout({world_size, num_experts, max_tokens_per_rank, hidden_size,
                           intermediate_size, top_k})
      .total_bytes;
}

std::string_view workspace_formula() {
  return "sum of align256 over: 4R + 4E/R + 4RT + 8RTK + RTH + RTH/16 + 4RT "
         "+ RTK(I + I/16 + 4) + 2RTKH + 2TKH bytes (T = max_tokens_per_rank)";
}

std::string describe_workspace(const WorkspaceLayout& layout) {
  std::string s = fmt::format("workspace {} = {} bytes ({:.2f} MiB)\n", layout.shape.str(),
                              layout.total_bytes, layout.total_bytes / 1048576.0);
  for (const WorkspaceRegion& r : layout.regions)
    s += fmt::format("  {:<17} offset {:>14}  bytes {:>14}\n", r.name, r.offset, r.bytes);
  return s;
}

namespace {

template <class BytesOf>
std::string misfit(const WorkspaceShape& have, const WorkspaceShape& need, BytesOf bytes_of) {
  auto too_big = [&](const char* name, int64_t h, int64_t n) {
    return fmt::format("{} = {} exceeds the {} = {} the workspace was created for ({} -> {} "
                       "bytes needed, {} bytes there); the workspace is never reallocated: "
                       "reserve the largest shape first (Runtime::reserve_workspace)",
                       name, n, name, h, need.str(), bytes_of(need), bytes_of(have));
  };
  if (need.world_size != have.world_size)
    return fmt::format("world_size = {} differs from the workspace's world_size = {}",
                       need.world_size, have.world_size);
  if (need.num_experts / need.world_size > have.num_experts / have.world_size)
    return too_big("num_experts", have.num_experts, need.num_experts);
  if (need.max_tokens_per_rank > have.max_tokens_per_rank)
    return too_big("max_tokens_per_rank", have.max_tokens_per_rank, need.max_tokens_per_rank);
  if (need.hidden_size > have.hidden_size)
    return too_big("hidden_size", have.hidden_size, need.hidden_size);
  if (need.intermediate_size > have.intermediate_size)
    return too_big("intermediate_size", have.intermediate_size, need.intermediate_size);
  if (need.top_k > have.top_k) return too_big("top_k", have.top_k, need.top_k);
  return "";
}

}  // namespace

std::string workspace_misfit(const WorkspaceShape& have, const WorkspaceShape& need) {
  return misfit(have, need, [](const WorkspaceShape& s) { return workspace_layout(s).total_bytes; });
}

std::string device_workspace_misfit(const WorkspaceShape& have, const WorkspaceShape& need) {
  return misfit(have, need,
                [](const WorkspaceShape& s) { return device_workspace_layout(s).total_bytes; });
}

namespace {

constexpr std::string_view kDeviceRegionNames[kNumDeviceWorkspaceRegions] = {
    "sync",        "recv_counts", "recv_expert", "recv_weight", "recv_codes", "recv_scales",
    "recv_global", "send_codes",  "send_scales", "send_global", "expert_out", "combine"};

}  // namespace

DeviceWorkspaceLayout device_workspace_layout(const WorkspaceShape& s) {
  check_shape(s);
  const int64_t R = s.world_size, T = s.max_tokens_per_rank, H = s.hidden_size, K = s.top_k;
  const int64_t per_source = mul(T, K, "slots per source (T*K)");
  const int64_t slots = mul(R, per_source, "slot rows (R*T*K)");
  const int64_t sizes[kNumDeviceWorkspaceRegions] = {
      kDeviceSyncHeaderBytes + mul(4, R, "sync"),
      mul(4, R, "recv_counts"),
      mul(4, slots, "recv_expert"),
      mul(4, slots, "recv_weight"),
      mul(slots, H, "recv_codes"),
      mul(slots, H / 16, "recv_scales"),
      mul(4, slots, "recv_global"),
      mul(T, H, "send_codes"),
      mul(T, H / 16, "send_scales"),
      mul(4, T, "send_global"),
      mul(mul(2, slots, "expert_out"), H, "expert_out"),
      mul(mul(2, per_source, "combine"), H, "combine"),
  };
  DeviceWorkspaceLayout layout;
  layout.shape = s;
  layout.slots_per_source = per_source;
  layout.slot_rows = slots;
  int64_t offset = 0;
  for (int i = 0; i < kNumDeviceWorkspaceRegions; ++i) {
    layout.regions[i] = {kDeviceRegionNames[i], offset, sizes[i]};
    MOE_EP_CHECK(align_up(sizes[i]) <= std::numeric_limits<int64_t>::max() - offset,
                 "device workspace size overflows int64 for {}", s.str());
    offset += align_up(sizes[i]);
  }
  layout.total_bytes = offset;
  return layout;
}

std::string_view device_workspace_formula() {
  return "sum of align256 over: (64 + 4R) + 4R + 4S + 4S + SH + SH/16 + 4S + TH + TH/16 + 4T "
         "+ 2SH + 2TKH bytes (S = R*T*K slot rows, T = max_tokens_per_rank)";
}

std::string describe_device_workspace(const DeviceWorkspaceLayout& layout) {
  std::string s = fmt::format("device workspace {} = {} bytes ({:.2f} MiB), {} slot rows\n",
                              layout.shape.str(), layout.total_bytes,
                              layout.total_bytes / 1048576.0, layout.slot_rows);
  for (const WorkspaceRegion& r : layout.regions)
    s += fmt::format("  {:<17} offset {:>14}  bytes {:>14}\n", r.name, r.offset, r.bytes);
  return s;
}

Workspace::Workspace(WorkspaceLayout layout, std::vector<std::byte*> bases, int rank)
    : layout_(std::move(layout)), bases_(std::move(bases)), rank_(rank) {
  MOE_EP_ASSERT(static_cast<int64_t>(bases_.size()) == layout_.shape.world_size);
  MOE_EP_ASSERT(rank_ >= 0 && rank_ < static_cast<int>(bases_.size()));
}

Workspace::Workspace(DeviceWorkspaceLayout layout, std::vector<std::byte*> bases, int rank)
    : on_device_(true), device_layout_(std::move(layout)), bases_(std::move(bases)), rank_(rank) {
  MOE_EP_ASSERT(static_cast<int64_t>(bases_.size()) == device_layout_.shape.world_size);
  MOE_EP_ASSERT(rank_ >= 0 && rank_ < static_cast<int>(bases_.size()));
}

const WorkspaceLayout& Workspace::layout() const {
  MOE_EP_CHECK_CODE(!on_device_, ErrorCode::kInternal,
                    "Workspace::layout: this workspace lives on a GPU in the device layout; use "
                    "device_layout()");
  return layout_;
}

const DeviceWorkspaceLayout& Workspace::device_layout() const {
  MOE_EP_CHECK_CODE(on_device_, ErrorCode::kInternal,
                    "Workspace::device_layout: this workspace is host memory in the host layout; "
                    "use layout()");
  return device_layout_;
}

std::byte* Workspace::region(int rank, WorkspaceRegionId id) const {
  MOE_EP_ASSERT(!on_device_);
  MOE_EP_ASSERT(rank >= 0 && rank < static_cast<int>(bases_.size()));
  return bases_[rank] + layout_[id].offset;
}

}  // namespace moe_ep
