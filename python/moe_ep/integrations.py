"""Glue for inference engines (vLLM / SGLang style model code). Pure Python; importing this
module imports no engine and not torch (torch is imported inside the functions that need it).

- :data:`BACKENDS` / :func:`backend_spec`: the kernel families by name (``mxfp4``, ``nvfp4``).
- :func:`is_supported`: whether this build has an implementation of a family for a device of a
  given compute capability (the library's registered backend table).
- :func:`pack_fused_expert_weights`: an engine's fused-expert parameters after checkpoint
  loading (``w13_weight``, ``w13_weight_scale``, ``w2_weight``, ``w2_weight_scale`` and, for
  NVFP4, ``w13_weight_scale_2`` / ``w2_weight_scale_2``) -> :class:`moe_ep.WeightPack`.
- :func:`shared_expert_weights`: an engine's dense shared-expert MLP (``gate_up_proj`` or
  ``gate_proj`` + ``up_proj``, and ``down_proj``) -> ``moe_ep.Layer(shared_w13=, shared_w2=)``.
- :class:`SharedRuntime`: one reference-counted runtime per (device, world) for every MoE layer
  of a model, so they share one workspace.
- :class:`EplbTables`: EPLB remapping (``logical_to_physical``, ``replica_count``) and load
  counters as torch tensors, updated on the device without a host sync (graph-capturable).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any, Sequence, Tuple, Union

import moe_ep
from moe_ep.weights import WeightPack


@dataclass(frozen=True)
class BackendSpec:
    name: str                   # what users type: the kernel family / recipe
    weight_formats: Tuple[str, ...]
    hidden_align: int           # H % hidden_align == 0
    intermediate_align: int     # I % intermediate_align == 0
    description: str


BACKENDS = {
    "mxfp4": BackendSpec("mxfp4", ("mxfp4", "bf16"), 128, 128,
                         "MXFP4 weights, FP8 e4m3 activations with UE8M0 scales per 32 (SPEC.md §3)"),
    "nvfp4": BackendSpec("nvfp4", ("nvfp4", "mxfp4", "bf16"), 128, 128,
                         "NVFP4 weights and activations, e4m3 scales per 16 (SPEC.md §4)"),
}


def backend_spec(name: str) -> BackendSpec:
    try:
        return BACKENDS[name]
    except KeyError:
        raise ValueError(f"moe_ep: backend = {name!r} is not a kernel family; expected one of "
                         f"{', '.join(BACKENDS)}") from None


def is_supported(device_capability: Union[Tuple[int, int], int, None], backend: str = "mxfp4") -> bool:
    """True when this build registers an implementation of `backend` for a CUDA device of
    `device_capability` ((major, minor) as torch.cuda.get_device_capability() returns, or
    major*10+minor), or for the CPU when it is None."""
    backend_spec(backend)
    if isinstance(device_capability, tuple):
        cc = device_capability[0] * 10 + device_capability[1]
    else:
        cc = device_capability
    for b in moe_ep.info()["backends"]:
        if backend not in b["recipes"]:
            continue
        if cc is None and b["device"] == "cpu":
            return True
        if cc is not None and b["device"] == "cuda" and \
                b["min_compute_capability"] <= cc <= b["max_compute_capability"]:
            return True
    return False


def pack_fused_expert_weights(params: Any, weight_format: str = "mxfp4") -> WeightPack:
    """A WeightPack from an object (or dict) with an engine's fused-expert parameters:
    w13_weight [E, 2I, H/2] uint8, w13_weight_scale [E, 2I, H/32] (mxfp4) or [E, 2I, H/16]
    (nvfp4), w2_weight [E, H, I/2], w2_weight_scale; nvfp4 also w13_weight_scale_2 ([E, 2] or
    [E]) and w2_weight_scale_2 [E]. bf16: w13_weight [E, 2I, H], w2_weight [E, H, I]. torch
    Parameters are passed as their tensors (``.data``)."""
    def get(name: str) -> Any:
        v = params.get(name) if isinstance(params, dict) else getattr(params, name, None)
        if v is None:
            raise ValueError(f"moe_ep: the fused-expert parameters have no {name!r} "
                             f"(needed for {weight_format} weights)")
        return getattr(v, "data", v) if type(v).__name__ == "Parameter" else v

    if weight_format == "mxfp4":
        return WeightPack.mxfp4(get("w13_weight"), get("w13_weight_scale"), get("w2_weight"),
                                get("w2_weight_scale"))
    if weight_format == "nvfp4":
        return WeightPack.nvfp4(get("w13_weight"), get("w13_weight_scale"), get("w13_weight_scale_2"),
                                get("w2_weight"), get("w2_weight_scale"), get("w2_weight_scale_2"))
    if weight_format == "bf16":
        return WeightPack.bf16(get("w13_weight"), get("w2_weight"))
    raise ValueError(f"moe_ep: weight_format = {weight_format!r}; expected mxfp4, nvfp4 or bf16")


def shared_expert_weights(mlp: Any) -> Tuple[Any, Any]:
    """(shared_w13 [2Is, H], shared_w2 [H, Is]) of an engine's dense shared-expert MLP, for
    ``moe_ep.Layer(..., shared_w13=, shared_w2=)``: ``gate_up_proj.weight`` (gate rows first, as
    a merged column-parallel projection holds them) or ``gate_proj.weight`` and
    ``up_proj.weight`` (concatenated), and ``down_proj.weight``; bf16 (dequantize an FP8 shared
    expert first). Attributes or dict keys; torch Parameters are passed as their tensors."""
    def weight(name: str) -> Any:
        sub = mlp.get(name) if isinstance(mlp, dict) else getattr(mlp, name, None)
        if sub is None:
            return None
        w = sub.get("weight") if isinstance(sub, dict) else getattr(sub, "weight", sub)
        return getattr(w, "data", w) if type(w).__name__ == "Parameter" else w

    down = weight("down_proj")
    gate_up = weight("gate_up_proj")
    if gate_up is None:
        gate, up = weight("gate_proj"), weight("up_proj")
        if gate is None or up is None:
            raise ValueError("moe_ep: the shared-expert MLP has neither gate_up_proj nor gate_proj + up_proj")
        if hasattr(gate, "new_empty"):  # torch
            import torch
            gate_up = torch.cat([gate, up], dim=0)
        else:
            import numpy as np
            gate_up = np.concatenate([gate, up], axis=0)
    if down is None:
        raise ValueError("moe_ep: the shared-expert MLP has no down_proj")
    return gate_up, down


class SharedRuntime:
    """One runtime per process and world, shared by every MoE layer of a model::

        rt = SharedRuntime.acquire(device="cuda:0")   # in each layer's constructor
        ...
        rt.release()                                  # in each layer's destructor

    The count says how many layers hold it; the library's runtime is freed with the last."""

    _lock = threading.Lock()
    _instances: dict = {}

    def __init__(self, key: tuple, runtime: "moe_ep.Runtime") -> None:
        self.key = key
        self.runtime = runtime
        self.count = 0

    @classmethod
    def acquire(cls, device: str, world_size: int = 1, rank: int = 0, comm: Any = None,
                rendezvous: str = "", timeout_ms: int = 30000) -> "SharedRuntime":
        key = (device, world_size, rank, comm if isinstance(comm, (str, int, type(None))) else id(comm),
               rendezvous)
        with cls._lock:
            inst = cls._instances.get(key)
            if inst is None:
                inst = cls(key, moe_ep.Runtime.acquire(world_size=world_size, rank=rank, device=device,
                                                       comm=comm, rendezvous=rendezvous,
                                                       timeout_ms=timeout_ms))
                cls._instances[key] = inst
            inst.count += 1
            return inst

    def release(self) -> None:
        with self._lock:
            self.count -= 1
            if self.count == 0:
                self._instances.pop(self.key, None)
                self.runtime = None

    @property
    def workspace_bytes(self) -> int:
        return 0 if self.runtime is None else self.runtime.workspace_bytes


def make_placement(num_logical: int, replicated: Sequence[int]):
    """(logical_to_physical [L, max_replicas] int32 -1 padded, replica_count [L] int32) as numpy:
    physical p < L serves logical p; physical L + j serves logical replicated[j]
    (include/moe_ep/eplb.h)."""
    import numpy as np
    replicas = [[l] for l in range(num_logical)]
    for j, l in enumerate(replicated):
        if not 0 <= l < num_logical:
            raise ValueError(f"moe_ep: replicated[{j}] = {l}; expected a logical id in [0, {num_logical})")
        replicas[l].append(num_logical + j)
    width = max(len(r) for r in replicas)
    l2p = np.full((num_logical, width), -1, np.int32)
    for l, r in enumerate(replicas):
        l2p[l, :len(r)] = r
    return l2p, np.array([len(r) for r in replicas], np.int32)


class EplbTables:
    """EPLB on torch tensors (include/moe_ep/eplb.h's rule): slot (t, k) with logical id l goes
    to logical_to_physical[l, (t*K + k) % replica_count[l]]; ids < 0 or >= L become -1. With
    `recording` (a device tensor, so graphs can toggle it) each routed slot adds one to
    `load[phys]`. Everything stays on the device: no host sync, capturable in a CUDA graph."""

    def __init__(self, logical_to_physical: Any, replica_count: Any, device: Any = "cpu") -> None:
        import torch
        self.logical_to_physical = torch.as_tensor(logical_to_physical, dtype=torch.int32).to(device)
        self.replica_count = torch.as_tensor(replica_count, dtype=torch.int32).to(device)
        self.num_logical = self.logical_to_physical.shape[0]
        self.num_physical = int(self.logical_to_physical.max().item()) + 1
        self.load = torch.zeros(self.num_physical, dtype=torch.int32, device=device)
        self.recording = torch.zeros((), dtype=torch.int32, device=device)

    def remap(self, logical_ids: Any) -> Any:
        import torch
        T, K = logical_ids.shape
        ids = logical_ids.long()
        valid = (ids >= 0) & (ids < self.num_logical)
        safe = torch.where(valid, ids, torch.zeros_like(ids))
        slot = torch.arange(T * K, device=ids.device).view(T, K)
        col = slot % self.replica_count[safe].long()
        phys = self.logical_to_physical[safe, col].long()
        phys = torch.where(valid, phys, torch.full_like(phys, -1))
        hits = torch.zeros(self.num_physical + 1, dtype=torch.int32, device=ids.device)
        hits.index_add_(0, (phys + 1).flatten().clamp(min=0),
                        torch.ones(T * K, dtype=torch.int32, device=ids.device))
        self.load.add_(hits[1:] * self.recording)
        return phys.to(logical_ids.dtype)

    def reset_load(self) -> None:
        self.load.zero_()


