// The symmetric workspace: one per process (per rank), shared by every layer, the same size and
// layout on every rank, so that rank r can address region X of rank q (NCCL symmetric windows
// with LSA pointers on GPUs; plain shared host memory for simulated ranks).
//
// Size: workspace_bytes(R, E, T, H, I, K), with T = max_tokens_per_rank, E_loc = E / R,
// S = R * T * K (the most expert slots one rank can receive: every slot of every token of
// every rank, duplicates included) and every region rounded up to kWorkspaceAlign = 256 bytes:
//
//   offset  region            bytes              contents (row-major)
//   ------  ----------------  -----------------  --------------------------------------------
//   0       recv_counts       4 R                int32 [R]: rows rank src sent here (written by
//                                                src into its slot, read and zeroed here)
//   +       expert_counts     4 E_loc            int32 [E_loc]: slots received per local expert
//                                                (zeroed after use)
//   +       recv_token        4 R T              int32 [R, T]: source row index t of each row
//   +       recv_slot_expert  4 R T K            int32 [R, T, K]: local expert of slot k, or -1
//                                                when slot k is not on this rank
//   +       recv_slot_weight  4 R T K            f32   [R, T, K]: topk weight of slot k
//   +       recv_codes        R T H              u8    [R, T, H]: mxfp4 recipe Q8 e4m3 codes;
//                                                nvfp4 recipe packed e2m1 rows of H/2 bytes
//   +       recv_scales       R T H/16           u8    mxfp4: [R, T, H/32] E8M0; nvfp4: [R, T,
//                                                H/16] e4m3 (the larger of the two is reserved)
//   +       recv_global       4 R T              f32   [R, T]: nvfp4 per-row encode factor g
//   +       expert_h          S (I + I/16 + 4)   h = Q8(SwiGLU) of every received slot between
//                                                the two expert GEMMs (codes, scales, global as
//                                                for recv_*); staged here by device backends.
//                                                The CPU backend keeps h in per-thread scratch
//                                                and leaves this region untouched.
//   +       expert_out        2 S H              bf16 [S, H]: o_k of each received slot, in
//                                                expert-major order, before it is sent back
//   +       combine           2 T K H            bf16 [T, K, H]: o_k of this rank's slot
//                                                (t, k), written by the rank that owns the
//                                                expert; summed here in slot order into y
//
// Dispatch is rank-major: rows from rank src occupy rows [src*T, src*T + count[src]) of every
// recv_* region, in increasing source row order. Buffers are fixed and maximum-size, so no
// forward allocates and the layer stays graph-capturable.
//
// Protocol of one forward (two barriers; the regions are clean between forwards):
//   1. every rank writes its rows for rank d into d's recv_* regions at [me*T, ...) and the
//      row count into d's recv_counts[me] (also when it is 0);           barrier "dispatch"
//   2. every rank reads and zeroes its recv_counts, computes its experts into expert_out and
//      writes each o_k into the source rank's combine[t, k];              barrier "combine"
//   3. every rank sums its combine rows in slot order k = 0..K-1 into y.
// The next forward's writes into a rank's regions happen only after that rank has passed the
// next "dispatch" barrier, that is after it finished reading them.
//
// A layer fits a workspace when R is equal and every other dimension is at most the one the
// workspace was created for; it then uses a prefix of each region (region offsets come from the
// workspace's own shape, so the zeroed count regions never move).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace moe_ep {

inline constexpr int64_t kWorkspaceAlign = 256;

struct WorkspaceShape {
  int64_t world_size = 1;           // R
  int64_t num_experts = 0;          // E, physical experts (E % R == 0)
  int64_t max_tokens_per_rank = 0;  // T
  int64_t hidden_size = 0;          // H (H % 32 == 0)
  int64_t intermediate_size = 0;    // I (I % 32 == 0)
  int64_t top_k = 0;                // K

  bool operator==(const WorkspaceShape&) const = default;
  std::string str() const;  // "R=2 E=16 T=64 H=256 I=128 K=4"
};

enum class WorkspaceRegionId : int {
  kRecvCounts,
  kExpertCounts,
  kRecvToken,
  kRecvSlotExpert,
  kRecvSlotWeight,
  kRecvCodes,
  kRecvScales,
  kRecvGlobal,
  kExpertH,
  kExpertOut,
  kCombine,
};
inline constexpr int kNumWorkspaceRegions = 11;

struct WorkspaceRegion {
  std::string_view name;  // "recv_counts", ...
  int64_t offset = 0;     // bytes from the workspace base, a multiple of kWorkspaceAlign
  int64_t bytes = 0;      // before alignment padding
};

struct WorkspaceLayout {
  WorkspaceShape shape;
  std::array<WorkspaceRegion, kNumWorkspaceRegions> regions{};
  int64_t total_bytes = 0;

  const WorkspaceRegion& operator[](WorkspaceRegionId id) const {
    return regions[static_cast<int>(id)];
  }
};

// Throws kInvalidArgument naming the field when a dimension is out of range (R, E, T, H, I, K
// >= 1, E % R == 0, H % 32 == 0, I % 32 == 0) or the size overflows int64.
WorkspaceLayout workspace_layout(const WorkspaceShape& shape);
int64_t workspace_bytes(int64_t world_size, int64_t num_experts, int64_t max_tokens_per_rank,
                        int64_t hidden_size, int64_t intermediate_size, int64_t top_k);

// The formula in one line, for reports.
std::string_view workspace_formula();
// A table of the regions (name, offset, bytes), one per line.
std::string describe_workspace(const WorkspaceLayout& layout);

// "" when a layer of `need` can run on a workspace created for `have`, else the reason naming
// the first dimension that does not fit.
std::string workspace_misfit(const WorkspaceShape& have, const WorkspaceShape& need);

// ---- The device workspace (CUDA ranks: NCCL symmetric windows, or simulated ranks on one GPU)
//
// Slot rows instead of token rows: rank src writes the row of its slot (t, k) into row
// src*C + t*K + k of the owner's recv_* regions (C = T*K, the most slots one rank can send to
// one owner), so the owner's receive buffer is fixed, maximum-size and rank-major, needs no
// counting pass on the sender, and the owner's local experts run as a world-size-1 layer over
// S = R*C "tokens" with top_k = 1 (recv_expert = -1 marks an empty row). Every region rounded up
// to kWorkspaceAlign:
//
//   region        bytes            contents (row-major)
//   ------------  ---------------  ------------------------------------------------------------
//   sync          64 + 4R          barrier and error words of this rank, then inbox u32 [R]
//   recv_counts   4R               int32 [R]: slot rows rank src covered (T_src*K), zeroed here
//   recv_expert   4S               int32 [R, C]: local expert of the row, -1 when empty (reset to
//                                  -1 after use: the region is all -1 between forwards)
//   recv_weight   4S               f32 [R, C]: topk weight of the slot
//   recv_codes    S H              u8 [R, C, H]: Q8 e4m3 codes (mxfp4), packed e2m1 rows of H/2
//                                  bytes (nvfp4)
//   recv_scales   S H/16           u8 [R, C, H/32] E8M0 (mxfp4) | [R, C, H/16] e4m3 (nvfp4)
//   recv_global   4S               f32 [R, C]: nvfp4 per-token encode factor g
//   send_codes    T H              this rank's quantized rows (the source of every put)
//   send_scales   T H/16
//   send_global   4T
//   expert_out    2 S H            bf16 [R, C, H]: o_k of each received row (the local layer's y)
//   combine       2 T K H          bf16 [T, K, H]: o_k of this rank's slot (t, k), written by the
//                                  owner of its expert; summed here in slot order into y
//
// Protocol of one forward (two device-side barriers; no host synchronization):
//   1. quantize x into send_*; every slot (t, k) with a valid id is put into the owner's recv_*
//      row; every rank's recv_counts[me] = T*K;                       barrier "dispatch"
//   2. the local world-size-1 layer runs over recv_* into expert_out; each non-empty row goes
//      back into combine[t, k] of its source; recv_expert rows and recv_counts are reset;
//                                                                    barrier "combine"
//   3. y[t] = bf16(sum over valid k, in slot order, of combine[t, k]).
// The local layer's own scratch (its routing, h and o for S rows) is per layer, outside.
enum class DeviceWorkspaceRegionId : int {
  kSync,
  kRecvCounts,
  kRecvExpert,
  kRecvWeight,
  kRecvCodes,
  kRecvScales,
  kRecvGlobal,
  kSendCodes,
  kSendScales,
  kSendGlobal,
  kExpertOut,
  kCombine,
};
inline constexpr int kNumDeviceWorkspaceRegions = 12;
inline constexpr int64_t kDeviceSyncHeaderBytes = 64;

struct DeviceWorkspaceLayout {
  WorkspaceShape shape;
  std::array<WorkspaceRegion, kNumDeviceWorkspaceRegions> regions{};
  int64_t total_bytes = 0;
  int64_t slots_per_source = 0;  // C = T*K
  int64_t slot_rows = 0;         // S = R*C

  const WorkspaceRegion& operator[](DeviceWorkspaceRegionId id) const {
    return regions[static_cast<int>(id)];
  }
};

// Same shape checks as workspace_layout.
DeviceWorkspaceLayout device_workspace_layout(const WorkspaceShape& shape);
std::string_view device_workspace_formula();
std::string describe_device_workspace(const DeviceWorkspaceLayout& layout);
// workspace_misfit with the byte counts of the device layout.
std::string device_workspace_misfit(const WorkspaceShape& have, const WorkspaceShape& need);

// One rank's view of the process's workspace. The memory belongs to the runtime's transport;
// on CPU runtimes every rank's workspace is host memory addressable from every rank. On CUDA
// runtimes (on_device()) the memory is on the rank's GPU in the device layout; base(peer) is
// null for peers that only device code reaches (NCCL LSA pointers, GIN).
class Workspace {
 public:
  Workspace(WorkspaceLayout layout, std::vector<std::byte*> bases, int rank);
  Workspace(DeviceWorkspaceLayout layout, std::vector<std::byte*> bases, int rank);

  bool on_device() const { return on_device_; }
  // The host layout; throws kInternal on a device workspace (use device_layout()).
  const WorkspaceLayout& layout() const;
  const DeviceWorkspaceLayout& device_layout() const;
  const WorkspaceShape& shape() const { return on_device_ ? device_layout_.shape : layout_.shape; }
  int64_t bytes() const { return on_device_ ? device_layout_.total_bytes : layout_.total_bytes; }
  int rank() const { return rank_; }
  int world_size() const { return static_cast<int>(bases_.size()); }

  // Region `id` of rank `rank` (this rank or a peer); host layout only.
  std::byte* region(int rank, WorkspaceRegionId id) const;
  std::byte* base(int rank) const { return bases_[rank]; }

 private:
  bool on_device_ = false;
  WorkspaceLayout layout_;
  DeviceWorkspaceLayout device_layout_;
  std::vector<std::byte*> bases_;
  int rank_;
};

}  // namespace moe_ep
