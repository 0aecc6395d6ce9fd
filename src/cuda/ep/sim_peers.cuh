// The peer policy of the one-GPU simulation: every rank's workspace is a device allocation of
// this process on the same GPU, so a peer's window is a plain pointer and flags need GPU scope
// only. The kernels are the ones the NCCL policies run (ep/ep_dispatch_combine.cuh).
#pragma once

#include "cuda/ep/ep_dispatch_combine.cuh"

namespace moe_ep::cuda::ep {

struct SimPeers {
  std::byte* windows[kMaxLaunchRanks];

  __device__ std::byte* window(int peer) const { return windows[peer]; }

  __device__ void put_row(const EpRankArgs&, const EpGeometry&, int peer, int64_t dst_offset,
                          const void* src, int64_t, int bytes, int lane) const {
    warp_copy(window(peer) + dst_offset, static_cast<const std::byte*>(src), bytes, lane);
  }
  template <class T>
  __device__ void put_value(const EpRankArgs&, int peer, int64_t dst_offset, T value) const {
    static_assert(sizeof(T) == 4, "4-byte values");
    *reinterpret_cast<T*>(window(peer) + dst_offset) = value;
  }
  __device__ void fence_before_arrive() const { __threadfence(); }
  __device__ void barrier(const EpRankArgs& me, const EpGeometry& g, EpSync* sync, uint32_t phase) const {
    flag_barrier<ptx::Scope::kGpu>([this](int q) { return window(q); }, me, g, sync, phase);
  }
};

}  // namespace moe_ep::cuda::ep
