"""Real checkpoints from Python: one MoE layer of a safetensors checkpoint as a ready
:class:`moe_ep.Layer`, with its shared expert inside and its router beside it.

    rt = moe_ep.Runtime.acquire(device="cpu")
    layer = moe_ep.load_layer(rt, "/models/DeepSeek-V4-Flash", layer=3, max_tokens_per_rank=256)
    ids, weights = layer.router.route(x)                  # a hash layer: token_ids=input_ids
    y = layer.forward(x, ids, weights)                    # the shared expert is added inside
    y = layer.route_and_forward(x, token_ids=input_ids)   # the same, in one call

The checkpoint is read by the C++ loader (include/moe_ep/checkpoint.h): the layouts it knows
(DeepSeek V4's own files, transformers' converted names, ModelOpt, compressed-tensors, vLLM's
fused parameters, ...), the shared expert dequantized to bf16, the router's gate weight,
correction bias and hash table; docs/checkpoints.md lists them. Quantized experts are used as
stored (the recipe defaults to the checkpoint's format); unquantized (bf16) experts are quantized
by the layer to ``recipe``.

The router runs the library's DeepSeek V4 router (:func:`moe_ep.route_deepseek_v4`) on the host,
with the checkpoint's routed_scaling_factor; the layer itself is built with
``routed_scaling_factor=1`` since the router's weights already carry it.
"""

from __future__ import annotations

from typing import Any, Optional, Sequence, Tuple

from moe_ep import _core
from moe_ep.router import route_deepseek_v4
from moe_ep.weights import WeightPack


def _is_torch(t: Any) -> bool:
    return type(t).__module__.startswith("torch")


def _bf16(a: Any) -> Any:
    import ml_dtypes
    return None if a is None else a.view(ml_dtypes.bfloat16)


class CheckpointRouter:
    """The router of one checkpoint layer: gate ``weight`` f32 [E, H], the score-correction
    ``bias`` f32 [E] (or None), a hash layer's ``hash_table`` int32 [vocab, K] (or None), with
    ``top_k`` and ``routed_scaling_factor``. Arrays are read-only numpy arrays.

    ``unsupported_reason`` is "" when the library's router computes this router's function
    (DeepSeek V4's sqrt(softplus) scoring); otherwise :meth:`route` raises
    :class:`moe_ep.UnsupportedError` with it (route with the model's own router instead)."""

    def __init__(self, info: dict, top_k: int) -> None:
        self.weight = info["weight"]
        self.bias = info["bias"]
        self.hash_table = info["hash_table"]
        self.top_k = int(top_k)
        self.routed_scaling_factor = float(info["routed_scaling_factor"])
        self.scoring_func = info["scoring_func"]
        self.unsupported_reason = info["unsupported_reason"]
        self.names = {"weight": info["weight_name"], "bias": info["bias_name"],
                      "hash_table": info["hash_table_name"]}

    @property
    def is_hash_layer(self) -> bool:
        return self.hash_table is not None

    def logits(self, x: Any) -> Any:
        """Gate logits f32 [T, E] = fp32(x) @ weight^T of hidden states x [T, H] (bf16 or f32; a
        numpy array or a CPU torch tensor, answered in kind)."""
        if self.weight is None:
            raise _core.UnsupportedError(f"moe_ep: {self.unsupported_reason}")
        if _is_torch(x):
            import torch
            return x.float() @ torch.from_numpy(self.weight).T
        import numpy as np
        return np.asarray(x).astype(np.float32) @ self.weight.T

    def route(self, x: Any = None, *, logits: Any = None, token_ids: Any = None,
              ids_dtype: Optional[str] = None, out: Optional[Tuple[Any, Any]] = None) -> Tuple[Any, Any]:
        """(topk_ids [T, K], topk_weights f32 [T, K]) of hidden states ``x`` (or of given
        ``logits``); a hash layer needs the tokens' ``token_ids`` [T]."""
        if self.unsupported_reason:
            raise _core.UnsupportedError(f"moe_ep: the checkpoint's router: {self.unsupported_reason}")
        if logits is None:
            if x is None:
                raise ValueError("moe_ep: CheckpointRouter.route needs x (hidden states) or logits")
            logits = self.logits(x)
        if self.is_hash_layer and token_ids is None:
            raise ValueError(f"moe_ep: the layer routes by its hash table "
                             f"'{self.names['hash_table']}'; pass token_ids (the input ids)")
        return route_deepseek_v4(logits, self.top_k, routed_scaling_factor=self.routed_scaling_factor,
                                 bias=self.bias, layer_idx=0, num_hash_layers=int(self.is_hash_layer),
                                 token_ids=token_ids if self.is_hash_layer else None,
                                 hash_table=self.hash_table, ids_dtype=ids_dtype, out=out)

    def __repr__(self) -> str:
        kind = f"hash table {list(self.hash_table.shape)}" if self.is_hash_layer else (
            "sqrt(softplus) with bias" if self.bias is not None else "sqrt(softplus)")
        return (f"CheckpointRouter({kind}, top_k={self.top_k}, "
                f"routed_scaling_factor={self.routed_scaling_factor})")


class CheckpointLayer(_core.Layer):
    """A :class:`moe_ep.Layer` built from a checkpoint layer, with ``router``
    (:class:`CheckpointRouter`) and ``checkpoint`` (what was loaded: layer, layout, format,
    tensor pattern, notes, shapes, the shared expert's source, config.json facts)."""

    router: CheckpointRouter
    checkpoint: dict

    def route_and_forward(self, x: Any, token_ids: Any = None, out: Any = None) -> Any:
        """y = forward(x, *router.route(x, token_ids=token_ids)): the router on the host (numpy or
        CPU torch tensors)."""
        ids, weights = self.router.route(x, token_ids=token_ids)
        return self.forward(x, ids, weights, out=out)


def load_layer(runtime: Any, checkpoint: str, layer: Optional[int] = None, *,
               max_tokens_per_rank: int = 256, recipe: Optional[str] = None,
               top_k: Optional[int] = None, activation_clamp: Any = "config",
               shared_expert: bool = True, layout: str = "auto", tensor_pattern: str = "",
               proj_names: Sequence[str] = (), first_expert: Optional[int] = None,
               num_experts: Optional[int] = None, num_threads: int = 0,
               **layer_options: Any) -> CheckpointLayer:
    """Layer ``layer`` (default: the first MoE layer found) of the checkpoint at ``checkpoint`` (a
    directory with config.json and model.safetensors or an index of shards, or one .safetensors
    file) as a ready layer on ``runtime``.

    recipe: 'mxfp4' | 'nvfp4'; default the checkpoint's format (mxfp4 for unquantized experts).
    top_k: default config.json's num_experts_per_tok. activation_clamp: default config.json's
    swiglu_limit (None: no clamp). shared_expert=False leaves the checkpoint's shared expert out
    (one the loader cannot dequantize loads so). first_expert / num_experts: the experts this rank
    owns on an expert-parallel runtime (default: all). layout / tensor_pattern / proj_names name
    the tensors (see
    :func:`known_checkpoint_layouts`); layer_options go to :class:`moe_ep.Layer` (gemm, tile, ...).
    """
    info = _core._load_checkpoint_layer(checkpoint, layer, layout, tensor_pattern, list(proj_names),
                                        bool(shared_expert), int(first_expert or 0),
                                        -1 if num_experts is None else int(num_experts), int(num_threads))
    config = info["config"] or {}
    if top_k is None:
        if not config:
            raise ValueError(f"moe_ep.load_layer: checkpoint '{checkpoint}' has no config.json; "
                             f"pass top_k")
        top_k = int(config["num_experts_per_tok"])
    if isinstance(activation_clamp, str) and activation_clamp == "config":
        activation_clamp = config.get("swiglu_limit")
    fmt = info["format"]
    if recipe is None:
        recipe = "nvfp4" if fmt == "nvfp4" else "mxfp4"
    if fmt == "mxfp4":
        weights = WeightPack.mxfp4(info["w13"], info["w13_scale"], info["w2"], info["w2_scale"])
    elif fmt == "nvfp4":
        weights = WeightPack.nvfp4(info["w13"], info["w13_scale"], info["w13_global"], info["w2"],
                                   info["w2_scale"], info["w2_global"])
    else:
        weights = WeightPack.bf16(_bf16(info["w13"]), _bf16(info["w2"]))
    result = CheckpointLayer(runtime, num_experts=int(info["total_experts"]),
                             hidden_size=int(info["hidden_size"]),
                             intermediate_size=int(info["intermediate_size"]), top_k=int(top_k),
                             max_tokens_per_rank=int(max_tokens_per_rank), weights=weights,
                             recipe=recipe, activation_clamp=activation_clamp,
                             shared_w13=_bf16(info["shared_w13"]), shared_w2=_bf16(info["shared_w2"]),
                             **layer_options)
    result.router = CheckpointRouter(info["router"], int(top_k))
    result.checkpoint = {k: v for k, v in info.items()
                         if k not in ("w13", "w13_scale", "w13_global", "w2", "w2_scale", "w2_global",
                                      "shared_w13", "shared_w2", "router")}
    result.checkpoint["path"] = checkpoint
    return result


def known_checkpoint_layouts() -> list:
    """The layouts the loader recognizes: name (``layout=``), pattern, projection names, origin."""
    return _core._known_checkpoint_layouts()
