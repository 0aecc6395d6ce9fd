// The NCCL peer policies of the EP kernels (ep/ep_dispatch_combine.cuh):
//
//   LsaPeers  every rank in the LSA team (one NVLink domain): peer windows through
//             ncclGetPeerPointer, plain stores over NVLink, and the device communicator's LSA
//             barrier session (arrive with release order, then a wait on the session's inboxes
//             bounded by globaltimer instead of ncclLsaBarrierSession::wait, which has no
//             timeout in NCCL 2.28).
//   GinPeers  ranks beyond the LSA team: ncclGin puts from this rank's window into the peer's
//             window, and a barrier of signal increments (one ncclGin signal to every peer,
//             then a bounded poll of readSignal against the expected count kept in the
//             signal's shadow). Compiled, not run on the machines this was written on.
#pragma once

#include <nccl.h>
#include <nccl_device.h>

#include "cuda/ep/ep_dispatch_combine.cuh"

namespace moe_ep::cuda::ep {

static_assert(NCCL_MAJOR == 2 && NCCL_MINOR == 28,
              "LsaPeers::barrier reads the LSA barrier session's inboxes as laid out in NCCL 2.28");

struct LsaPeers {
  ncclDevComm comm;
  ncclWindow_t window;

  __device__ std::byte* peer(int q) const {
    return static_cast<std::byte*>(ncclGetPeerPointer(window, 0, q));
  }
  __device__ void put_row(const EpRankArgs&, const EpGeometry&, int q, int64_t dst_offset,
                          const void* src, int64_t, int bytes, int lane) const {
    warp_copy(peer(q) + dst_offset, static_cast<const std::byte*>(src), bytes, lane);
  }
  template <class T>
  __device__ void put_value(const EpRankArgs&, int q, int64_t dst_offset, T value) const {
    static_assert(sizeof(T) == 4, "4-byte values");
    *reinterpret_cast<volatile T*>(peer(q) + dst_offset) = value;
  }
  __device__ void fence_before_arrive() const { __threadfence_system(); }

  __device__ void barrier(const EpRankArgs&, const EpGeometry& g, EpSync* sync, uint32_t phase) const {
    ncclCoopCta cta;
    __shared__ uint32_t skip;
    if (threadIdx.x == 0) skip = *reinterpret_cast<volatile uint32_t*>(&sync->broken);
    __syncthreads();
    if (skip) return;
    ncclLsaBarrierSession<ncclCoopCta> bar(cta, comm, ncclTeamTagLsa{}, /*index=*/0);
    bar.arrive(cta, ::cuda::memory_order_release);
    const uint32_t target = bar.epoch + 1;
    for (int i = threadIdx.x; i < bar.team.nRanks - 1; i += blockDim.x) {
      const int lsa_peer = i + (bar.team.rank <= i ? 1 : 0);
      const uint32_t* inbox = bar.ucInbox(bar.team.rank, lsa_peer);
      const uint64_t start = ptx::globaltimer_ns();
      while (!ptx::epoch_reached(ptx::ld_acquire<ptx::Scope::kSystem>(inbox), target)) {
        if (ptx::globaltimer_ns() - start > g.timeout_ns) {
          record_timeout(sync, phase, comm.rank - comm.lsaRank + lsa_peer, sync->epoch + 1);
          break;
        }
        __nanosleep(64);
      }
    }
    bar.epoch += 1;
    __syncthreads();
    if (threadIdx.x == 0) sync->epoch += 1;
  }  // ~ncclLsaBarrierSession stores the epoch for the next session
};

struct GinPeers {
  static constexpr ncclGinSignal_t kBarrierSignal = 0;
  ncclDevComm comm;
  ncclWindow_t window;

  // Needs src in this rank's window (src_offset >= 0): the host refuses GIN with caller-given a.
  __device__ void put_row(const EpRankArgs&, const EpGeometry&, int q, int64_t dst_offset,
                          const void*, int64_t src_offset, int bytes, int) const {
    ncclGin gin(comm, 0);
    gin.put(ncclTeamWorld(comm), q, window, dst_offset, window, src_offset, bytes, ncclGin_None{},
            ncclGin_None{}, ncclCoopWarp{});
  }
  template <class T>
  __device__ void put_value(const EpRankArgs&, int q, int64_t dst_offset, T value) const {
    ncclGin gin(comm, 0);
    gin.putValue(ncclTeamWorld(comm), q, window, dst_offset, value);
  }
  __device__ void fence_before_arrive() const { __threadfence_system(); }

  __device__ void barrier(const EpRankArgs& me, const EpGeometry& g, EpSync* sync, uint32_t phase) const {
    __shared__ uint32_t skip;
    if (threadIdx.x == 0) skip = *reinterpret_cast<volatile uint32_t*>(&sync->broken);
    __syncthreads();
    if (skip) return;
    ncclGin gin(comm, 0);
    gin.flush(ncclCoopCta{});
    // A signal after this rank's puts on the same context reaches each peer after them.
    for (int q = threadIdx.x; q < g.world_size; q += blockDim.x)
      if (q != me.rank) gin.signal(ncclTeamWorld(comm), q, ncclGin_SignalInc{kBarrierSignal});
    __syncthreads();
    if (threadIdx.x == 0) {
      uint64_t* expected = gin.getSignalShadowPtr(kBarrierSignal);
      const uint64_t want = *expected + static_cast<uint64_t>(g.world_size - 1);
      const uint64_t start = ptx::globaltimer_ns();
      while (gin.readSignal(kBarrierSignal) < want) {
        if (ptx::globaltimer_ns() - start > g.timeout_ns) {
          record_timeout(sync, phase, -1, sync->epoch + 1);  // signals do not say who is missing
          break;
        }
        __nanosleep(64);
      }
      *expected = want;
      sync->epoch += 1;
    }
    __syncthreads();
  }
};

}  // namespace moe_ep::cuda::ep
