// Parameters of the expert-parallel dispatch / combine / reduce kernels (kernels/ep_*.cuh),
// shared by every peer policy: NCCL LSA and GIN (cuda/nccl) and the one-GPU simulation
// (cuda/ep/sim_peers.cuh). Plain structs: built on the host, passed by value to the kernels.
//
// A launch holds 1 rank (one process per GPU) or up to kMaxLaunchRanks ranks (the simulation:
// every rank of the world in one launch, blockIdx.y = the rank's slot in `ranks`).
#pragma once

#include <cstddef>
#include <cstdint>

#include "moe_ep/workspace.h"

namespace moe_ep::cuda::ep {

inline constexpr int kMaxLaunchRanks = 8;  // one launch of the simulation; an NVLink domain of 8
inline constexpr int kEpThreads = 256;     // every EP kernel: 8 warps per CTA
inline constexpr int kEpWarps = kEpThreads / 32;

enum EpPhase : uint32_t { kPhaseNone = 0, kPhaseDispatch = 1, kPhaseCombine = 2 };
const char* phase_name(uint32_t phase);  // "dispatch", "combine"

// Sticky error bits of a rank (EpSync::error_flags); the host reads and clears them.
enum EpErrorBits : uint32_t {
  kEpErrorIdOutOfRange = 1u << 0,  // a topk id outside [-1, E) was treated as skipped
  kEpErrorPeerTimeout = 1u << 1,   // a barrier wait gave up (timeout_* say where)
};

// The head of a rank's sync region (DeviceWorkspaceRegionId::kSync); u32 inbox[R] follows
// (inbox[q] = the last barrier epoch rank q announced to this rank; one-GPU simulation only:
// NCCL LSA barriers keep their own inboxes in the device communicator's resources).
struct EpSync {
  uint32_t epoch;          // barriers this rank has passed (advanced on the device: graph safe)
  uint32_t blocks_done;    // CTAs of the running kernel that finished their share; the last one
                           // runs the cleanup and the barrier and resets it to 0
  uint32_t error_flags;    // EpErrorBits
  uint32_t timeout_phase;  // EpPhase of the first wait that gave up (0: none)
  int32_t timeout_peer;    // the rank it waited for
  uint32_t timeout_epoch;  // the epoch of that barrier
  uint32_t broken;         // 1 after a timeout: later barriers return at once (the world is broken)
  uint32_t reserved[9];
};
static_assert(sizeof(EpSync) == kDeviceSyncHeaderBytes, "EpSync is the sync region's header");

// What every rank of a world has in common: sizes and region offsets of the device workspace.
struct EpGeometry {
  int32_t world_size = 0;
  int32_t num_experts = 0;        // E (global)
  int32_t num_local_experts = 0;  // E_loc
  int32_t top_k = 0;              // K
  int32_t hidden = 0;             // H
  int32_t slots_per_source = 0;   // C = max_tokens_per_rank * K
  int32_t code_bytes = 0;         // one activation row: H (Q8 e4m3) or H/2 (packed e2m1)
  int32_t scale_bytes = 0;        // H/32 (E8M0) or H/16 (e4m3)
  int32_t has_global = 0;         // nvfp4: a per-row f32 encode factor travels too
  uint64_t timeout_ns = 0;        // bound of every barrier wait
  int64_t offset[kNumDeviceWorkspaceRegions] = {};  // DeviceWorkspaceRegionId -> byte offset

  constexpr int64_t at(DeviceWorkspaceRegionId id) const { return offset[static_cast<int>(id)]; }
};

// One rank's part of a launch.
struct EpRankArgs {
  std::byte* window = nullptr;       // this rank's workspace (its own address)
  const uint8_t* src_codes = nullptr;  // [T, code_bytes]: send_codes, or the caller's a
  const uint8_t* src_scales = nullptr; // [T, scale_bytes]
  const float* src_global = nullptr;   // [T] (nvfp4)
  int32_t src_in_window = 0;         // 1: src_* are this rank's send_* regions (GIN needs it)
  const void* topk_ids = nullptr;    // [T, K] int32 | int64, global ids
  int32_t ids_are_int64 = 0;
  const float* topk_weights = nullptr;  // [T, K]
  uint16_t* y = nullptr;             // [T, H] bf16
  const uint16_t* y_add = nullptr;   // [T, H] bf16 the reduce adds (the shared expert's o), or null
  int32_t rank = 0;
  int32_t num_tokens = 0;            // T of this forward
};

// A launch without its peer policy (the host side of EpLaunch<Peers>).
struct EpHostLaunch {
  EpGeometry geo;
  int32_t num_ranks = 1;       // entries of `ranks`
  int32_t blocks_per_rank = 1;
  uint32_t absent_ranks = 0;   // tests: bit q set makes rank q's CTAs return at once, a peer
                               // that never arrives (the others must time out, not hang)
  EpRankArgs ranks[kMaxLaunchRanks];
};

enum class EpStep { kDispatch, kCombine, kReduce };
const char* step_name(EpStep step);

// CTAs per rank of `step`: enough warps for the rows of the largest rank, at most ~2 per SM
// across the launch, at least 1 (a rank with T = 0 still signals and waits).
int ep_blocks_per_rank(EpStep step, const EpGeometry& geo, int64_t max_tokens_in_launch,
                       int num_ranks, int sm_count);

}  // namespace moe_ep::cuda::ep
