"""moe_ep: expert-parallel Mixture-of-Experts inference with FP4 expert weights.

The C++ library is the product; this package is its binding (the extension ``moe_ep._core``)
plus pure-Python helpers. Tensors are torch tensors (CPU or CUDA) or numpy arrays (CPU),
passed zero-copy through DLPack::

    rt = moe_ep.Runtime.acquire(device="cuda:0")
    layer = moe_ep.Layer(rt, num_experts=E, hidden_size=H, intermediate_size=I, top_k=K,
                         max_tokens_per_rank=T, activation_clamp=10.0,
                         weights=moe_ep.WeightPack.mxfp4(w13, w13_scale, w2, w2_scale))
    y = layer.forward(x, topk_ids, topk_weights)

    layer = moe_ep.load_layer(rt, "/models/DeepSeek-V4-Flash", layer=3)   # a checkpoint's layer
    y = layer.forward(x, *layer.router.route(x))                           # with its own router

Errors of the library arrive as ValueError (bad argument), TypeError (not a tensor / unknown
dtype), UnsupportedError (a NotImplementedError), TimeoutError, DeviceError and RuntimeError,
with the library's message naming the parameter, the value and what was expected.
"""

from moe_ep._core import (  # noqa: F401
    DeviceError,
    Layer,
    RoutingStage,
    Runtime,
    UnsupportedError,
    workspace_bytes,
)
from moe_ep._core import __version__  # noqa: F401  (importing opens no CUDA or NCCL library)
from moe_ep._core import info as _build_info
from moe_ep.checkpoint import (  # noqa: F401
    CheckpointLayer,
    CheckpointRouter,
    known_checkpoint_layouts,
    load_layer,
)
from moe_ep.router import route_deepseek_v4  # noqa: F401
from moe_ep.runtime import runtime_from_process_group  # noqa: F401
from moe_ep.weights import WeightPack  # noqa: F401


# Runtime.from_process_group(pg, device=...): the runtime of an existing torch.distributed group.
Runtime.from_process_group = staticmethod(runtime_from_process_group)


def info() -> dict:
    """Build facts: version, whether CUDA/NCCL are compiled in, backends, transports. The NCCL
    transport's status opens libnccl.so.2: in a process that also uses torch, import torch
    first, so that both use torch's NCCL."""
    return _build_info()


__all__ = ["CheckpointLayer", "CheckpointRouter", "DeviceError", "Layer", "RoutingStage", "Runtime",
           "UnsupportedError", "WeightPack", "info", "known_checkpoint_layouts", "load_layer",
           "route_deepseek_v4", "runtime_from_process_group", "workspace_bytes", "__version__"]
