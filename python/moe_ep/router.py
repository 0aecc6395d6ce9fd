"""The DeepSeek V4 router from Python: gate logits -> (topk_ids, topk_weights), the library's
own router (include/moe_ep/router.h; docs/spec.md §9), bitwise the same as the CLI's and the device
routing stage's.

    ids, weights = moe_ep.route_deepseek_v4(logits, top_k=8, routed_scaling_factor=1.5,
                                            bias=e_score_correction_bias)
    # hash layers (layer_idx < num_hash_layers): ids from hash_table[token_ids]
    ids, weights = moe_ep.route_deepseek_v4(logits, top_k=8, layer_idx=0, num_hash_layers=3,
                                            token_ids=input_ids, hash_table=table)

Inputs: numpy arrays or torch tensors (logits f32 | bf16 [T, E], bias f32 [E], token_ids
int32 | int64 [T], hash_table int32 [vocab, K]; on the CPU also int64). The outputs are new
arrays of the inputs' kind on the logits' device (ids int32 unless ``ids_dtype`` says int64,
weights f32), or ``out=(ids, weights)``. ``eplb``: any object with ``remap(ids) -> physical ids``
(e.g. :class:`moe_ep.integrations.EplbTables`), applied to the routed ids.

CUDA tensors run the library's routing stage (:class:`moe_ep.RoutingStage`, one kernel on
torch's current stream, no host sync: capturable in a CUDA graph); one stage per (device, E, K,
scale, hash layers) is kept for the process. On the device, bad data (non-finite logits, token
ids outside the table) cannot raise at once: those slots become -1 and a sticky flag is set;
hold a :class:`moe_ep.RoutingStage` yourself to read it (``check_error_flags``), or route on
the CPU where the same inputs raise ValueError naming the entry.
"""

from __future__ import annotations

from typing import Any, Optional, Tuple

from moe_ep import _core  # numpy is imported on use: `import moe_ep` (and stub generation) needs none


def _is_torch(t: Any) -> bool:
    return type(t).__module__.startswith("torch")


_stages: dict = {}


def _device_stage(device: str, num_experts: int, top_k: int, scale: float,
                  num_hash_layers: int) -> "_core.RoutingStage":
    key = (device if ":" in device else device + ":0", num_experts, top_k, scale, num_hash_layers)
    stage = _stages.get(key)
    if stage is None:
        stage = _core.RoutingStage(key[0], num_experts, top_k, routed_scaling_factor=scale,
                                   num_hash_layers=num_hash_layers)
        _stages[key] = stage
    return stage


def route_deepseek_v4(logits: Any, top_k: int, *, routed_scaling_factor: float = 1.0,
                      bias: Any = None, layer_idx: int = 0, num_hash_layers: int = 0,
                      token_ids: Any = None, hash_table: Any = None, eplb: Any = None,
                      ids_dtype: Optional[str] = None,
                      out: Optional[Tuple[Any, Any]] = None) -> Tuple[Any, Any]:
    """(topk_ids [T, K], topk_weights f32 [T, K]) of ``logits`` [T, E]."""
    torch_in = _is_torch(logits)
    on_cuda = torch_in and logits.device.type == "cuda"
    if ids_dtype not in (None, "int32", "int64"):
        raise ValueError(f"moe_ep: ids_dtype = {ids_dtype!r}; expected 'int32' or 'int64'")
    shape = (int(logits.shape[0]) if len(logits.shape) else 0, int(top_k))
    if out is not None:
        ids, weights = out
    elif torch_in:
        import torch
        ids = torch.empty(shape, dtype=torch.int64 if ids_dtype == "int64" else torch.int32,
                          device=logits.device)
        weights = torch.empty(shape, dtype=torch.float32, device=logits.device)
    else:
        import numpy as np
        ids = np.empty(shape, np.int64 if ids_dtype == "int64" else np.int32)
        weights = np.empty(shape, np.float32)
    if on_cuda:
        stage = _device_stage(str(logits.device), int(logits.shape[1]), int(top_k),
                              float(routed_scaling_factor), int(num_hash_layers))
        stage.route(ids, logits, topk_weights=weights, layer_idx=int(layer_idx), bias=bias,
                    token_ids=token_ids, hash_table=hash_table)
    else:
        _core._route_deepseek_v4(logits, ids, weights, int(top_k), float(routed_scaling_factor),
                                 int(num_hash_layers), int(layer_idx), bias, token_ids, hash_table)
    if eplb is not None:
        remapped = eplb.remap(ids)
        if out is not None:
            ids[...] = remapped
        else:
            ids = remapped
    return ids, weights
