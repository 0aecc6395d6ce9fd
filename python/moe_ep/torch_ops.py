"""The layer as torch custom ops (torch.library), so a model calling them is capturable in a
CUDA graph and compiles under ``torch.compile(fullgraph=True)`` without graph breaks. Importing
this module needs torch; ``import moe_ep`` does not.

A layer joins the ops through :func:`register`, by an integer handle (a constant for the
compiler) and, when given, a string name (an engine's ``layer_name``, resolved the way vLLM's
forward context resolves it)::

    handle = moe_ep.torch_ops.register(layer, name="model.layers.3.mlp.experts")
    y = torch.ops.moe_ep.forward(x, topk_ids, topk_weights, handle)       # allocates y
    torch.ops.moe_ep.forward_out(x, topk_ids, topk_weights, handle, out)  # writes out in place
    y = torch.ops.moe_ep.forward_named(x, topk_ids, topk_weights, "model.layers.3.mlp.experts")
    torch.ops.moe_ep.forward_named_out(x, topk_ids, topk_weights, "model.layers.3.mlp.experts", out)

``torch.ops.moe_ep.route_deepseek_v4(logits, top_k, routed_scaling_factor, bias, layer_idx,
num_hash_layers, token_ids, hash_table) -> (ids int32, weights f32)`` is the router (CPU and CUDA
tensors; see :func:`moe_ep.route_deepseek_v4`) as an op, so a compiled model calls it without a graph
break. ``forward_out`` / ``forward_named_out`` declare ``mutates_args=("out",)``. Names resolve
through :func:`set_layer_resolver` when an engine installs one (e.g. a lookup in its forward
context's layer table), else through this module's registry. The real kernels (CPU and CUDA
tensors: the library's forward on torch's current stream) run the layer; the fake kernels only
state shapes.
"""

from __future__ import annotations

import atexit
import itertools
import threading
from typing import Callable, Optional, Tuple

import torch

from moe_ep._core import Layer
from moe_ep.router import route_deepseek_v4 as _route

_layers: dict = {}
_names: dict = {}
_next_handle = itertools.count(1)
_lock = threading.Lock()
_resolver: Optional[Callable[[str], Layer]] = None


def register(layer: Layer, name: Optional[str] = None) -> int:
    """Make `layer` callable through the ops by the returned handle and, with `name`, by name
    (a name registered again points at the new layer)."""
    with _lock:
        handle = next(_next_handle)
        _layers[handle] = layer
        if name is not None:
            _names[str(name)] = handle
    return handle


def unregister(handle_or_name) -> None:
    with _lock:
        if isinstance(handle_or_name, str):
            handle_or_name = _names.pop(handle_or_name, None)
        else:
            for n in [n for n, h in _names.items() if h == handle_or_name]:
                del _names[n]
        _layers.pop(handle_or_name, None)


def unregister_all() -> None:
    """Drop every registered layer (their runtime is released with the last reference)."""
    with _lock:
        _layers.clear()
        _names.clear()


def set_layer_resolver(resolver: Optional[Callable[[str], Layer]]) -> None:
    """Resolve names with `resolver(name) -> moe_ep.Layer` (an engine's forward context) instead
    of this module's registry; None restores the registry."""
    global _resolver
    _resolver = resolver


atexit.register(unregister_all)  # layers die before the interpreter tears the extension down


def lookup(handle: int) -> Layer:
    try:
        return _layers[handle]
    except KeyError:
        raise ValueError(f"moe_ep: layer handle = {handle} is not registered; expected a value "
                         f"returned by moe_ep.torch_ops.register") from None


def lookup_name(name: str) -> Layer:
    if _resolver is not None:
        layer = _resolver(name)
        if layer is None:
            raise ValueError(f"moe_ep: layer_name = {name!r} is unknown to the installed resolver")
        return layer
    handle = _names.get(name)
    if handle is None:
        raise ValueError(f"moe_ep: layer_name = {name!r} is not registered; expected a name "
                         f"given to moe_ep.torch_ops.register(layer, name=...)")
    return lookup(handle)


_layer = lookup  # earlier name


def _new_out(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x, memory_format=torch.contiguous_format)


@torch.library.custom_op("moe_ep::forward", mutates_args=(), device_types=("cpu", "cuda"))
def forward(x: torch.Tensor, topk_ids: torch.Tensor, topk_weights: torch.Tensor,
            layer: int) -> torch.Tensor:
    """y = layer(x bf16 [T, H], topk_ids int32|int64 [T, K], topk_weights f32 [T, K])."""
    y = _new_out(x)
    lookup(layer).forward(x, topk_ids, topk_weights, out=y)
    return y


@forward.register_fake
def _forward_fake(x, topk_ids, topk_weights, layer):
    return _new_out(x)


@torch.library.custom_op("moe_ep::forward_out", mutates_args=("out",), device_types=("cpu", "cuda"))
def forward_out(x: torch.Tensor, topk_ids: torch.Tensor, topk_weights: torch.Tensor, layer: int,
                out: torch.Tensor) -> None:
    """The layer's y written into `out` (bf16 [T, H], contiguous)."""
    lookup(layer).forward(x, topk_ids, topk_weights, out=out)


@forward_out.register_fake
def _forward_out_fake(x, topk_ids, topk_weights, layer, out):
    return None


@torch.library.custom_op("moe_ep::forward_named", mutates_args=(), device_types=("cpu", "cuda"))
def forward_named(x: torch.Tensor, topk_ids: torch.Tensor, topk_weights: torch.Tensor,
                  layer_name: str) -> torch.Tensor:
    """forward of the layer registered (or resolved) under `layer_name`."""
    y = _new_out(x)
    lookup_name(layer_name).forward(x, topk_ids, topk_weights, out=y)
    return y


@forward_named.register_fake
def _forward_named_fake(x, topk_ids, topk_weights, layer_name):
    return _new_out(x)


@torch.library.custom_op("moe_ep::forward_named_out", mutates_args=("out",),
                         device_types=("cpu", "cuda"))
def forward_named_out(x: torch.Tensor, topk_ids: torch.Tensor, topk_weights: torch.Tensor,
                      layer_name: str, out: torch.Tensor) -> None:
    lookup_name(layer_name).forward(x, topk_ids, topk_weights, out=out)


@forward_named_out.register_fake
def _forward_named_out_fake(x, topk_ids, topk_weights, layer_name, out):
    return None


@torch.library.custom_op("moe_ep::route_deepseek_v4", mutates_args=(), device_types=("cpu", "cuda"))
def route_deepseek_v4(logits: torch.Tensor, top_k: int, routed_scaling_factor: float,
                      bias: Optional[torch.Tensor], layer_idx: int, num_hash_layers: int,
                      token_ids: Optional[torch.Tensor],
                      hash_table: Optional[torch.Tensor]) -> Tuple[torch.Tensor, torch.Tensor]:
    return _route(logits, top_k, routed_scaling_factor=routed_scaling_factor, bias=bias,
                  layer_idx=layer_idx, num_hash_layers=num_hash_layers, token_ids=token_ids,
                  hash_table=hash_table)


@route_deepseek_v4.register_fake
def _route_fake(logits, top_k, routed_scaling_factor, bias, layer_idx, num_hash_layers, token_ids,
                hash_table):
    shape = (logits.shape[0], top_k)
    return (logits.new_empty(shape, dtype=torch.int32), logits.new_empty(shape, dtype=torch.float32))
