"""Joining an existing ``torch.distributed`` process group: the engine's expert-parallel group
becomes the runtime's world, on the group's own NCCL communicator (nothing is bootstrapped a
second time)::

    torch.distributed.init_process_group("nccl", device_id=torch.device("cuda", local_rank))
    rt = moe_ep.Runtime.from_process_group(ep_group, device=f"cuda:{local_rank}")

The communicator is ``ProcessGroupNCCL._comm_ptr()`` (torch >= 2.3); a group whose
communicator is not made yet (torch creates it lazily, at the first collective, unless
``init_process_group(device_id=...)`` asked for it eagerly) gets one through a barrier on the
device first. The process group must outlive the runtime: the library borrows its
communicator. Import torch before moe_ep touches NCCL (``moe_ep.info()``), so both use torch's
libnccl.so.2.
"""

from __future__ import annotations

from typing import Any, Optional

from moe_ep import _core


def nccl_comm_ptr(pg: Any, device: Any) -> int:
    """The ncclComm_t (as an int) of process group ``pg``'s NCCL backend on ``device``."""
    import torch
    import torch.distributed as dist
    dev = torch.device(device)
    try:
        backend = pg._get_backend(dev)
    except Exception as e:  # noqa: BLE001 - torch raises RuntimeError or ValueError by version
        raise ValueError(f"moe_ep: the process group has no backend for {dev} ({e}); expected "
                         f"one made with backend='nccl'") from None
    get = None
    for attr in ("_comm_ptr", "_get_comm_ptr"):
        if callable(getattr(backend, attr, None)):
            get = getattr(backend, attr)
            break
    if get is None:
        raise _core.UnsupportedError(
            f"moe_ep: {type(backend).__name__} exposes no communicator pointer (_comm_ptr: "
            f"torch >= 2.3 with backend='nccl'; this is torch {torch.__version__})")
    ptr = int(get())
    if ptr == 0:  # made lazily by torch: the first collective on the device makes it
        dist.barrier(group=pg, device_ids=[dev.index if dev.index is not None else 0])
        torch.cuda.synchronize(dev)
        ptr = int(get())
    if ptr == 0:
        raise RuntimeError("moe_ep: the process group's NCCL communicator is still null after a barrier")
    return ptr


def runtime_from_process_group(pg: Any = None, device: Optional[Any] = None,
                               timeout_ms: int = 30000) -> "_core.Runtime":
    """``moe_ep.Runtime`` whose world is process group ``pg`` (default: the default group):
    world_size = pg.size(), rank = the group rank, on ``device`` ('cuda:N'; default: torch's
    current device), over the group's own NCCL communicator."""
    import torch
    import torch.distributed as dist
    if not dist.is_available() or not dist.is_initialized():
        raise RuntimeError("moe_ep: torch.distributed is not initialized; call "
                           "torch.distributed.init_process_group('nccl') first")
    if pg is None:
        pg = dist.group.WORLD
    if device is None:
        device = f"cuda:{torch.cuda.current_device()}"
    dev = torch.device(device)
    if dev.type != "cuda":
        raise ValueError(f"moe_ep: device = {device!r}; a process group's NCCL runtime needs 'cuda:N'")
    index = dev.index if dev.index is not None else torch.cuda.current_device()
    comm = nccl_comm_ptr(pg, torch.device("cuda", index))
    return _core.Runtime.acquire(world_size=dist.get_world_size(pg), rank=dist.get_rank(pg),
                                 device=f"cuda:{index}", comm=comm, timeout_ms=timeout_ms)
