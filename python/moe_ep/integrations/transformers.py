"""moe_ep as a Hugging Face transformers experts implementation. Importing this module imports
torch and transformers (optional dependencies: ``pip install 'moe_ep[transformers]'``) and
registers moe_ep in ``transformers.integrations.moe.ExpertsInterface``::

    import moe_ep.integrations.transformers
    model = AutoModelForCausalLM.from_pretrained(path, experts_implementation="moe_ep")
    model = AutoModelForCausalLM.from_config(cfg, experts_implementation="moe_ep_nvfp4")
    model.set_experts_implementation("moe_ep")                 # or switch a loaded model

Names (:data:`IMPLEMENTATIONS`): ``moe_ep`` runs the mxfp4 recipe, ``moe_ep_nvfp4`` the nvfp4
one; both are also registered in transformers' ``FP8ExpertsInterface``, which serves the experts
of a checkpoint loaded with quant_method "fp8". The model's routed experts (``gate_up_proj``
[E, 2I, H], ``down_proj`` [E, H, I], bf16 or fp32) are quantized by the library at their first
forward (``moe_ep.Layer`` from a bf16 ``WeightPack``: fp32 weights are rounded to bf16 first);
packed FP4 experts with UE8M0 scales per 32 (DeepSeek V4's FP4 checkpoint as transformers loads
it: ``gate_up_proj`` int8 [E, 2I, H/2] + ``gate_up_proj_scale_inv``) are MXFP4 and taken as
loaded. The layer is cached on the experts module until the parameters change (another tensor, or an in-place write: the tensor's version
counter), the recipe changes or :func:`configure` is called. Every layer of a device shares one
runtime (:class:`moe_ep.integrations.SharedRuntime`), so one workspace serves the whole model.

The forward is one torch custom op, ``torch.ops.moe_ep.hf_experts``, with a fake kernel: a model
compiles under ``torch.compile`` with the experts as one opaque call (CPU and CUDA tensors; on
CUDA it runs on torch's current stream). Inference only: the op has no backward.

The activation is checked, not assumed: moe_ep computes ``silu(min(gate, c)) * clamp(up, -c, c)``
(docs/spec.md §3, steps 3-4) with ``c = activation_clamp``. DeepSeek V4's experts
(``DeepseekV4Experts._apply_gate``) clamp exactly so with ``c = swiglu_limit`` (the module's
``limit``); experts without a ``limit`` and with transformers' default gate run unclamped
SwiGLU. Before the first layer is built, the module's own ``_apply_gate`` is evaluated on a
grid of gate / up values across and beyond the clamp and compared with that formula; any other
activation (gpt-oss's, GELU, ...) or layout (biases, transposed or interleaved weights, a post
expert norm) is refused with ``moe_ep.UnsupportedError`` naming what differs.

Only the experts go through the registry: ``ExpertsInterface`` hands an implementation the
experts module, the hidden states and the router's ids and weights, after the model's own
router ran and before its shared expert runs (both are fixed code of the model's MoE block).
So the router and the shared expert stay the model's, and the whole block (router + experts +
shared expert in one ``moe_ep.Layer`` call) cannot be offered through it.
"""

from __future__ import annotations

import atexit
import ctypes
import itertools
import math
import threading
import weakref
from dataclasses import dataclass, replace
from typing import Any, Callable, Dict, Optional

import torch
from transformers.integrations.moe import ExpertsInterface

try:  # transformers' FP8 / FP4 checkpoint experts (quantization_config quant_method "fp8")
    from transformers.integrations.finegrained_fp8 import FP8ExpertsInterface
except ImportError:
    FP8ExpertsInterface = None

import moe_ep
from moe_ep.integrations import SharedRuntime, validate_config
from moe_ep.weights import WeightPack

#: The experts_implementation names this module registers, and the recipe each one runs.
IMPLEMENTATIONS: Dict[str, str] = {"moe_ep": "mxfp4", "moe_ep_nvfp4": "nvfp4"}


@dataclass(frozen=True)
class Options:
    """Per experts module (:func:`configure`)."""
    # Tokens per layer call (the layer's max_tokens_per_rank, which sizes its buffers); a
    # forward with more runs in chunks of this many (each token's result does not depend on the
    # chunk it is in).
    max_tokens: int = 1024
    fast_math: bool = False
    exact_accumulation: bool = False


_lock = threading.Lock()
_next_handle = itertools.count(1)
_states: "weakref.WeakValueDictionary[int, _ExpertsState]" = weakref.WeakValueDictionary()


def _tensor_key(t: torch.Tensor) -> tuple:
    """Identifies a weight tensor's contents: its storage, its version counter (bumped by every
    in-place write) and its metadata. Tensors made under inference_mode have no version counter."""
    try:
        version = t._version
    except RuntimeError:
        version = None
    return (t.data_ptr(), version, tuple(t.shape), t.stride(), t.dtype, str(t.device))


def _layer_device(t: torch.Tensor) -> str:
    if t.device.type == "cpu":
        return "cpu"
    if t.device.type == "cuda":
        index = t.device.index if t.device.index is not None else torch.cuda.current_device()
        return f"cuda:{index}"
    raise moe_ep.UnsupportedError(f"moe_ep: tensors on {t.device}; expected CPU or CUDA tensors")


def _check_layout(module: Any) -> None:
    name = type(module).__name__
    expected = {"has_gate": True, "has_bias": False, "is_transposed": False, "is_concatenated": True,
                "has_post_expert_norm": False}
    for flag, want in expected.items():
        if bool(getattr(module, flag, want)) != want:
            raise moe_ep.UnsupportedError(
                f"moe_ep: {name}.{flag} = {not want}; moe_ep runs gated experts with fused "
                f"gate_up_proj [E, 2I, H] (gate rows first) and down_proj [E, H, I], without biases "
                f"or a post-expert norm (expected {flag} = {want})")


def activation_clamp(module: Any) -> Optional[float]:
    """The layer's activation_clamp for an experts module: its ``limit`` (DeepSeek V4's
    swiglu_limit), or None (no clamp) when it has none; then checked against the module's own
    ``_apply_gate`` (see the module docstring). Raises UnsupportedError when they differ."""
    _check_layout(module)
    limit = getattr(module, "limit", None)
    clamp = None if limit is None else float(limit)
    name = type(module).__name__
    if clamp is not None and not (math.isfinite(clamp) and clamp >= 0.0):
        raise moe_ep.UnsupportedError(f"moe_ep: {name}.limit = {clamp}; expected a finite clamp >= 0 "
                                      f"(docs/spec.md §3 step 3)")
    # A grid reaching past the clamp on both sides, for the gate and the up half alike.
    reach = 3.0 * (clamp if clamp is not None else 8.0) + 1.0
    axis = torch.linspace(-reach, reach, 49, dtype=torch.float64)
    gate, up = (v.reshape(-1, 1) for v in torch.meshgrid(axis, axis, indexing="ij"))
    with torch.no_grad():
        got = module._apply_gate(torch.cat([gate, up], dim=1).float()).double()
    c = math.inf if clamp is None else clamp
    g = gate.clamp(max=c)
    want = g * torch.sigmoid(g) * up.clamp(min=-c, max=c)
    if got.shape != want.shape:
        raise moe_ep.UnsupportedError(f"moe_ep: {name}._apply_gate maps [P, 2] to {list(got.shape)}; "
                                      f"expected a gated activation [P, 1] (gate half, then up half)")
    bad = ((got - want).abs() > 1e-5 * want.abs().clamp(min=1.0)).flatten()
    if bool(bad.any()):
        i = int(bad.nonzero()[0])
        raise moe_ep.UnsupportedError(
            f"moe_ep: {name}._apply_gate is not moe_ep's clamped SwiGLU silu(min(gate, c)) * "
            f"clamp(up, -c, c) with c = {clamp} (docs/spec.md §3 steps 3-4): at gate = "
            f"{float(gate[i]):g}, up = {float(up[i]):g} it gives {float(got.flatten()[i]):g}, "
            f"moe_ep would give {float(want.flatten()[i]):g}")
    return clamp


def _host(t: torch.Tensor, dtype: Optional[torch.dtype] = None) -> torch.Tensor:
    """The library reads expert weights from host memory (it converts and uploads them itself)."""
    return t.detach().to(device="cpu", dtype=dtype).contiguous()


def _weight_pack(name: str, gate_up: torch.Tensor, down: torch.Tensor,
                 gate_up_scale: Optional[torch.Tensor], down_scale: Optional[torch.Tensor]) -> WeightPack:
    """The experts' weights as the layer takes them: bf16 / fp32 (rounded to bf16; quantized by
    the library, docs/spec.md §4.3, §5.1), or packed FP4 with a UE8M0 scale per 32 along K, as
    transformers loads DeepSeek V4's FP4 experts (int8 or float4_e2m1fn_x2 e2m1 pairs, low nibble
    first, and float8_e8m0fnu scales): MXFP4 taken as it is."""
    shapes = f"gate_up_proj {list(gate_up.shape)} and down_proj {list(down.shape)}"
    if gate_up.dim() != 3 or down.dim() != 3:
        raise ValueError(f"moe_ep: {name}: {shapes}; expected [E, 2I, H] and [E, H, I]")
    if gate_up.is_floating_point() and gate_up.element_size() > 1:
        num_experts, two_i, hidden = (int(d) for d in gate_up.shape)
        if two_i % 2 or tuple(down.shape) != (num_experts, hidden, two_i // 2):
            raise ValueError(f"moe_ep: {name}: {shapes}; expected [E, 2I, H] and [E, H, I]")
        return WeightPack.bf16(_host(gate_up, torch.bfloat16), _host(down, torch.bfloat16))
    packed = (torch.int8, torch.uint8) + tuple(getattr(torch, n) for n in ("float4_e2m1fn_x2",) if hasattr(torch, n))
    if gate_up.dtype in packed and down.dtype == gate_up.dtype:
        e8m0 = getattr(torch, "float8_e8m0fnu", None)
        for scale, of in ((gate_up_scale, "gate_up_proj"), (down_scale, "down_proj")):
            if scale is None or scale.dtype not in (e8m0, torch.uint8):
                raise moe_ep.UnsupportedError(
                    f"moe_ep: {name}: packed FP4 {of} needs UE8M0 scales per 32 along K "
                    f"({of}_scale_inv float8_e8m0fnu); got {None if scale is None else scale.dtype}")
        try:
            return WeightPack.mxfp4(_host(gate_up).view(torch.uint8), _host(gate_up_scale).view(torch.uint8),
                                    _host(down).view(torch.uint8), _host(down_scale).view(torch.uint8))
        except ValueError as e:
            raise moe_ep.UnsupportedError(f"moe_ep: {name}: packed FP4 experts whose scales are not one "
                                          f"UE8M0 per 32 along K ({e})") from None
    raise moe_ep.UnsupportedError(
        f"moe_ep: {name}: experts in {gate_up.dtype} ({shapes}); moe_ep takes bf16 / fp32 experts "
        f"(quantized at first use) or packed FP4 with UE8M0 scales per 32 (MXFP4). FP8 experts: "
        f"load with quantization_config dequantize=True")


class _ExpertsState:
    """What moe_ep keeps on one experts module (``module._moe_ep_state``): its checked
    activation clamp, its options and the layer built from its weights, with the key those
    weights had. A copy of a module gets a fresh state (its own handle, no layer); pickling keeps
    the clamp and the options."""

    def __init__(self, clamp: Optional[float], options: Options = Options()) -> None:
        self.clamp = clamp
        self.options = options
        self.layer: Optional[moe_ep.Layer] = None
        self.key: Optional[tuple] = None
        self.runtime: Optional[SharedRuntime] = None
        self.module_name = "experts"
        self._build_lock = threading.Lock()
        with _lock:
            self.handle = next(_next_handle)
            _states[self.handle] = self

    def drop(self) -> None:
        """Forget the layer (rebuilt at the next forward) and release the runtime."""
        self.layer, self.key = None, None
        if self.runtime is not None:
            self.runtime.release()
            self.runtime = None

    def __del__(self) -> None:
        try:
            self.drop()
        except Exception:  # noqa: BLE001 - interpreter teardown: the runtime goes with the process
            pass

    def __deepcopy__(self, memo: dict) -> "_ExpertsState":
        return _ExpertsState(self.clamp, self.options)

    def __reduce__(self):
        return (_ExpertsState, (self.clamp, self.options))

    def layer_for(self, gate_up: torch.Tensor, down: torch.Tensor, gate_up_scale: Optional[torch.Tensor],
                  down_scale: Optional[torch.Tensor], recipe: str, top_k: int, device: str) -> moe_ep.Layer:
        key = tuple(None if t is None else _tensor_key(t) for t in (gate_up, down, gate_up_scale, down_scale))
        key += (recipe, top_k, device, self.options)
        layer = self.layer
        if layer is not None and self.key == key:
            return layer
        with self._build_lock:
            if self.layer is None or self.key != key:
                self._build(_weight_pack(self.module_name, gate_up, down, gate_up_scale, down_scale),
                            recipe, top_k, device, key)
            return self.layer

    def _build(self, weights: WeightPack, recipe: str, top_k: int, device: str, key: tuple) -> None:
        self.drop()
        capability = None
        if device.startswith("cuda"):
            capability = torch.cuda.get_device_capability(torch.device(device))
        validate_config(recipe, num_experts=weights.num_experts, hidden_size=weights.hidden_size,
                        intermediate_size=weights.intermediate_size, top_k=top_k,
                        weight_format=weights.format, device_capability=capability)
        runtime = SharedRuntime.acquire(device=device)
        try:
            layer = moe_ep.Layer(runtime.runtime, num_experts=weights.num_experts,
                                 hidden_size=weights.hidden_size,
                                 intermediate_size=weights.intermediate_size, top_k=top_k,
                                 max_tokens_per_rank=self.options.max_tokens,
                                 weights=weights, recipe=recipe,
                                 activation_clamp=self.clamp, fast_math=self.options.fast_math,
                                 exact_accumulation=self.options.exact_accumulation)
        except BaseException:
            runtime.release()
            raise
        self.runtime, self.layer, self.key = runtime, layer, key


def _state(handle: int) -> _ExpertsState:
    state = _states.get(handle)
    if state is None:
        raise ValueError(f"moe_ep: experts handle {handle} belongs to no live experts module")
    return state


def _drop_all() -> None:
    for state in list(_states.values()):
        state.drop()


atexit.register(_drop_all)  # layers die before the interpreter tears the extension down


def state_of(module: torch.nn.Module) -> _ExpertsState:
    """The moe_ep state of an experts module, made (and its activation checked) on first use."""
    state = module.__dict__.get("_moe_ep_state")
    if state is None:
        state = _ExpertsState(activation_clamp(module))
        module._moe_ep_state = state
    return state


@torch.library.custom_op("moe_ep::hf_experts", mutates_args=(), device_types=("cpu", "cuda"))
def hf_experts(x: torch.Tensor, topk_ids: torch.Tensor, topk_weights: torch.Tensor,
               gate_up_proj: torch.Tensor, down_proj: torch.Tensor,
               gate_up_proj_scale: Optional[torch.Tensor], down_proj_scale: Optional[torch.Tensor],
               handle: int, recipe: str) -> torch.Tensor:
    """y bf16 [T, H] of the experts module's moe_ep layer (`handle`): x bf16 [T, H], topk_ids
    [T, K] (-1 skips a slot), topk_weights f32 [T, K]. The layer is built, or rebuilt, from the
    weights (and, for packed FP4 experts, their scales) when their key differs from the cached one."""
    state = _state(handle)
    layer = state.layer_for(gate_up_proj, down_proj, gate_up_proj_scale, down_proj_scale, recipe,
                            int(topk_ids.shape[-1]), _layer_device(x))
    x = x.contiguous()
    topk_ids = topk_ids.contiguous()
    topk_weights = topk_weights.contiguous()
    y = torch.empty_like(x)
    num_tokens, chunk = x.shape[0], state.options.max_tokens
    for start in range(0, max(num_tokens, 1), chunk):
        end = min(num_tokens, start + chunk)
        layer.forward(x[start:end], topk_ids[start:end], topk_weights[start:end], out=y[start:end])
    return y


@hf_experts.register_fake
def _hf_experts_fake(x, topk_ids, topk_weights, gate_up_proj, down_proj, gate_up_proj_scale,
                     down_proj_scale, handle, recipe):
    return torch.empty_like(x)


@torch.compiler.assume_constant_result
def _handle(module_id: int) -> int:
    # Run as plain Python even while dynamo traces (the state holds locks and a weak registry it
    # cannot trace): the handle enters the graph as a constant. Dynamo passes a module's id to such
    # a function where it cannot pass the module itself (torch 2.11), and the module is alive while
    # its forward runs or is traced (dynamo guards the graph on that id).
    return state_of(ctypes.cast(module_id, ctypes.py_object).value).handle


def _experts_forward(recipe: str) -> Callable:
    def experts_forward(self: torch.nn.Module, hidden_states: torch.Tensor, top_k_index: torch.Tensor,
                        top_k_weights: torch.Tensor) -> torch.Tensor:
        handle = _handle(id(self))
        ids = top_k_index
        if getattr(self, "_is_expert_parallel", False):
            # transformers' expert parallelism marks slots owned by another rank with ids >= E.
            ids = torch.where(ids < self.num_experts, ids, torch.full_like(ids, -1))
        y = torch.ops.moe_ep.hf_experts(hidden_states.to(torch.bfloat16), ids,
                                        top_k_weights.to(torch.float32), self.gate_up_proj,
                                        self.down_proj, getattr(self, "gate_up_proj_scale_inv", None),
                                        getattr(self, "down_proj_scale_inv", None), handle, recipe)
        return y.to(hidden_states.dtype)

    experts_forward.__name__ = f"moe_ep_{recipe}_experts_forward"
    experts_forward.__qualname__ = experts_forward.__name__
    return experts_forward


def register() -> None:
    """Register every name of :data:`IMPLEMENTATIONS` in transformers' ExpertsInterface and, where
    transformers has it, its FP8ExpertsInterface (the experts of a checkpoint loaded with
    quant_method "fp8"); done at import, again after something replaced them."""
    interfaces = [ExpertsInterface] + ([FP8ExpertsInterface] if FP8ExpertsInterface is not None else [])
    for name, recipe in IMPLEMENTATIONS.items():
        for interface in interfaces:
            interface.register(name, _experts_forward(recipe))


register()


def experts_modules(model: torch.nn.Module):
    """(qualified name, module) of every experts module of `model` that runs through
    transformers' ExpertsInterface (fused gate_up_proj / down_proj)."""
    for name, module in model.named_modules():
        if hasattr(module, "gate_up_proj") and hasattr(module, "down_proj") and hasattr(module, "has_gate"):
            yield name, module


def configure(model: torch.nn.Module, **options: Any) -> int:
    """Set :class:`Options` fields (max_tokens, fast_math, exact_accumulation) on every experts
    module of `model`; their layers are rebuilt at the next forward. Returns how many modules."""
    count = 0
    for name, module in experts_modules(model):
        state = state_of(module)
        state.module_name = name
        state.drop()
        state.options = replace(state.options, **options)
        count += 1
    return count


def prepare(model: torch.nn.Module, top_k: Optional[int] = None) -> int:
    """Build now, rather than at the first forward, the layer of every experts module of `model`
    whose experts_implementation is one of :data:`IMPLEMENTATIONS`, on the device its weights
    are on (e.g. before torch.compile or CUDA graph capture, or to pay the quantization up
    front). `top_k`: default the config's num_experts_per_tok. Returns how many layers."""
    count = 0
    for name, module in experts_modules(model):
        config = getattr(module, "config", None)
        recipe = IMPLEMENTATIONS.get(getattr(config, "_experts_implementation", None))
        if recipe is None:
            continue
        k = top_k if top_k is not None else getattr(config, "num_experts_per_tok", None)
        if k is None:
            raise ValueError(f"moe_ep: {name}: the config has no num_experts_per_tok; pass top_k=")
        state = state_of(module)
        state.module_name = name
        state.layer_for(module.gate_up_proj, module.down_proj, getattr(module, "gate_up_proj_scale_inv", None),
                        getattr(module, "down_proj_scale_inv", None), recipe, int(k),
                        _layer_device(module.gate_up_proj))
        count += 1
    return count


__all__ = ["IMPLEMENTATIONS", "Options", "activation_clamp", "configure", "experts_modules",
           "hf_experts", "prepare", "register", "state_of"]
