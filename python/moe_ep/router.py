"""The DeepSeek V4 router from Python: gate logits -> (topk_ids, topk_weights), the library's
own router (include/moe_ep/router.h; docs/spec.md §9), bitwise the same as the CLI's and the device
routing stage's.

    ids, weights = moe_ep.route_deepseek_v4(logits, top_k=8, routed_scaling_factor=1.5,
                                            bias=e_score_correction_bias)
    # hash layers (layer_idx < num_hash_layers): ids from hash_table[token_ids]
    ids, weights = moe_ep.route_deepseek_v4(logits, top_k=8, layer_idx=0, num_hash_layers=3,
                                            token_ids=input_ids, hash_table=table)

Inputs: numpy arrays or CPU torch tensors (logits f32 | bf16 [T, E], bias f32 [E], token_ids
int32 | int64 [T], hash_table int32 | int64 [vocab, K]). The outputs are new arrays of the
inputs' kind (ids int32 unless ``ids_dtype`` says int64, weights f32), or ``out=(ids,
weights)``. ``eplb``: any object with ``remap(ids) -> physical ids`` (e.g.
:class:`moe_ep.integrations.EplbTables`), applied to the routed ids.

CUDA tensors: not yet. The device routing stage is being made public C++ API; until the
package binds it, CUDA tensors raise :class:`moe_ep.UnsupportedError` (route on the CPU, or with
the engine's own router) rather than silently copying through the host, which would break CUDA
graph capture. The signature stays the same when they are supported.
"""

from __future__ import annotations

from typing import Any, Optional, Tuple

from moe_ep import _core  # numpy is imported on use: `import moe_ep` (and stub generation) needs none


def _is_torch(t: Any) -> bool:
    return type(t).__module__.startswith("torch")


def route_deepseek_v4(logits: Any, top_k: int, *, routed_scaling_factor: float = 1.0,
                      bias: Any = None, layer_idx: int = 0, num_hash_layers: int = 0,
                      token_ids: Any = None, hash_table: Any = None, eplb: Any = None,
                      ids_dtype: Optional[str] = None,
                      out: Optional[Tuple[Any, Any]] = None) -> Tuple[Any, Any]:
    """(topk_ids [T, K], topk_weights f32 [T, K]) of ``logits`` [T, E]."""
    torch_in = _is_torch(logits)
    if torch_in and logits.device.type != "cpu":
        raise _core.UnsupportedError(
            f"moe_ep.route_deepseek_v4: logits is on {logits.device}; the router runs on CPU "
            f"tensors in this version (the device routing stage is not yet bound to Python)")
    if ids_dtype not in (None, "int32", "int64"):
        raise ValueError(f"moe_ep: ids_dtype = {ids_dtype!r}; expected 'int32' or 'int64'")
    shape = (int(logits.shape[0]) if len(logits.shape) else 0, int(top_k))
    if out is not None:
        ids, weights = out
    elif torch_in:
        import torch
        ids = torch.empty(shape, dtype=torch.int64 if ids_dtype == "int64" else torch.int32)
        weights = torch.empty(shape, dtype=torch.float32)
    else:
        import numpy as np
        ids = np.empty(shape, np.int64 if ids_dtype == "int64" else np.int32)
        weights = np.empty(shape, np.float32)
    _core._route_deepseek_v4(logits, ids, weights, int(top_k), float(routed_scaling_factor),
                             int(num_hash_layers), int(layer_idx), bias, token_ids, hash_table)
    if eplb is not None:
        remapped = eplb.remap(ids)
        if out is not None:
            ids[...] = remapped
        else:
            ids = remapped
    return ids, weights
