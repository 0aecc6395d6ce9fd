#include "cuda/ep/ep_params.h"

#include <algorithm>

namespace moe_ep::cuda::ep {

const char* phase_name(uint32_t phase) {
  switch (phase) {
    case kPhaseDispatch: return "dispatch";
    case kPhaseCombine: return "combine";
    default: return "none";
  }
}

const char* step_name(EpStep step) {
  switch (step) {
    case EpStep::kDispatch: return "dispatch";
    case EpStep::kCombine: return "combine";
    case EpStep::kReduce: return "reduce";
  }
  return "unknown";
}

int ep_blocks_per_rank(EpStep step, const EpGeometry& geo, int64_t max_tokens_in_launch,
                       int num_ranks, int sm_count) {
  int64_t work = 0;  // warps (dispatch, combine) or threads / kEpThreads (reduce) of one rank
  switch (step) {
    case EpStep::kDispatch:  // a warp per slot
      work = (max_tokens_in_launch * geo.top_k + kEpWarps - 1) / kEpWarps;
      break;
    case EpStep::kCombine:  // a warp per received row; any source may send up to C rows
      work = (static_cast<int64_t>(geo.world_size) * geo.slots_per_source + kEpWarps - 1) / kEpWarps;
      break;
    case EpStep::kReduce:  // a thread per 8 columns of a token
      work = (max_tokens_in_launch * (geo.hidden / 8) + kEpThreads - 1) / kEpThreads;
      break;
  }
  const int64_t cap = std::max<int64_t>(1, 2 * static_cast<int64_t>(std::max(sm_count, 1)) /
                                               std::max(num_ranks, 1));
  return static_cast<int>(std::clamp<int64_t>(work, 1, cap));
}

}  // namespace moe_ep::cuda::ep
