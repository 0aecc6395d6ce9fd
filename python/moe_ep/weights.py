"""Expert weights in the fused-expert layouts inference engines hold (vLLM's ``w13_weight`` /
``w2_weight`` parameters), checked for shape consistency before the library sees them.

Shapes, per rank (E = local experts, W13 rows [0, I) gate, [I, 2I) up; K-major):

  mxfp4  w13        uint8 [E, 2I, H/2]   packed e2m1, low nibble = even element
         w13_scale  uint8 [E, 2I, H/32]  UE8M0 (uint8 or float8_e8m0fnu)
         w2         uint8 [E, H, I/2]
         w2_scale   uint8 [E, H, I/32]
  nvfp4  w13, w2 as mxfp4; w13_scale [E, 2I, H/16], w2_scale [E, H, I/16] float8_e4m3fn (or
         uint8); w13_global float32 [E, 2] (gate, up) or [E] (shared); w2_global float32 [E]
  bf16   w13 bfloat16 [E, 2I, H], w2 bfloat16 [E, H, I] (quantized by the layer's recipe)
"""

from __future__ import annotations

from typing import Any, Sequence


def _shape(t: Any) -> tuple:
    return tuple(int(d) for d in t.shape)


def _expect(name: str, t: Any, shape: Sequence[int], symbolic: str) -> None:
    if t is None:
        raise ValueError(f"WeightPack: {name} is missing; expected shape {symbolic} = {list(shape)}")
    if _shape(t) != tuple(shape):
        raise ValueError(f"WeightPack: {name} has shape {list(_shape(t))}; expected {symbolic} = "
                         f"{list(shape)}")


def _dims(w13: Any, w2: Any, packed: bool) -> tuple:
    for name, t in (("w13", w13), ("w2", w2)):
        if t is None or len(_shape(t)) != 3:
            raise ValueError(f"WeightPack: {name} must be a 3-d tensor [E, rows, K]; got "
                             f"{None if t is None else list(_shape(t))}")
    e, two_i, h = _shape(w13)
    if packed:
        h *= 2
    if two_i % 2:
        raise ValueError(f"WeightPack: w13 has {two_i} rows; expected 2I (an even number)")
    return e, two_i // 2, h


class WeightPack:
    """One rank's expert weights; build with :meth:`mxfp4`, :meth:`nvfp4` or :meth:`bf16`.

    Holds references to the tensors only: the layer copies (and converts) them at construction,
    so they may be freed afterwards."""

    __slots__ = ("format", "w13", "w13_scale", "w13_global", "w2", "w2_scale", "w2_global",
                 "num_experts", "hidden_size", "intermediate_size")

    def __init__(self, format: str, w13: Any, w2: Any, *, w13_scale: Any = None,
                 w2_scale: Any = None, w13_global: Any = None, w2_global: Any = None,
                 dims: tuple = (0, 0, 0)) -> None:
        self.format = format
        self.w13, self.w13_scale, self.w13_global = w13, w13_scale, w13_global
        self.w2, self.w2_scale, self.w2_global = w2, w2_scale, w2_global
        self.num_experts, self.intermediate_size, self.hidden_size = dims

    @classmethod
    def mxfp4(cls, w13: Any, w13_scale: Any, w2: Any, w2_scale: Any) -> "WeightPack":
        """MXFP4: packed e2m1 + UE8M0 scales per 32 elements along K."""
        e, i, h = _dims(w13, w2, packed=True)
        _expect("w13_scale", w13_scale, (e, 2 * i, h // 32), "[E, 2I, H/32]")
        _expect("w2", w2, (e, h, i // 2), "[E, H, I/2]")
        _expect("w2_scale", w2_scale, (e, h, i // 32), "[E, H, I/32]")
        return cls("mxfp4", w13, w2, w13_scale=w13_scale, w2_scale=w2_scale, dims=(e, i, h))

    @classmethod
    def nvfp4(cls, w13: Any, w13_scale: Any, w13_global: Any, w2: Any, w2_scale: Any,
              w2_global: Any) -> "WeightPack":
        """NVFP4: packed e2m1 + e4m3 scales per 16 + fp32 global scales (weight_scale_2) per
        expert; w13_global [E, 2] holds (gate, up), or [E] when both halves share one."""
        e, i, h = _dims(w13, w2, packed=True)
        _expect("w13_scale", w13_scale, (e, 2 * i, h // 16), "[E, 2I, H/16]")
        _expect("w2", w2, (e, h, i // 2), "[E, H, I/2]")
        _expect("w2_scale", w2_scale, (e, h, i // 16), "[E, H, I/16]")
        if w13_global is not None and _shape(w13_global) == (e,):
            w13_global = _repeat_pair(w13_global)
        _expect("w13_global", w13_global, (e, 2), "[E, 2]")
        _expect("w2_global", w2_global, (e,), "[E]")
        return cls("nvfp4", w13, w2, w13_scale=w13_scale, w2_scale=w2_scale,
                   w13_global=w13_global, w2_global=w2_global, dims=(e, i, h))

    @classmethod
    def bf16(cls, w13: Any, w2: Any) -> "WeightPack":
        """bf16 weights, quantized by the layer's recipe at load."""
        e, i, h = _dims(w13, w2, packed=False)
        _expect("w2", w2, (e, h, i), "[E, H, I]")
        return cls("bf16", w13, w2, dims=(e, i, h))

    def __repr__(self) -> str:
        return (f"WeightPack.{self.format}(E={self.num_experts}, H={self.hidden_size}, "
                f"I={self.intermediate_size})")


def _repeat_pair(g: Any) -> Any:
    """[E] -> [E, 2] contiguous, for torch tensors and numpy arrays alike."""
    if hasattr(g, "unsqueeze"):
        return g.unsqueeze(1).expand(-1, 2).contiguous()
    import numpy as np
    return np.ascontiguousarray(np.repeat(np.asarray(g)[:, None], 2, axis=1))


