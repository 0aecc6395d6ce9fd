"""The value checks the forward skips for speed, run on request (``Layer.forward(...,
check_finite=True)`` or ``MOE_EP_CHECK_INPUTS=1``): non-finite values in ``x`` (bf16) or
``topk_weights`` and an expert id repeated in a row of ``topk_ids``. Each raises ValueError
naming the first bad element. numpy arrays (ml_dtypes bfloat16) and torch tensors (CPU or
CUDA: the check reads them back, a host sync)."""

from __future__ import annotations

from typing import Any

import numpy as np


def _host(t: Any) -> np.ndarray:
    """t as numpy on the host; bf16 as its uint16 bits (the exponent test below)."""
    if hasattr(t, "detach"):  # torch
        import torch
        t = t.detach()
        if t.dtype == torch.bfloat16:
            return t.view(torch.int16).cpu().numpy().view(np.uint16)
        return t.cpu().numpy()
    a = np.asarray(t)
    if a.dtype.name == "bfloat16":
        return a.view(np.uint16)
    return a


def _first(mask: np.ndarray) -> tuple:
    return tuple(int(i) for i in np.argwhere(mask)[0])


def check_forward_inputs(x: Any, topk_ids: Any, topk_weights: Any) -> None:
    xs = _host(x)
    if xs.dtype == np.uint16:
        bad = (xs & 0x7F80) == 0x7F80  # bf16 with an all-ones exponent: Inf or NaN
    else:
        bad = ~np.isfinite(xs.astype(np.float64))
    if bad.any():
        i = _first(bad)
        raise ValueError(f"moe_ep: x{list(i)} is not finite (check_finite); the forward would "
                         f"propagate it into y")
    w = _host(topk_weights).astype(np.float64)
    bad = ~np.isfinite(w)
    if bad.any():
        i = _first(bad)
        raise ValueError(f"moe_ep: topk_weights{list(i)} = {w[i]} is not finite (check_finite)")
    ids = _host(topk_ids).astype(np.int64)
    if ids.ndim != 2 or ids.shape[1] < 2:
        return
    order = np.sort(ids, axis=1)
    dup = (order[:, 1:] == order[:, :-1]) & (order[:, 1:] >= 0)
    if dup.any():
        r, c = _first(dup)
        e = int(order[r, c])
        slots = [int(k) for k in np.flatnonzero(ids[r] == e)]
        raise ValueError(f"moe_ep: topk_ids[{r}] holds expert {e} in slots {slots} (check_finite); "
                         f"expected distinct experts per token (the forward would count it twice)")
