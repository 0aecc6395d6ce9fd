"""Glue for inference engines (vLLM / SGLang style model code). Pure Python; importing this
module imports no engine and not torch (torch is imported inside the functions that need it).

- :data:`BACKENDS` / :func:`backend_spec`: the kernel families by name (``mxfp4``, ``nvfp4``),
  each with its allowlist of CUDA compute capabilities.
- :func:`is_supported`: whether this build has an implementation of a family for a device of a
  given compute capability (the spec's allowlist and the library's registered backend table).
- :func:`validate_config`: an engine's MoE config checked against a backend before any weight
  is loaded, naming the field.
- :class:`MegaConfig`: the layer's knobs an engine sets once per model (intermediate size,
  top-k, clamp, fast math, input quantization, routed_scaling_factor) -> ``moe_ep.Layer``
  keyword arguments.
- :func:`dequantize_mxfp4`: MXFP4 blocks + UE8M0 scales -> bf16 (numpy or torch, any device),
  for a checkpoint in MXFP4 served by the nvfp4 path (quantized again by the layer).
- :func:`pack_fused_expert_weights`: an engine's fused-expert parameters after checkpoint
  loading (``w13_weight``, ``w13_weight_scale``, ``w2_weight``, ``w2_weight_scale`` and, for
  NVFP4, ``w13_weight_scale_2`` / ``w2_weight_scale_2``) -> :class:`moe_ep.WeightPack`.
- :func:`shared_expert_weights`: an engine's dense shared-expert MLP (``gate_up_proj`` or
  ``gate_proj`` + ``up_proj``, and ``down_proj``) -> ``moe_ep.Layer(shared_w13=, shared_w2=)``.
- :class:`SharedRuntime`: one reference-counted runtime per (device, world) for every MoE layer
  of a model, with the device always explicit, so they share one workspace.
- :class:`EplbTables`: EPLB remapping (``logical_to_physical``, ``replica_count``) and load
  counters as torch tensors, updated on the device without a host sync (graph-capturable).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any, Optional, Sequence, Tuple, Union

import moe_ep
from moe_ep.weights import WeightPack


@dataclass(frozen=True)
class BackendSpec:
    name: str                   # what users type: the kernel family / recipe
    weight_formats: Tuple[str, ...]
    hidden_align: int           # H % hidden_align == 0
    intermediate_align: int     # I % intermediate_align == 0
    description: str
    # CUDA compute capabilities (major*10 + minor) the family has kernels for: SM90 (Hopper)
    # only; the CPU backend runs every family.
    cuda_capabilities: Tuple[int, ...] = (90,)


BACKENDS = {
    "mxfp4": BackendSpec("mxfp4", ("mxfp4", "bf16"), 128, 128,
                         "MXFP4 weights, FP8 e4m3 activations with UE8M0 scales per 32 (docs/spec.md §3)"),
    "nvfp4": BackendSpec("nvfp4", ("nvfp4", "mxfp4", "bf16"), 128, 128,
                         "NVFP4 weights and activations, e4m3 scales per 16 (docs/spec.md §4)"),
}


def _cc(device_capability: Union[Tuple[int, int], int, None]):
    if isinstance(device_capability, tuple):
        return device_capability[0] * 10 + device_capability[1]
    return device_capability


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
    spec = backend_spec(backend)
    cc = _cc(device_capability)
    if cc is not None and cc not in spec.cuda_capabilities:
        return False
    for b in moe_ep.info()["backends"]:
        if backend not in b["recipes"]:
            continue
        if cc is None and b["device"] == "cpu":
            return True
        if cc is not None and b["device"] == "cuda" and \
                b["min_compute_capability"] <= cc <= b["max_compute_capability"]:
            return True
    return False


def validate_config(backend: str, *, num_experts: int, hidden_size: int, intermediate_size: int,
                    top_k: int, world_size: int = 1, weight_format: Optional[str] = None,
                    device_capability: Union[Tuple[int, int], int, None] = None) -> BackendSpec:
    """Checks an engine's MoE config against `backend` before any weight is loaded; returns
    the spec. ValueError naming the field and the expectation; UnsupportedError when the
    device (compute capability, or the CPU for None) has no implementation in this build."""
    spec = backend_spec(backend)
    def need(ok: bool, what: str) -> None:
        if not ok:
            raise ValueError(f"moe_ep: {what} (backend {backend})")
    need(num_experts > 0 and world_size > 0 and num_experts % world_size == 0,
         f"num_experts = {num_experts}; expected a positive multiple of world_size = {world_size}")
    need(hidden_size > 0 and hidden_size % spec.hidden_align == 0,
         f"hidden_size = {hidden_size}; expected a positive multiple of {spec.hidden_align}")
    need(intermediate_size > 0 and intermediate_size % spec.intermediate_align == 0,
         f"intermediate_size = {intermediate_size} (per rank); expected a positive multiple of "
         f"{spec.intermediate_align}")
    need(0 < top_k <= num_experts, f"top_k = {top_k}; expected 1..num_experts = {num_experts}")
    need(weight_format is None or weight_format in spec.weight_formats,
         f"weight_format = {weight_format!r}; expected one of {', '.join(spec.weight_formats)}")
    if not is_supported(device_capability, backend):
        where = "the CPU" if device_capability is None else f"compute capability {device_capability}"
        raise moe_ep.UnsupportedError(f"moe_ep: backend {backend} has no implementation for {where} "
                                      f"in this build (CUDA: {moe_ep.info()['cuda']}; kernels for "
                                      f"capabilities {list(spec.cuda_capabilities)})")
    return spec


@dataclass(frozen=True)
class MegaConfig:
    """The per-model knobs of every MoE layer: ``moe_ep.Layer(rt, **cfg.layer_kwargs(...))``."""
    intermediate_size: int
    top_k: int
    activation_clamp: Optional[float] = None  # swiglu_limit; None = no clamp
    fast_math: bool = False
    quantize_input: bool = True               # the layer quantizes bf16 x itself
    routed_scaling_factor: float = 1.0        # for a router that leaves it out
    exact_accumulation: bool = False
    recipe: str = "mxfp4"

    def layer_kwargs(self, *, num_experts: int, hidden_size: int, max_tokens_per_rank: int) -> dict:
        if not self.quantize_input:
            raise moe_ep.UnsupportedError("moe_ep: quantize_input = False (pre-quantized activations) "
                                          "is not bound in Python; pass bf16 x")
        return dict(num_experts=num_experts, hidden_size=hidden_size,
                    intermediate_size=self.intermediate_size, top_k=self.top_k,
                    max_tokens_per_rank=max_tokens_per_rank, recipe=self.recipe,
                    activation_clamp=self.activation_clamp, fast_math=self.fast_math,
                    exact_accumulation=self.exact_accumulation,
                    routed_scaling_factor=self.routed_scaling_factor)


_E2M1 = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0)


def dequantize_mxfp4(blocks: Any, scales: Any) -> Any:
    """MXFP4 -> bf16: `blocks` uint8 [..., K/2] packed e2m1 (low nibble = even element),
    `scales` uint8 [..., K/32] UE8M0 (2^(s-127); 0xFF is NaN and refused). Exact: every
    product of an e2m1 value and a power of two in bf16's range is a bf16. numpy (ml_dtypes
    bfloat16) or torch on the tensors' device."""
    if hasattr(blocks, "new_empty"):  # torch
        import torch
        b = blocks.view(torch.uint8) if blocks.dtype != torch.uint8 else blocks
        s = scales.view(torch.uint8) if scales.dtype != torch.uint8 else scales
        if bool((s == 0xFF).any()):
            raise ValueError("moe_ep: dequantize_mxfp4: a scale is 0xFF (NaN)")
        lut = torch.tensor(_E2M1, dtype=torch.float32, device=b.device)
        vals = torch.stack([lut[(b & 0xF).long()], lut[(b >> 4).long()]], dim=-1).flatten(-2)
        scale = torch.exp2(s.float() - 127.0).repeat_interleave(32, dim=-1)
        return (vals * scale).to(torch.bfloat16)
    import ml_dtypes
    import numpy as np
    b = np.asarray(blocks).view(np.uint8)
    s = np.asarray(scales).view(np.uint8)
    if (s == 0xFF).any():
        raise ValueError("moe_ep: dequantize_mxfp4: a scale is 0xFF (NaN)")
    lut = np.array(_E2M1, np.float32)
    vals = np.stack([lut[b & 0xF], lut[b >> 4]], axis=-1).reshape(*b.shape[:-1], b.shape[-1] * 2)
    scale = np.repeat(np.exp2(s.astype(np.float32) - 127.0), 32, axis=-1)
    return (vals * scale).astype(ml_dtypes.bfloat16)


def mxfp4_to_bf16_pack(params: Any) -> WeightPack:
    """An engine's MXFP4 fused-expert parameters as a bf16 WeightPack, for the nvfp4 path (the
    layer quantizes them to NVFP4 at load)."""
    src = pack_fused_expert_weights(params, "mxfp4")
    return WeightPack.bf16(dequantize_mxfp4(src.w13, src.w13_scale), dequantize_mxfp4(src.w2, src.w2_scale))


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

    @classmethod
    def from_process_group(cls, pg: Any, device: str, timeout_ms: int = 30000) -> "SharedRuntime":
        """The shared runtime whose world is a torch.distributed NCCL group (the engine's EP
        group): ``moe_ep.Runtime.from_process_group`` once, counted like :meth:`acquire`."""
        key = ("process_group", id(pg), device)
        with cls._lock:
            inst = cls._instances.get(key)
            if inst is None:
                inst = cls(key, moe_ep.Runtime.from_process_group(pg, device=device,
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


