"""The moe_ep layer of docs/spec.md §2-5, written afresh in numpy (float64 unless the SPEC fixes a
precision). It shares no code with the C++ library: its own e2m1 / e4m3 / E8M0 / bf16 codecs,
its own Q8 and NVFP4 quantizers and its own MXFP4 weight quantizer. ml_dtypes is used only by
the tests, to check these codecs bit for bit (test_reference_formats.py).

Layouts (docs/spec.md §2): W13_e [2I, H] (rows [0, I) gate, [I, 2I) up), W2_e [H, I], K-major;
packed e2m1 bytes hold the even element in the low nibble.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

import numpy as np

F32 = np.float32

# ---- element formats -------------------------------------------------------------------------

E2M1_VALUES = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0], dtype=np.float64)


def e2m1_decode(nibbles: np.ndarray) -> np.ndarray:
    """4-bit codes (s e e m) -> float64."""
    n = nibbles.astype(np.int64) & 0xF
    mag = E2M1_VALUES[n & 7]
    return np.where(n & 8, -mag, mag)


def _rne_to_grid(v: np.ndarray, grid: np.ndarray) -> np.ndarray:
    """Index into the sorted non-negative `grid` nearest to |v| (ties to the even index, which
    is the code with an even mantissa: codes are consecutive in magnitude); beyond the largest
    value it saturates."""
    a = np.abs(v.astype(np.float64))
    hi = np.clip(np.searchsorted(grid, a, side="left"), 0, len(grid) - 1)
    lo = np.clip(hi - 1, 0, len(grid) - 1)
    d_lo = a - grid[lo]
    d_hi = grid[hi] - a
    pick_hi = (d_hi < d_lo) | ((d_hi == d_lo) & (hi % 2 == 0))
    idx = np.where(pick_hi, hi, lo)
    return np.where(a >= grid[-1], len(grid) - 1, idx)


def e2m1_encode(v: np.ndarray) -> np.ndarray:
    """float -> 4-bit codes, round to nearest even, saturating at ±6 (docs/spec.md §5)."""
    idx = _rne_to_grid(v, E2M1_VALUES)
    return (idx | (np.signbit(v).astype(np.int64) << 3)).astype(np.uint8)  # -0 keeps its sign


def _e4m3_positive_table() -> np.ndarray:
    """Magnitudes of codes 0x00..0x7E (0x7F is NaN): bias 7, 3 mantissa bits, subnormals."""
    out = []
    for code in range(0x7F):
        e, m = code >> 3, code & 7
        out.append(m / 8.0 * 2.0 ** -6 if e == 0 else (1 + m / 8.0) * 2.0 ** (e - 7))
    return np.array(out, dtype=np.float64)


E4M3_TABLE = _e4m3_positive_table()  # E4M3_TABLE[-1] == 448


def e4m3_decode(codes: np.ndarray) -> np.ndarray:
    c = codes.astype(np.int64) & 0xFF
    mag = np.where((c & 0x7F) == 0x7F, np.nan, E4M3_TABLE[np.minimum(c & 0x7F, 0x7E)])
    return np.where(c & 0x80, -mag, mag)


def e4m3_encode(v: np.ndarray) -> np.ndarray:
    """float -> e4m3fn codes, round to nearest even, saturating at ±448 (NaN -> 0x7F)."""
    v = np.asarray(v, dtype=np.float64)
    idx = _rne_to_grid(v, E4M3_TABLE)
    code = idx | (np.signbit(v).astype(np.int64) << 7)
    return np.where(np.isnan(v), 0x7F, code).astype(np.uint8)


def e8m0_decode(codes: np.ndarray) -> np.ndarray:
    c = codes.astype(np.int64)
    return np.where(c == 0xFF, np.nan, np.ldexp(1.0, c - 127))


def bf16_round(v: np.ndarray) -> np.ndarray:
    """fp32 -> nearest bf16 (ties to even), returned as float64; via the fp32 bit pattern."""
    b = np.asarray(v, dtype=F32).view(np.uint32).astype(np.uint64)
    nan = np.isnan(np.asarray(v, dtype=F32))
    rounded = (b + 0x7FFF + ((b >> 16) & 1)) >> 16 << 16
    out = (rounded & 0xFFFFFFFF).astype(np.uint32).view(F32).astype(np.float64)
    return np.where(nan, np.nan, out)


def bf16_bits(v: np.ndarray) -> np.ndarray:
    """float -> bf16 bit patterns (uint16), round to nearest even."""
    r = bf16_round(v).astype(F32).view(np.uint32)
    return (r >> 16).astype(np.uint16)


def bf16_from_bits(bits: np.ndarray) -> np.ndarray:
    return (bits.astype(np.uint32) << 16).view(F32).astype(np.float64)


def unpack_e2m1(packed: np.ndarray) -> np.ndarray:
    """[..., K/2] bytes -> [..., K] nibbles (low nibble = even element)."""
    lo = packed & 0xF
    hi = packed >> 4
    return np.stack([lo, hi], axis=-1).reshape(*packed.shape[:-1], packed.shape[-1] * 2)


def pack_e2m1(nibbles: np.ndarray) -> np.ndarray:
    n = nibbles.reshape(*nibbles.shape[:-1], -1, 2).astype(np.uint8)
    return (n[..., 0] | (n[..., 1] << 4)).astype(np.uint8)


# ---- block recipes ---------------------------------------------------------------------------


def _ceil_log2_ratio(amax: np.ndarray, denom: float) -> np.ndarray:
    """ceil(log2(amax / denom)) of the exact real quotient (amax > 0)."""
    k = np.ceil(np.log2(amax.astype(np.float64) / denom)).astype(np.int64)
    # Correct a rounding of log2 either way: smallest k with denom * 2^k >= amax.
    k = np.where(np.ldexp(denom, k - 1) >= amax, k - 1, k)
    k = np.where(np.ldexp(denom, k) < amax, k + 1, k)
    return k


# The largest magnitude Q8 holds, 1.875 * 2^127: finite values beyond it saturate to it (else
# e4m3 rounding would reach 2^128, fp32 Inf); Inf and NaN pass.
Q8_MAX_FINITE = 1.875 * 2.0**127
F32_MAX = float(np.finfo(np.float32).max)


def _silu(gate):
    """v / (1 + exp(-v)); -0 at -inf (its limit), where the formula gives NaN."""
    with np.errstate(over="ignore", invalid="ignore"):
        return np.where(np.isneginf(gate), -0.0, gate / (1.0 + np.exp(-gate)))


def q8_encode(g: np.ndarray, byte: np.ndarray) -> np.ndarray:
    """Blocks g [..., blocks, 32] as e4m3 codes at the E8M0 bytes [..., blocks] (saturating)."""
    over = (np.abs(g) > Q8_MAX_FINITE) & (np.abs(g) <= F32_MAX)
    g = np.where(over, np.copysign(Q8_MAX_FINITE, g), g)
    return e4m3_encode(g / np.ldexp(1.0, np.asarray(byte, dtype=np.int64) - 127)[..., None])


def q8(v: np.ndarray) -> tuple:
    """Q8 (docs/spec.md §3) along the last axis: e4m3 codes and one E8M0 byte per 32 elements."""
    g = np.asarray(v, dtype=np.float64).reshape(*v.shape[:-1], -1, 32)
    amax = np.maximum(np.abs(g).max(axis=-1), 1e-4)
    byte = np.clip(_ceil_log2_ratio(amax, 448.0) + 127, 1, 254)
    return q8_encode(g, byte).reshape(v.shape), byte.astype(np.uint8)


def q8_dequant(codes: np.ndarray, scales: np.ndarray) -> np.ndarray:
    g = e4m3_decode(codes).reshape(*codes.shape[:-1], -1, 32)
    return (g * e8m0_decode(scales)[..., None]).reshape(codes.shape)


def mxfp4_quantize(w: np.ndarray) -> tuple:
    """Real-valued weights -> (packed e2m1 [..., K/2], E8M0 [..., K/32]) (docs/spec.md §5)."""
    g = np.asarray(w, dtype=np.float64).reshape(*w.shape[:-1], -1, 32)
    amax = np.abs(g).max(axis=-1)
    k = np.where(amax > 0, _ceil_log2_ratio(np.where(amax > 0, amax, 1.0), 6.0), -127)
    byte = np.clip(k + 127, 0, 254)
    nib = e2m1_encode(g / np.ldexp(1.0, byte - 127)[..., None]).reshape(w.shape)
    return pack_e2m1(nib), byte.astype(np.uint8)


def mxfp4_dequant(packed: np.ndarray, scales: np.ndarray) -> np.ndarray:
    vals = e2m1_decode(unpack_e2m1(packed))
    g = vals.reshape(*vals.shape[:-1], -1, 32)
    return (g * e8m0_decode(scales)[..., None]).reshape(vals.shape)


def nvfp4_dequant(packed: np.ndarray, scales: np.ndarray, global_scale: np.ndarray) -> np.ndarray:
    """e2m1 * e4m3 block scale (per 16) * weight_scale_2; global_scale broadcast over rows."""
    vals = e2m1_decode(unpack_e2m1(packed))
    g = vals.reshape(*vals.shape[:-1], -1, 16) * e4m3_decode(scales)[..., None]
    return g.reshape(vals.shape) * global_scale


def nvfp4_act_roundtrip(v: np.ndarray) -> np.ndarray:
    """NVFP4 activation quantization of each row (dynamic per-row global, docs/spec.md §4), then
    dequantized: g = 448*6/A; s = e4m3(g*amax_b/6); q = e2m1_rne(clamp(v*g/s, ±6)); v ~ q*s/g.
    Evaluated in fp32 as the SPEC writes it; a zero row stays zero."""
    v = np.asarray(v, dtype=F32)
    a = np.abs(v).max(axis=-1, keepdims=True)
    g = np.where(a > 0, F32(448.0 * 6.0) / np.where(a > 0, a, F32(1)), F32(0)).astype(F32)
    blocks = v.reshape(*v.shape[:-1], -1, 16)
    amax_b = np.abs(blocks).max(axis=-1)
    s = e4m3_decode(e4m3_encode((g * amax_b / F32(6.0)).astype(F32))).astype(F32)
    safe_s = np.where(s > 0, s, F32(1))
    q = e2m1_decode(e2m1_encode(np.clip((blocks * g[..., None] / safe_s[..., None]).astype(F32),
                                        -6, 6)))
    deq = q * s[..., None].astype(np.float64) / np.where(g > 0, g, 1.0)[..., None]
    deq = np.where((s[..., None] > 0) & (g[..., None] > 0), deq, 0.0)
    return deq.reshape(v.shape)


# ---- the layer -------------------------------------------------------------------------------


@dataclass
class ReferenceWeights:
    """Dequantized weights, float64: w13 [E, 2I, H], w2 [E, H, I]."""
    w13: np.ndarray
    w2: np.ndarray


def weights_from_mxfp4(w13, w13_scale, w2, w2_scale) -> ReferenceWeights:
    return ReferenceWeights(mxfp4_dequant(w13, w13_scale), mxfp4_dequant(w2, w2_scale))


def weights_from_nvfp4(w13, w13_scale, w13_global, w2, w2_scale, w2_global) -> ReferenceWeights:
    i = w13.shape[1] // 2
    g13 = np.concatenate([np.repeat(w13_global[:, 0:1], i, axis=1),
                          np.repeat(w13_global[:, 1:2], i, axis=1)], axis=1)[..., None]
    return ReferenceWeights(nvfp4_dequant(w13, w13_scale, g13),
                            nvfp4_dequant(w2, w2_scale, w2_global[:, None, None]))


def layer_forward(recipe: str, w: ReferenceWeights, x_bf16_bits: np.ndarray, topk_ids: np.ndarray,
                  topk_weights: np.ndarray, clamp: Optional[float]) -> np.ndarray:
    """y [T, H] (float64 holding bf16 values) of docs/spec.md §3 (mxfp4) / §4 (nvfp4): per slot,
    a = quant(x); gu = bf16(a W13^T); SwiGLU with the clamp, times the slot weight; b = quant(h);
    o = bf16(b W2^T); y = bf16(sum of o over the valid slots)."""
    x = bf16_from_bits(x_bf16_bits)
    t_count, k_count = topk_ids.shape
    i = w.w13.shape[1] // 2
    c = math.inf if clamp is None else float(clamp)
    if recipe == "mxfp4":
        a = q8_dequant(*q8(x)) if t_count else x
    elif recipe == "nvfp4":
        a = nvfp4_act_roundtrip(x) if t_count else x
    else:
        raise ValueError(f"recipe {recipe!r}")
    acc = np.zeros((t_count, x.shape[1]), dtype=F32)
    for t in range(t_count):
        for k in range(k_count):
            e = int(topk_ids[t, k])
            if e < 0:
                continue
            gu = bf16_round(w.w13[e] @ a[t])
            gate = np.minimum(gu[:i], c)
            up = np.clip(gu[i:], -c, c)
            h = _silu(gate) * up * float(topk_weights[t, k])
            b = q8_dequant(*q8(h[None]))[0] if recipe == "mxfp4" else nvfp4_act_roundtrip(h[None])[0]
            o = bf16_round(w.w2[e] @ b)
            acc[t] += o.astype(F32)
    return bf16_round(acc)


def shared_expert_add(y: np.ndarray, x_bf16_bits: np.ndarray, w13_bits: np.ndarray,
                      w2_bits: np.ndarray, clamp: Optional[float]) -> np.ndarray:
    """y + the shared expert's output (moe_ep/shared_expert.h): gu = bf16(x W13^T),
    gate = min(gu[:Is], c), up = clamp(gu[Is:], -c, c), h = bf16(silu(gate) * up),
    o = bf16(h W2^T), y = bf16(y + o); bf16 weights, dot products in float64."""
    x = bf16_from_bits(x_bf16_bits)
    w13 = bf16_from_bits(w13_bits)
    w2 = bf16_from_bits(w2_bits)
    i = w13.shape[0] // 2
    c = math.inf if clamp is None else float(clamp)
    gu = bf16_round(x @ w13.T)
    gate = np.minimum(gu[:, :i], c)
    up = np.clip(gu[:, i:], -c, c)
    h = bf16_round(_silu(gate) * up)
    return bf16_round(y + bf16_round(h @ w2.T))


def relative_error(out: np.ndarray, ref: np.ndarray) -> float:
    """||out - ref||_2 / ||ref||_2 in float64 (0 when both are zero)."""
    out = np.asarray(out, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    den = np.linalg.norm(ref)
    num = np.linalg.norm(out - ref)
    return float(num / den) if den > 0 else float(num)
