"""``torch.ops.moe_ep.forward``: the layer as a torch custom op (torch.library), so a model
calling it is capturable in a CUDA graph and compiles under ``torch.compile(fullgraph=True)``
without graph breaks. Importing this module needs torch; ``import moe_ep`` does not.

A layer joins the op through :func:`register` (an integer handle, a constant for the
compiler)::

    handle = moe_ep.torch_ops.register(layer)
    y = torch.ops.moe_ep.forward(x, topk_ids, topk_weights, handle)

The real kernel (CPU and CUDA tensors: the library's forward on torch's current stream) writes
a fresh ``empty_like(x)``; the fake kernel only states that shape, dtype and device.
"""

from __future__ import annotations

import atexit
import itertools
import threading

import torch

from moe_ep._core import Layer

_layers: dict = {}
_next_handle = itertools.count(1)
_lock = threading.Lock()


def register(layer: Layer) -> int:
    """Make `layer` callable as torch.ops.moe_ep.forward(..., handle); returns the handle."""
    with _lock:
        handle = next(_next_handle)
        _layers[handle] = layer
    return handle


def unregister(handle: int) -> None:
    with _lock:
        _layers.pop(handle, None)


def unregister_all() -> None:
    """Drop every registered layer (their runtime is released with the last reference)."""
    with _lock:
        _layers.clear()


atexit.register(unregister_all)  # layers die before the interpreter tears the extension down


def _layer(handle: int) -> Layer:
    try:
        return _layers[handle]
    except KeyError:
        raise ValueError(f"moe_ep: layer handle = {handle} is not registered; expected a value "
                         f"returned by moe_ep.torch_ops.register") from None


@torch.library.custom_op("moe_ep::forward", mutates_args=(), device_types=("cpu", "cuda"))
def forward(x: torch.Tensor, topk_ids: torch.Tensor, topk_weights: torch.Tensor,
            layer: int) -> torch.Tensor:
    """y = layer(x bf16 [T, H], topk_ids int32|int64 [T, K], topk_weights f32 [T, K])."""
    y = torch.empty_like(x, memory_format=torch.contiguous_format)
    _layer(layer).forward(x, topk_ids, topk_weights, out=y)
    return y


@forward.register_fake
def _forward_fake(x, topk_ids, topk_weights, layer):
    return torch.empty_like(x, memory_format=torch.contiguous_format)
