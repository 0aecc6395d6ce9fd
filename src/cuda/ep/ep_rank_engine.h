// One expert-parallel CUDA rank's local half of a forward, shared by the NCCL layer
// (cuda/nccl/nccl_ep_layer.cpp) and the one-GPU simulation (cuda/ep/sim_group.cpp):
//
//   prepare()            x -> Q8 / NVFP4 rows in send_* (or the caller's a), and the rank's
//                        EpRankArgs for the dispatch / combine / reduce launches;
//   run_local_experts()  the rank's E_loc experts through the SM90 expert engine (the same
//                        config, plan and launches as the world-size-1 layer) over its receive
//                        buffer: S = R*C rows (C = T*K), top_k = 1, caller-quantized a =
//                        recv_codes, topk_ids = recv_expert (-1: empty row), topk_weights =
//                        recv_weight; its output rows are the per-slot outputs o_k in expert_out.
//
// The engine's combine with top_k = 1 gives bf16(0 + fp32(o_k)) = o_k exactly, and the reduce
// sums the o_k in slot order like the world-size-1 combine, so a rank's y equals, bit for bit,
// the world-size-1 CUDA layer on the global batch as long as that layer's per-row arithmetic
// does not depend on which other rows share a launch.
//
// A shared expert (desc.shared_intermediate_size > 0; every rank holds its weights) runs over
// the rank's own x on a second stream forked in prepare(), into this engine's own h / o buffers
// (max_tokens_per_rank rows; per layer, like the local experts' scratch); the caller's stream
// waits for it (wait_shared_expert) before the reduce, which adds o (EpRankArgs::y_add).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include <cuda_runtime.h>

#include "cuda/ep/ep_params.h"
#include "cuda/side_stream.h"
#include "cuda/sm90_experts.h"
#include "cuda/sm90_shared_expert.h"
#include "moe_ep/layer.h"
#include "moe_ep/workspace.h"

namespace moe_ep::cuda::ep {

class EpRankEngine {
 public:
  // `layout` and `window`: the rank's device workspace (created for a shape that fits this
  // layer: workspace_misfit). local_weights: the rank's E_loc experts. Synchronizes the device.
  EpRankEngine(Device device, int world_size, int rank, const MoeDesc& desc,
               const KernelOverrides& overrides, const WeightPack& local_weights,
               const DeviceWorkspaceLayout& layout, std::byte* window, int64_t timeout_ms);
  ~EpRankEngine();

  const EpGeometry& geometry() const { return geo_; }
  int64_t slot_rows() const { return slot_rows_; }  // S = R*C of this layer
  std::byte* window() const { return window_; }
  Sm90ExpertEngine& local_experts() const { return *local_; }

  EpRankArgs prepare(const ForwardArgs& args, cudaStream_t stream);
  void run_local_experts(cudaStream_t stream);
  // Before the reduce step on `stream`: waits for the shared expert that prepare() forked for
  // `args` (its y_add; nothing to wait for without one, e.g. a rank taking part with no tokens).
  void wait_shared_expert(const EpRankArgs& args, cudaStream_t stream);
  // The local experts' selected config, and the shared expert's entry when there is one.
  SelectedConfig selected() const;

  // The sync head of the rank's workspace (synchronizes the device). clear_errors() resets the
  // sticky bits and the timeout record, not the broken state.
  EpSync read_sync() const;
  void clear_errors();

  // Fills a freshly allocated device workspace: recv_expert all -1, everything else 0.
  static void init_window(const DeviceWorkspaceLayout& layout, std::byte* window);

 private:
  Device device_;
  MoeDesc desc_;
  EpGeometry geo_;
  int64_t slot_rows_ = 0;
  std::byte* window_ = nullptr;
  std::unique_ptr<Sm90ExpertEngine> local_;
  std::unique_ptr<Sm90SharedExpert> shared_;  // null without a shared expert
  std::unique_ptr<SideStream> side_;
  DeviceBuffer shared_h_, shared_o_;          // [T, Is], [T, H] bf16
  cudaEvent_t shared_done_ = nullptr;         // to wait for before the reduce; null: nothing
};

// "rank r timed out in phase P (barrier e) waiting for rank q ..." for a sync head with a
// recorded timeout; "" without one.
std::string describe_timeout(const EpSync& sync, int rank, int64_t timeout_ms, const char* barrier_kind);

}  // namespace moe_ep::cuda::ep
