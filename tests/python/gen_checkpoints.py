#!/usr/bin/env python3
"""Safetensors checkpoints for the checkpoint tests (tests/checkpoint/), written with the
`safetensors` package from weights quantized here by an independent numpy implementation of
docs/spec.md §4-5 (e2m1 / e4m3 / bf16 rounding by table and bit arithmetic; no moe_ep code, no
ml_dtypes).

Output under OUT_DIR:
  ckpt/<case>/        checkpoints in each layout (config.json, *.safetensors, index)
  bad/<case>/         broken checkpoints, one defect each
  refused/<case>/     well-formed checkpoints of layouts the layer cannot compute (gpt-oss, ...)
  ref/<name>.<array>.npy   the same weights in the library's stacked layout (weights.h), the fp32
                      source weights, dequantized values, router and shared-expert weights
  manifest.json       written last: the cases, shapes and the expected FP8-window statistics

ctest runs this script as the fixture `checkpoints`.
"""

import argparse
import json
import os
import shutil
import struct
import sys

try:
    import numpy as np
    import safetensors
    from safetensors import serialize_file
except ImportError as err:  # the message ctest shows when the fixture fails
    sys.exit(f"gen_checkpoints.py: {err}; install with "
             f"`python3 -m pip install -r tests/python/requirements.txt`")

F32 = np.float32
E, H, I, TOP_K = 8, 128, 128, 2
SHARED_I = 96                  # shared expert intermediate size (partial 64-row FP8 blocks)
FP8_BLOCK = (64, 32)           # quantization_config.weight_block_size
PER_EXPERT = "model.layers.{L}.mlp.experts.{e}.{proj}.weight"
VOCAB = 64                     # token ids of the hash layers' tid2eid tables


# ------------------------------------------------------------------ element formats (SPEC §5)

E2M1_TABLE = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6], np.float64)


def _e4m3_table():
    vals = []
    for code in range(0x7F):  # 0x7F is NaN
        e, m = code >> 3, code & 7
        vals.append(m / 8 * 2.0 ** -6 if e == 0 else (1 + m / 8) * 2.0 ** (e - 7))
    return np.array(vals, np.float64)


E4M3_TABLE = _e4m3_table()  # index = code, ascending; max 448


def rne_code(x, table):
    """Index of the table value nearest to |x| (ties to the even index, i.e. an even mantissa),
    saturating at the table's maximum."""
    a = np.minimum(np.abs(np.asarray(x, np.float64)), table[-1])
    hi = np.clip(np.searchsorted(table, a, side="left"), 0, len(table) - 1)
    lo = np.maximum(hi - 1, 0)
    d_lo, d_hi = a - table[lo], table[hi] - a
    pick_hi = (d_hi < d_lo) | ((d_hi == d_lo) & (hi % 2 == 0))
    return np.where(pick_hi, hi, lo).astype(np.uint8)


def e2m1_encode(x):
    x = np.asarray(x, np.float64)
    return (rne_code(x, E2M1_TABLE) | np.where(np.signbit(x), 8, 0)).astype(np.uint8)


def e2m1_decode(codes):
    codes = np.asarray(codes, np.uint8)
    v = E2M1_TABLE[codes & 7]
    return np.where(codes & 8, -v, v)


def e4m3_encode(x):
    x = np.asarray(x, np.float64)
    return (rne_code(x, E4M3_TABLE) | np.where(np.signbit(x), 0x80, 0)).astype(np.uint8)


def e4m3_decode(codes):
    codes = np.asarray(codes, np.uint8)
    v = E4M3_TABLE[np.minimum(codes & 0x7F, 0x7E)]
    return np.where(codes & 0x80, -v, v)


def bf16_bits(x):
    """fp32 -> bf16 round to nearest even (finite inputs)."""
    u = np.asarray(x, F32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def bf16_to_f32(bits):
    return (np.asarray(bits, np.uint32) << 16).view(F32)


def pack_nibbles(codes):
    """[..., k] 4-bit codes -> [..., k/2] bytes, the even element in the low nibble."""
    return (codes[..., 0::2] | (codes[..., 1::2] << 4)).astype(np.uint8)


def unpack_nibbles(packed):
    out = np.empty(packed.shape[:-1] + (packed.shape[-1] * 2,), np.uint8)
    out[..., 0::2] = packed & 0xF
    out[..., 1::2] = packed >> 4
    return out


# ------------------------------------------------------------------ MXFP4 / NVFP4 quantizers

def ceil_log2(q):
    """ceil(log2(q)) exactly, q > 0 float64."""
    m, e = np.frexp(q)
    return np.where(m == 0.5, e - 1, e)


def quantize_mxfp4(w):
    """w fp32 [..., k] -> (packed [..., k/2], E8M0 bytes [..., k/32]). s = 2^ceil(log2(amax/6)),
    byte clamped to [0, 254]; an all-zero block gets byte 127."""
    blocks = np.asarray(w, np.float64).reshape(w.shape[:-1] + (w.shape[-1] // 32, 32))
    amax = np.abs(blocks).max(axis=-1)
    exp = ceil_log2(np.where(amax > 0, amax / 6.0, 1.0))
    byte = np.where(amax > 0, np.clip(127 + exp, 0, 254), 127).astype(np.uint8)
    scale = np.ldexp(1.0, byte.astype(np.int64) - 127)[..., None]
    codes = e2m1_encode(blocks / scale).reshape(w.shape)
    return pack_nibbles(codes), byte


def dequantize_mxfp4(packed, scales):
    v = e2m1_decode(unpack_nibbles(packed))
    k = v.shape[-1]
    s = np.ldexp(1.0, scales.astype(np.int64) - 127)
    return (v.reshape(v.shape[:-1] + (k // 32, 32)) * s[..., None]).reshape(v.shape).astype(F32)


def nvfp4_global_encode(amax):
    amax = F32(amax)
    return F32(1) if amax == 0 else F32(F32(448 * 6) / amax)


def quantize_nvfp4(w, g):
    """fp32 arithmetic left to right as SPEC §4 writes it: s = e4m3(g * amax_b / 6),
    q = e2m1(clamp(v * g / s, +-6)), q = 0 where s == 0."""
    w = np.asarray(w, F32)
    g = F32(g)
    blocks = w.reshape(w.shape[:-1] + (w.shape[-1] // 16, 16))
    amax = np.abs(blocks).max(axis=-1).astype(F32)
    s_code = e4m3_encode((amax * g).astype(F32) / F32(6))
    s = e4m3_decode(s_code).astype(F32)[..., None]
    with np.errstate(divide="ignore", invalid="ignore"):
        q = np.where(s == 0, F32(0), np.clip((blocks * g).astype(F32) / s, F32(-6), F32(6)))
    codes = e2m1_encode(q.astype(F32)).reshape(w.shape)
    return pack_nibbles(codes), s_code


def nvfp4_block_values(packed, scales):
    """e2m1 * e4m3 per element (exact in fp32), without the global scale."""
    v = e2m1_decode(unpack_nibbles(packed))
    k = v.shape[-1]
    s = e4m3_decode(scales)
    return (v.reshape(v.shape[:-1] + (k // 16, 16)) * s[..., None]).reshape(v.shape).astype(F32)


def quantize_fp8_block(w, block):
    """DeepSeek FP8: e4m3 with one fp32 scale_inv per (bn x bk) block, amax/448."""
    bn, bk = block
    rows, k = w.shape
    sr, sc = -(-rows // bn), -(-k // bk)
    scale = np.zeros((sr, sc), F32)
    q = np.zeros(w.shape, np.uint8)
    for i in range(sr):
        for j in range(sc):
            blk = w[i * bn:(i + 1) * bn, j * bk:(j + 1) * bk]
            s = F32(max(np.abs(blk).max(), 1e-12) / 448.0)
            scale[i, j] = s
            q[i * bn:(i + 1) * bn, j * bk:(j + 1) * bk] = e4m3_encode(blk.astype(np.float64) / float(s))
    return q, scale


def dequantize_fp8_block(q, scale, block):
    """bf16(fp32(e4m3) * scale): the product rounded to fp32, then to bf16."""
    bn, bk = block
    s = np.repeat(np.repeat(scale, bn, axis=0), bk, axis=1)[:q.shape[0], :q.shape[1]]
    return bf16_bits((e4m3_decode(q).astype(F32) * s).astype(F32))


def quantize_fp8_e8m0_block(w, block):
    """DeepSeek V4 FP8: e4m3 with one E8M0 scale per (bn x bk) block, s = 2^ceil(log2(amax/448))."""
    bn, bk = block
    rows, k = w.shape
    sr, sc = -(-rows // bn), -(-k // bk)
    scale = np.zeros((sr, sc), np.uint8)
    q = np.zeros(w.shape, np.uint8)
    for i in range(sr):
        for j in range(sc):
            blk = w[i * bn:(i + 1) * bn, j * bk:(j + 1) * bk].astype(np.float64)
            amax = np.abs(blk).max()
            exp = int(ceil_log2(np.float64(amax / 448.0))) if amax > 0 else 0
            scale[i, j] = 127 + exp
            q[i * bn:(i + 1) * bn, j * bk:(j + 1) * bk] = e4m3_encode(blk / 2.0 ** exp)
    return q, scale


def dequantize_fp8_e8m0_block(q, scale, block):
    """bf16(e4m3 * 2^(b - 127)): the product is exact, so is its bf16 (3 mantissa bits)."""
    bn, bk = block
    s = np.ldexp(1.0, np.repeat(np.repeat(scale.astype(np.int64), bn, axis=0), bk, axis=1) - 127)
    return bf16_bits((e4m3_decode(q) * s[:q.shape[0], :q.shape[1]]).astype(F32))


def quantize_nvfp4_tensor(w):
    """ModelOpt NVFP4 of one projection: (packed, e4m3 scales, weight_scale_2 = 1 / g)."""
    g = nvfp4_global_encode(np.abs(w).max())
    packed, scales = quantize_nvfp4(w, g)
    return packed, scales, (F32(1) / g).astype(F32)


def dequantize_nvfp4_shared(packed, scales, ws2):
    """bf16(fp32(e2m1 * e4m3) * weight_scale_2): the first product is exact in fp32, the second
    rounds to fp32, then to bf16 (nearest even)."""
    return bf16_bits((nvfp4_block_values(packed, scales) * F32(ws2)).astype(F32))


# ------------------------------------------------------------------ weights of one layer

class Layer:
    """One MoE layer: fp32 source weights, quantized (MXFP4 or NVFP4), router, shared expert."""

    def __init__(self, rng, fmt, w13_src=None, w2_src=None, shared_fp8=False, shared_kind=None):
        """fmt: mxfp4, nvfp4 or bf16 (unquantized experts); shared_kind: bf16, fp8 (F32
        scale_inv per block), fp8_e8m0 (E8M0 .scale per block, DeepSeek V4) or nvfp4 (ModelOpt)."""
        self.fmt = fmt
        self.w13_src = (w13_src if w13_src is not None else
                        rng.standard_normal((E, 2 * I, H)) / np.sqrt(H)).astype(F32)
        self.w2_src = (w2_src if w2_src is not None else
                       rng.standard_normal((E, H, I)) / np.sqrt(I)).astype(F32)
        if fmt == "mxfp4":
            self.w13, self.w13_scale = quantize_mxfp4(self.w13_src)
            self.w2, self.w2_scale = quantize_mxfp4(self.w2_src)
        elif fmt == "nvfp4":
            self._quantize_nvfp4()
        else:
            self.w13, self.w2 = bf16_bits(self.w13_src), bf16_bits(self.w2_src)
        self.router_w = bf16_bits(rng.standard_normal((E, H)).astype(F32) * F32(0.1))
        self.router_b = (rng.standard_normal(E) * 0.01).astype(F32)
        self.shared_kind = shared_kind or ("fp8" if shared_fp8 else "bf16")
        shared13 = (rng.standard_normal((2 * SHARED_I, H)) / np.sqrt(H)).astype(F32)
        shared2 = (rng.standard_normal((H, SHARED_I)) / np.sqrt(SHARED_I)).astype(F32)
        if self.shared_kind == "fp8_e8m0":
            self.sh_gate = quantize_fp8_e8m0_block(shared13[:SHARED_I], FP8_BLOCK)
            self.sh_up = quantize_fp8_e8m0_block(shared13[SHARED_I:], FP8_BLOCK)
            self.sh_down = quantize_fp8_e8m0_block(shared2, FP8_BLOCK)
            self.shared_w13 = np.concatenate([dequantize_fp8_e8m0_block(*self.sh_gate, FP8_BLOCK),
                                              dequantize_fp8_e8m0_block(*self.sh_up, FP8_BLOCK)])
            self.shared_w2 = dequantize_fp8_e8m0_block(*self.sh_down, FP8_BLOCK)
        elif self.shared_kind == "nvfp4":
            self.sh_gate = quantize_nvfp4_tensor(shared13[:SHARED_I])
            self.sh_up = quantize_nvfp4_tensor(shared13[SHARED_I:])
            self.sh_down = quantize_nvfp4_tensor(shared2)
            self.shared_w13 = np.concatenate([dequantize_nvfp4_shared(*self.sh_gate),
                                              dequantize_nvfp4_shared(*self.sh_up)])
            self.shared_w2 = dequantize_nvfp4_shared(*self.sh_down)
        elif self.shared_kind == "fp8":
            self.sh_gate = quantize_fp8_block(shared13[:SHARED_I], FP8_BLOCK)
            self.sh_up = quantize_fp8_block(shared13[SHARED_I:], FP8_BLOCK)
            self.sh_down = quantize_fp8_block(shared2, FP8_BLOCK)
            self.shared_w13 = np.concatenate([dequantize_fp8_block(*self.sh_gate, FP8_BLOCK),
                                              dequantize_fp8_block(*self.sh_up, FP8_BLOCK)])
            self.shared_w2 = dequantize_fp8_block(*self.sh_down, FP8_BLOCK)
        else:
            self.shared_w13, self.shared_w2 = bf16_bits(shared13), bf16_bits(shared2)

    def _quantize_nvfp4(self):
        """Gate and up quantized with their own global scales: odd experts get an up scale
        2^j times the gate's (a power-of-two ratio the layer folds), even experts share one."""
        self.g13 = np.zeros((E, 2), F32)
        self.g2 = np.zeros(E, F32)
        self.w13 = np.zeros((E, 2 * I, H // 2), np.uint8)
        self.w13_scale = np.zeros((E, 2 * I, H // 16), np.uint8)
        self.w2 = np.zeros((E, H, I // 2), np.uint8)
        self.w2_scale = np.zeros((E, H, I // 16), np.uint8)
        for e in range(E):
            gate, up = self.w13_src[e, :I], self.w13_src[e, I:]
            if e % 2 == 0:
                g_gate = g_up = nvfp4_global_encode(np.abs(self.w13_src[e]).max())
            else:
                g_gate = nvfp4_global_encode(np.abs(gate).max())
                g_limit = nvfp4_global_encode(np.abs(up).max())
                j = int(np.floor(np.log2(float(g_limit) / float(g_gate))))
                g_up = F32(np.ldexp(g_gate, j))
                if j == 0:
                    g_up = F32(g_gate / 2)  # always a distinct pair on odd experts
            self.g13[e] = (g_gate, g_up)
            self.w13[e, :I], self.w13_scale[e, :I] = quantize_nvfp4(gate, g_gate)
            self.w13[e, I:], self.w13_scale[e, I:] = quantize_nvfp4(up, g_up)
            self.g2[e] = nvfp4_global_encode(np.abs(self.w2_src[e]).max())
            self.w2[e], self.w2_scale[e] = quantize_nvfp4(self.w2_src[e], self.g2[e])
        self.ws2_13 = (F32(1) / self.g13).astype(F32)  # weight_scale_2 = 1 / g
        self.ws2_2 = (F32(1) / self.g2).astype(F32)

    def scale_dtype(self):
        return "float8_e8m0fnu" if self.fmt == "mxfp4" else "float8_e4m3fn"

    def per_expert_tensors(self, L, pattern=PER_EXPERT, proj=("gate_proj", "up_proj", "down_proj"),
                           with_input_scale=True):
        t = {}
        sd = self.scale_dtype()
        for e in range(E):
            parts = [(self.w13[e, :I], self.w13_scale[e, :I]), (self.w13[e, I:], self.w13_scale[e, I:]),
                     (self.w2[e], self.w2_scale[e])]
            for p, (w, s) in enumerate(parts):
                name = pattern.format(L=L, e=e, proj=proj[p])
                t[name] = ("uint8", w)
                t[name + "_scale"] = (sd, s)
                if self.fmt == "nvfp4":
                    ws2 = [self.ws2_13[e, 0], self.ws2_13[e, 1], self.ws2_2[e]][p]
                    t[name + "_scale_2"] = ("float32", np.array(ws2, F32))
                    if with_input_scale:
                        t[name[:-6] + "input_scale"] = ("float32", np.array(1.0 / (e + 1), F32))
        return t

    def fused_tensors(self, L, pair_global=True):
        p = f"model.layers.{L}.mlp.experts."
        t = {p + "w13_weight": ("uint8", self.w13), p + "w13_weight_scale": (self.scale_dtype(), self.w13_scale),
             p + "w2_weight": ("uint8", self.w2), p + "w2_weight_scale": (self.scale_dtype(), self.w2_scale)}
        if self.fmt == "nvfp4":
            t[p + "w13_weight_scale_2"] = ("float32", self.ws2_13 if pair_global else self.ws2_13[:, 0].copy())
            t[p + "w2_weight_scale_2"] = ("float32", self.ws2_2)
        return t

    def aux_tensors(self, L):
        p = f"model.layers.{L}.mlp."
        t = {p + "gate.weight": ("bfloat16", self.router_w),
             p + "gate.e_score_correction_bias": ("float32", self.router_b)}
        if self.shared_kind == "fp8":
            for name, (q, s) in (("gate_proj", self.sh_gate), ("up_proj", self.sh_up), ("down_proj", self.sh_down)):
                t[p + f"shared_experts.{name}.weight"] = ("float8_e4m3fn", q)
                t[p + f"shared_experts.{name}.weight_scale_inv"] = ("float32", s)
        elif self.shared_kind == "nvfp4":
            for name, (q, s, ws2) in (("gate_proj", self.sh_gate), ("up_proj", self.sh_up), ("down_proj", self.sh_down)):
                t[p + f"shared_experts.{name}.weight"] = ("uint8", q)
                t[p + f"shared_experts.{name}.weight_scale"] = ("float8_e4m3fn", s)
                t[p + f"shared_experts.{name}.weight_scale_2"] = ("float32", np.array(ws2, F32))
                t[p + f"shared_experts.{name}.input_scale"] = ("float32", np.array(0.5, F32))
        else:
            t[p + "shared_experts.gate_proj.weight"] = ("bfloat16", self.shared_w13[:SHARED_I].copy())
            t[p + "shared_experts.up_proj.weight"] = ("bfloat16", self.shared_w13[SHARED_I:].copy())
            t[p + "shared_experts.down_proj.weight"] = ("bfloat16", self.shared_w2)
        return t

    def native_tensors(self, L, hash_table=None):
        """DeepSeek V4's own names: layers.{L}.ffn.experts.{e}.w1/w3/w2.weight I8 + .scale E8M0;
        the gate with its bias (or, in a hash layer, its tid2eid table); FP8 shared experts with
        E8M0 block scales."""
        assert self.fmt == "mxfp4" and self.shared_kind == "fp8_e8m0"
        p = f"layers.{L}.ffn."
        t = {}
        for e in range(E):
            parts = [(self.w13[e, :I], self.w13_scale[e, :I]), (self.w13[e, I:], self.w13_scale[e, I:]),
                     (self.w2[e], self.w2_scale[e])]
            for n, (w, sc) in zip(("w1", "w3", "w2"), parts):
                t[p + f"experts.{e}.{n}.weight"] = ("int8", np.ascontiguousarray(w).view(np.int8))
                t[p + f"experts.{e}.{n}.scale"] = ("float8_e8m0fnu", sc)
        t[p + "gate.weight"] = ("bfloat16", self.router_w)
        if hash_table is not None:
            t[p + "gate.tid2eid"] = ("int64", hash_table)
        else:
            t[p + "gate.bias"] = ("float32", self.router_b)
        for n, (q, sc) in (("w1", self.sh_gate), ("w3", self.sh_up), ("w2", self.sh_down)):
            t[p + f"shared_experts.{n}.weight"] = ("float8_e4m3fn", q)
            t[p + f"shared_experts.{n}.scale"] = ("float8_e8m0fnu", sc)
        return t

    def transformers_tensors(self, L, hash_table=None):
        """transformers' names for DeepSeek V4 after conversion: fused gate_up_proj [E, 2I, H] /
        down_proj [E, H, I] in bf16, mlp.gate.{weight, e_score_correction_bias | tid2eid}, bf16
        shared experts."""
        assert self.fmt == "bf16" and self.shared_kind == "bf16"
        p = f"model.layers.{L}.mlp."
        t = {p + "experts.gate_up_proj": ("bfloat16", self.w13), p + "experts.down_proj": ("bfloat16", self.w2),
             p + "gate.weight": ("bfloat16", self.router_w)}
        if hash_table is not None:
            t[p + "gate.tid2eid"] = ("int64", hash_table)
        else:
            t[p + "gate.e_score_correction_bias"] = ("float32", self.router_b)
        t[p + "shared_experts.gate_proj.weight"] = ("bfloat16", self.shared_w13[:SHARED_I].copy())
        t[p + "shared_experts.up_proj.weight"] = ("bfloat16", self.shared_w13[SHARED_I:].copy())
        t[p + "shared_experts.down_proj.weight"] = ("bfloat16", self.shared_w2)
        return t

    def compressed_tensors(self, L):
        """llm-compressor NVFP4: weight_packed, weight_scale (e4m3), weight_global_scale = g (the
        encode factor, 1 / weight_scale_2), input_global_scale."""
        assert self.fmt == "nvfp4"
        t = {}
        for e in range(E):
            parts = [(self.w13[e, :I], self.w13_scale[e, :I], self.g13[e, 0]),
                     (self.w13[e, I:], self.w13_scale[e, I:], self.g13[e, 1]),
                     (self.w2[e], self.w2_scale[e], self.g2[e])]
            for n, (w, sc, g) in zip(("gate_proj", "up_proj", "down_proj"), parts):
                base = f"model.layers.{L}.mlp.experts.{e}.{n}."
                t[base + "weight_packed"] = ("uint8", w)
                t[base + "weight_scale"] = ("float8_e4m3fn", sc)
                t[base + "weight_global_scale"] = ("float32", np.array([g], F32))
                t[base + "input_global_scale"] = ("float32", np.array([2.0], F32))
        return t

    def gpt_oss_tensors(self, L):
        """gpt-oss's MXFP4 names: *_blocks [E, N, K/32, 16], *_scales, and expert biases."""
        assert self.fmt == "mxfp4"
        p = f"model.layers.{L}.mlp."
        return {p + "experts.gate_up_proj_blocks": ("uint8", self.w13.reshape(E, 2 * I, H // 32, 16)),
                p + "experts.gate_up_proj_scales": ("uint8", self.w13_scale),
                p + "experts.gate_up_proj_bias": ("bfloat16", np.zeros((E, 2 * I), np.uint16)),
                p + "experts.down_proj_blocks": ("uint8", self.w2.reshape(E, H, I // 32, 16)),
                p + "experts.down_proj_scales": ("uint8", self.w2_scale),
                p + "experts.down_proj_bias": ("bfloat16", np.zeros((E, H), np.uint16)),
                p + "router.weight": ("bfloat16", self.router_w),
                p + "router.bias": ("bfloat16", bf16_bits(self.router_b))}

    def write_reference(self, ref_dir, name):
        arrays = {"w13": self.w13, "w13_scale": getattr(self, "w13_scale", None), "w2": self.w2,
                  "w2_scale": getattr(self, "w2_scale", None),
                  "w13_src": self.w13_src, "w2_src": self.w2_src, "router_w": bf16_to_f32(self.router_w),
                  "router_b": self.router_b, "shared_w13": self.shared_w13, "shared_w2": self.shared_w2}
        if self.fmt == "bf16":
            for k in ("w13_scale", "w2_scale"):
                del arrays[k]
        elif self.fmt == "mxfp4":
            arrays["w13_deq"] = dequantize_mxfp4(self.w13, self.w13_scale)
            arrays["w2_deq"] = dequantize_mxfp4(self.w2, self.w2_scale)
        else:
            arrays.update(w13_global=self.ws2_13, w2_global=self.ws2_2, g13=self.g13, g2=self.g2,
                          w13_deq=nvfp4_block_values(self.w13, self.w13_scale),
                          w2_deq=nvfp4_block_values(self.w2, self.w2_scale))
        for k, v in arrays.items():
            np.save(os.path.join(ref_dir, f"{name}.{k}.npy"), np.ascontiguousarray(v))


def dense_tensors(rng, L):
    p = f"model.layers.{L}.mlp."
    return {p + n: ("bfloat16", bf16_bits(rng.standard_normal(s).astype(F32) * F32(0.05)))
            for n, s in (("gate_proj.weight", (64, H)), ("up_proj.weight", (64, H)), ("down_proj.weight", (H, 64)))}


# ------------------------------------------------------------------ writing

def save(path, tensors, metadata=None):
    """tensors: name -> (dtype name as the safetensors package spells it, numpy array)."""
    arrays = {n: np.ascontiguousarray(a) for n, (d, a) in tensors.items()}
    if hasattr(safetensors, "TensorSpec"):
        specs = {n: safetensors.TensorSpec(dtype=d, shape=tuple(arrays[n].shape),
                                           data_ptr=arrays[n].ctypes.data, data_len=arrays[n].nbytes)
                 for n, (d, _) in tensors.items()}
    else:  # older releases take plain dicts
        specs = {n: {"dtype": d, "shape": list(arrays[n].shape), "data": arrays[n].tobytes()}
                 for n, (d, _) in tensors.items()}
    serialize_file(specs, path, metadata=metadata or {"format": "pt"})


def save_sharded(directory, tensors, num_shards):
    names = sorted(tensors)
    per = -(-len(names) // num_shards)
    weight_map = {}
    for s in range(num_shards):
        fname = f"model-{s + 1:05d}-of-{num_shards:05d}.safetensors"
        chunk = names[s * per:(s + 1) * per]
        save(os.path.join(directory, fname), {n: tensors[n] for n in chunk})
        weight_map.update({n: fname for n in chunk})
    with open(os.path.join(directory, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": sum(np.asarray(a).nbytes for _, a in tensors.values())},
                   "weight_map": weight_map}, f, indent=1)


def config(quant, layers=3, first_dense=1):
    return {"model_type": "deepseek_v3", "hidden_size": H, "moe_intermediate_size": I,
            "n_routed_experts": E, "num_experts_per_tok": TOP_K, "num_hidden_layers": layers,
            "first_k_dense_replace": first_dense, "routed_scaling_factor": 2.5,
            "n_shared_experts": 1, "quantization_config": quant}


def new_dir(root, name, cfg=None):
    d = os.path.join(root, name)
    os.makedirs(d)
    if cfg is not None:
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(cfg, f, indent=1)
    return d


MX_QUANT = {"quant_method": "mxfp4", "weight_block_size": list(FP8_BLOCK)}
NV_QUANT = {"quant_method": "modelopt", "quant_algo": "NVFP4", "weight_block_size": list(FP8_BLOCK)}


# ------------------------------------------------------------------ heavy-tailed weights

def heavy_tailed_weights(rng):
    """Student-t weights with outlier columns and zero blocks. W13: experts 0-3 have outlier
    columns (x 2^16) in part of their up rows, expert 5 has rows with one tiny block (x 2^-20),
    so W13 holds rows inside and outside the FP8 window; W2 (Student-t, some zero blocks) stays
    inside."""
    w13 = (rng.standard_t(3, (E, 2 * I, H)) * 0.02).astype(F32)
    w2 = (rng.standard_t(4, (E, H, I)) * 0.02).astype(F32)
    for e in range(4):
        rows = slice(I, I + 16 * (e + 1))
        w13[e, rows, 5] *= F32(2.0 ** 16)       # outlier column in block 0
        w13[e, rows, 77] *= F32(2.0 ** 14)      # and in block 2
    w13[5, :32, 32:64] *= F32(2.0 ** -20)       # one tiny block in 32 rows
    w13[6, 0:40, :] = 0                         # rows of zero blocks only
    w13[6, 40:80, 0:96] = 0                     # rows with one non-zero block
    w2[3, :, 32:64] = 0                         # a zero block in every row of expert 3
    w2[7, 10:20, :] = 0
    return w13, w2


def row_spans(packed, scales):
    """Per-row max - min E8M0 byte over blocks with a non-zero e2m1 code (0 when none)."""
    codes = unpack_nibbles(packed)
    blocks = codes.reshape(codes.shape[:-1] + (codes.shape[-1] // 32, 32))
    nonzero = (blocks & 7).any(axis=-1)
    s = scales.astype(np.int64)
    hi = np.where(nonzero, s, -1).max(axis=-1)
    lo = np.where(nonzero, s, 256).min(axis=-1)
    return np.where(hi >= 0, hi - lo, 0)


def window_stats(layer):
    s13, s2 = row_spans(layer.w13, layer.w13_scale), row_spans(layer.w2, layer.w2_scale)
    spans = np.concatenate([s13.ravel(), s2.ravel()])
    hist = np.bincount(spans, minlength=int(spans.max()) + 1)
    return {"w13_rows": int(s13.size), "w13_rows_inside": int((s13 <= 14).sum()),
            "w2_rows": int(s2.size), "w2_rows_inside": int((s2 <= 14).sum()),
            "max_row_span": int(spans.max()), "span_histogram": [int(v) for v in hist]}


# ------------------------------------------------------------------ broken files

def raw_file(path, header, data=b"", header_len=None, pad=True):
    """A safetensors file written by hand: header a dict (dumped as JSON) or raw bytes."""
    text = header if isinstance(header, bytes) else json.dumps(header).encode()
    if pad:
        text += b" " * (-len(text) % 8)
    n = len(text) if header_len is None else header_len
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", n) + text + data)


def header_of(path):
    with open(path, "rb") as f:
        blob = f.read()
    n = struct.unpack("<Q", blob[:8])[0]
    return json.loads(blob[8:8 + n]), blob[8 + n:]


def write_bad_cases(root, good_layer):
    """One defect per case; the C++ test knows the error each must give."""
    cases = []

    def case(name, cfg=True):
        cases.append(name)
        return new_dir(root, name, config(MX_QUANT) if cfg else None)

    def good_file(d, tensors=None):
        path = os.path.join(d, "model.safetensors")
        save(path, tensors if tensors is not None else good_layer.per_expert_tensors(1))
        return path

    def rewrite(path, edit):
        header, data = header_of(path)
        data = edit(header, data)
        raw_file(path, header, data)

    # -- the container
    p = good_file(case("truncated"))
    with open(p, "r+b") as f:
        f.truncate(os.path.getsize(p) * 3 // 5)
    raw_file(os.path.join(case("header_length_beyond_file"), "model.safetensors"),
             {"a": {"dtype": "U8", "shape": [4], "data_offsets": [0, 4]}}, bytes(4), header_len=1 << 40)
    raw_file(os.path.join(case("header_length_zero"), "model.safetensors"), b"", bytes(16), header_len=0)
    with open(os.path.join(case("shorter_than_8_bytes"), "model.safetensors"), "wb") as f:
        f.write(b"\x10\x00\x00")
    raw_file(os.path.join(case("header_not_json"), "model.safetensors"), b"{\"a\": {\"dtype\": ", bytes(8))
    raw_file(os.path.join(case("header_not_object"), "model.safetensors"), b"[1, 2, 3]", bytes(8))
    raw_file(os.path.join(case("duplicate_tensor"), "model.safetensors"),
             b'{"a": {"dtype": "U8", "shape": [4], "data_offsets": [0, 4]}, '
             b'"a": {"dtype": "U8", "shape": [4], "data_offsets": [4, 8]}}', bytes(8))

    def lie_offsets(h, data):
        name = PER_EXPERT.format(L=1, e=2, proj="up_proj")
        b, _ = h[name]["data_offsets"]
        h[name]["data_offsets"] = [b, len(data) + 64]
        return data
    rewrite(good_file(case("offsets_past_end")), lie_offsets)

    def short_span(h, data):
        name = PER_EXPERT.format(L=1, e=2, proj="up_proj") + "_scale"
        b, e = h[name]["data_offsets"]
        h[name]["data_offsets"] = [b, e - 8]
        return data
    rewrite(good_file(case("offsets_length_mismatch")), short_span)

    def reversed_offsets(h, data):
        name = PER_EXPERT.format(L=1, e=0, proj="down_proj")
        b, e = h[name]["data_offsets"]
        h[name]["data_offsets"] = [e, b]
        return data
    rewrite(good_file(case("offsets_reversed")), reversed_offsets)

    def negative_offset(h, data):
        h[PER_EXPERT.format(L=1, e=0, proj="gate_proj")]["data_offsets"] = [-16, 0]
        return data
    rewrite(good_file(case("offsets_negative")), negative_offset)

    def overlap(h, data):
        a = PER_EXPERT.format(L=1, e=4, proj="gate_proj") + "_scale"
        b = PER_EXPERT.format(L=1, e=4, proj="up_proj") + "_scale"
        h[b]["data_offsets"] = list(h[a]["data_offsets"])
        return data
    rewrite(good_file(case("overlapping_tensors")), overlap)

    def unknown_dtype(h, data):
        h[PER_EXPERT.format(L=1, e=1, proj="gate_proj")]["dtype"] = "Q4_K"
        return data
    rewrite(good_file(case("unknown_dtype")), unknown_dtype)

    def huge_shape(h, data):
        h[PER_EXPERT.format(L=1, e=1, proj="down_proj")]["shape"] = [1 << 40, 1 << 40]
        return data
    rewrite(good_file(case("shape_overflow")), huge_shape)

    # -- the index
    d = case("index_missing_shard")
    save_sharded(d, good_layer.per_expert_tensors(1), 2)
    os.remove(os.path.join(d, "model-00002-of-00002.safetensors"))
    d = case("index_path_traversal")
    save_sharded(d, good_layer.per_expert_tensors(1), 2)
    idx = os.path.join(d, "model.safetensors.index.json")
    with open(idx) as f:
        j = json.load(f)
    j["weight_map"][PER_EXPERT.format(L=1, e=0, proj="gate_proj")] = "../model-00001-of-00002.safetensors"
    with open(idx, "w") as f:
        json.dump(j, f)
    d = case("index_wrong_shard")
    save_sharded(d, good_layer.per_expert_tensors(1), 2)
    with open(os.path.join(d, "model.safetensors.index.json")) as f:
        j = json.load(f)
    name = PER_EXPERT.format(L=1, e=7, proj="down_proj")  # in the second shard
    j["weight_map"][name] = "model-00001-of-00002.safetensors"
    with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
        json.dump(j, f)

    # -- the layer (well-formed files, wrong contents)
    t = good_layer.per_expert_tensors(1)
    name = PER_EXPERT.format(L=1, e=3, proj="gate_proj") + "_scale"
    t[name] = ("float32", t[name][1].astype(F32))
    good_file(case("wrong_scale_dtype"), t)

    t = good_layer.per_expert_tensors(1)
    name = PER_EXPERT.format(L=1, e=6, proj="up_proj")
    t[name] = ("int16", t[name][1].view(np.int16))
    good_file(case("wrong_weight_dtype"), t)

    t = good_layer.per_expert_tensors(1)
    for proj in ("gate_proj", "up_proj", "down_proj"):
        base = PER_EXPERT.format(L=1, e=5, proj=proj)
        del t[base], t[base + "_scale"]
    good_file(case("missing_expert"), t)

    t = good_layer.per_expert_tensors(1)
    name = PER_EXPERT.format(L=1, e=2, proj="down_proj") + "_scale"
    t[name] = ("float8_e8m0fnu", np.ascontiguousarray(t[name][1][:, :2]))
    good_file(case("scale_wrong_shape"), t)

    t = good_layer.per_expert_tensors(1)
    name = PER_EXPERT.format(L=1, e=3, proj="up_proj") + "_scale"
    s = t[name][1].copy()
    s[17, 2] = 0xFF
    t[name] = ("float8_e8m0fnu", s)
    good_file(case("scale_0xff"), t)

    t = good_layer.fused_tensors(1)
    s = t["model.layers.1.mlp.experts.w2_weight_scale"][1].copy()
    s[6, 100, 3] = 0xFF
    t["model.layers.1.mlp.experts.w2_weight_scale"] = ("float8_e8m0fnu", s)
    good_file(case("fused_scale_0xff"), t)

    d = case("config_bad_value", cfg=False)
    bad_cfg = config(MX_QUANT)
    bad_cfg["hidden_size"] = "128"
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(bad_cfg, f)
    good_file(d)
    return cases


def write_nvfp4_bad_cases(root, nv_layer, cases):
    t = nv_layer.per_expert_tensors(1)
    name = PER_EXPERT.format(L=1, e=4, proj="down_proj") + "_scale"
    s = t[name][1].copy()
    s[9, 1] = 0x7F
    t[name] = ("float8_e4m3fn", s)
    d = new_dir(root, "nvfp4_scale_nan", config(NV_QUANT))
    save(os.path.join(d, "model.safetensors"), t)
    cases.append("nvfp4_scale_nan")

    t = nv_layer.per_expert_tensors(1)
    name = PER_EXPERT.format(L=1, e=1, proj="up_proj") + "_scale_2"
    t[name] = ("float32", np.array(np.nan, F32))
    d = new_dir(root, "nvfp4_global_nan", config(NV_QUANT))
    save(os.path.join(d, "model.safetensors"), t)
    cases.append("nvfp4_global_nan")


# ------------------------------------------------------------------ model families' own layouts

def hash_table(rng):
    """A tid2eid table [VOCAB, TOP_K] of distinct expert ids per row (int64, as DeepSeek V4 ships)."""
    return np.stack([rng.permutation(E)[:TOP_K] for _ in range(VOCAB)]).astype(np.int64)


def v4_config(**extra):
    """config.json of DeepSeek V4 (its own files' keys), shapes scaled down."""
    c = {"model_type": "deepseek_v4", "hidden_size": H, "moe_intermediate_size": I,
         "n_routed_experts": E, "n_shared_experts": 1, "num_experts_per_tok": TOP_K,
         "num_hidden_layers": 2, "num_hash_layers": 1, "vocab_size": VOCAB,
         "scoring_func": "sqrtsoftplus", "routed_scaling_factor": 1.5, "swiglu_limit": 10.0,
         "expert_dtype": "fp4", "norm_topk_prob": True, "topk_method": "noaux_tc",
         "quantization_config": {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
                                 "scale_fmt": "ue8m0", "weight_block_size": list(FP8_BLOCK)}}
    c.update(extra)
    return c


def write_model_layouts(ck, refused, bad, ref, rng, mx1, mx2, nv1, bad_cases):
    """Checkpoints in the layouts model families ship: DeepSeek V4's own files, transformers'
    conversion of them, ModelOpt NVFP4 with an NVFP4 shared expert, Qwen3-MoE, compressed-tensors;
    gpt-oss and integer compressed-tensors (refused with their reasons); configs with keys no
    layout reads."""
    # DeepSeek V4's own names: layer 0 a hash layer (tid2eid), layer 1 scored with a bias.
    ds0 = Layer(rng, "mxfp4", shared_kind="fp8_e8m0")
    ds1 = Layer(rng, "mxfp4", shared_kind="fp8_e8m0")
    table = hash_table(rng)
    ds0.write_reference(ref, "ds_l0")
    ds1.write_reference(ref, "ds_l1")
    np.save(os.path.join(ref, "ds_l0.tid2eid.npy"), table)
    d = new_dir(ck, "deepseek_v4_native", v4_config())
    t = ds0.native_tensors(0, table)
    t.update(ds1.native_tensors(1))
    save_sharded(d, t, 2)

    # transformers' converted names (unquantized bf16 fused experts), hash layer 0 by
    # mlp_layer_types.
    tf0 = Layer(rng, "bf16")
    tf1 = Layer(rng, "bf16")
    tf_table = hash_table(rng)
    tf0.write_reference(ref, "tf_l0")
    tf1.write_reference(ref, "tf_l1")
    np.save(os.path.join(ref, "tf_l0.tid2eid.npy"), tf_table)
    cfg = v4_config(mlp_layer_types=["hash_moe", "moe"])
    del cfg["num_hash_layers"], cfg["quantization_config"], cfg["expert_dtype"]
    d = new_dir(ck, "transformers_deepseek_v4", cfg)
    t = tf0.transformers_tensors(0, tf_table)
    t.update(tf1.transformers_tensors(1))
    save(os.path.join(d, "model.safetensors"), t)

    # ModelOpt NVFP4 with an NVFP4 shared expert.
    nvs = Layer(rng, "nvfp4", shared_kind="nvfp4")
    nvs.write_reference(ref, "nvs_l1")
    d = new_dir(ck, "nvfp4_shared_nvfp4", config(NV_QUANT, layers=2))
    t = nvs.per_expert_tensors(1)
    t.update(nvs.aux_tensors(1))
    save(os.path.join(d, "model.safetensors"), t)

    # Qwen3-MoE NVFP4: num_experts names E; a gate without bias; no shared expert.
    d = new_dir(ck, "qwen3_moe_nvfp4",
                {"model_type": "qwen3_moe", "hidden_size": H, "intermediate_size": 4 * I,
                 "moe_intermediate_size": I, "num_experts": E, "num_experts_per_tok": TOP_K,
                 "num_hidden_layers": 2, "decoder_sparse_step": 1, "norm_topk_prob": True,
                 "quantization_config": {"quant_method": "modelopt", "quant_algo": "NVFP4"}})
    t = nv1.per_expert_tensors(1)
    t["model.layers.1.mlp.gate.weight"] = ("bfloat16", nv1.router_w)
    save(os.path.join(d, "model.safetensors"), t)

    # compressed-tensors NVFP4 (llm-compressor): the weights of nv_l1, globals stored as g.
    ct_config = {"model_type": "qwen3_moe", "hidden_size": H, "moe_intermediate_size": I,
                 "num_experts": E, "num_experts_per_tok": TOP_K, "num_hidden_layers": 2,
                 "quantization_config": {"quant_method": "compressed-tensors",
                                         "format": "nvfp4-pack-quantized"}}
    d = new_dir(ck, "compressed_tensors_nvfp4", ct_config)
    save(os.path.join(d, "model.safetensors"), nv1.compressed_tensors(1))

    # A config whose quantization_config.weight_block_size is a number: no MXFP4 expert and no
    # bf16 shared expert reads it, so the checkpoint loads (and inspect lists the key ignored).
    cfg = config(dict(MX_QUANT, weight_block_size=128))
    d = new_dir(ck, "block_size_number", cfg)
    t = mx2.per_expert_tensors(1)
    t.update(mx2.aux_tensors(1))
    save(os.path.join(d, "model.safetensors"), t)
    # ... while an FP8 shared expert with one fp32 scale per block does read it.
    d = new_dir(bad, "fp8_shared_block_size_number", cfg)
    t = mx1.per_expert_tensors(1)
    t.update(mx1.aux_tensors(1))
    save(os.path.join(d, "model.safetensors"), t)
    bad_cases.append("fp8_shared_block_size_number")

    # gpt-oss: MXFP4 *_blocks / *_scales with expert biases and its own activation (refused).
    d = new_dir(refused, "gpt_oss", {"model_type": "gpt_oss", "hidden_size": H, "intermediate_size": I,
                                     "num_local_experts": E, "num_experts_per_tok": TOP_K,
                                     "num_hidden_layers": 2, "swiglu_limit": 7.0,
                                     "quantization_config": {"quant_method": "mxfp4"}})
    save(os.path.join(d, "model.safetensors"), mx1.gpt_oss_tensors(1))

    # compressed-tensors pack-quantized int4: weight_packed in int32 words (refused).
    d = new_dir(refused, "compressed_tensors_int4", dict(ct_config, quantization_config={
        "quant_method": "compressed-tensors", "format": "pack-quantized"}))
    t = {}
    for e in range(E):
        for n, (rows, k) in (("gate_proj", (I, H)), ("up_proj", (I, H)), ("down_proj", (H, I))):
            base = f"model.layers.1.mlp.experts.{e}.{n}."
            t[base + "weight_packed"] = ("int32", np.zeros((rows, k // 8), np.int32))
            t[base + "weight_scale"] = ("bfloat16", np.full((rows, k // 32), 0x3F80, np.uint16))
            t[base + "weight_shape"] = ("int64", np.array([rows, k], np.int64))
    save(os.path.join(d, "model.safetensors"), t)


# ------------------------------------------------------------------ main

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out_dir")
    out = ap.parse_args().out_dir
    if os.path.exists(out):
        shutil.rmtree(out)
    ck, bad, ref, refused = (os.path.join(out, d) for d in ("ckpt", "bad", "ref", "refused"))
    for d in (ck, bad, ref, refused):
        os.makedirs(d)
    rng = np.random.default_rng(20261215)

    mx1 = Layer(rng, "mxfp4", shared_fp8=True)
    mx2 = Layer(rng, "mxfp4")
    nv1 = Layer(rng, "nvfp4")
    heavy = Layer(rng, "mxfp4", *heavy_tailed_weights(rng))
    for layer, name in ((mx1, "mx_l1"), (mx2, "mx_l2"), (nv1, "nv_l1"), (heavy, "heavy_l1")):
        layer.write_reference(ref, name)

    # DeepSeek per-expert MXFP4, one file: layer 0 dense, layers 1 and 2 MoE.
    d = new_dir(ck, "mxfp4_per_expert", config(MX_QUANT))
    t = dense_tensors(rng, 0)
    for L, layer in ((1, mx1), (2, mx2)):
        t.update(layer.per_expert_tensors(L))
        t.update(layer.aux_tensors(L))
    save(os.path.join(d, "model.safetensors"), t)

    # The same weights fused, in 3 shards with an index.
    d = new_dir(ck, "mxfp4_fused_sharded", config(MX_QUANT))
    t = dense_tensors(rng, 0)
    for L, layer in ((1, mx1), (2, mx2)):
        t.update(layer.fused_tensors(L))
        t.update(layer.aux_tensors(L))
    save_sharded(d, t, 3)

    # ModelOpt NVFP4 per-expert, 2 shards with an index; layer 1 only.
    d = new_dir(ck, "nvfp4_per_expert_sharded", config(NV_QUANT, layers=2))
    t = nv1.per_expert_tensors(1)
    t.update(nv1.aux_tensors(1))
    save_sharded(d, t, 2)

    # NVFP4 fused: w13_weight_scale_2 [E, 2].
    d = new_dir(ck, "nvfp4_fused", config(NV_QUANT, layers=2))
    save(os.path.join(d, "model.safetensors"), nv1.fused_tensors(1))

    # Mixtral-like names, no config.json: shapes from the tensors.
    d = new_dir(ck, "pattern_no_config")
    save(os.path.join(d, "model.safetensors"),
         mx1.per_expert_tensors(1, "model.layers.{L}.block_sparse_moe.experts.{e}.{proj}.weight",
                                ("w1", "w3", "w2")))

    # Heavy-tailed weights, per-expert MXFP4.
    d = new_dir(ck, "heavy_tailed", config(MX_QUANT, layers=2))
    save(os.path.join(d, "model.safetensors"), heavy.per_expert_tensors(1))

    bad_cases = write_bad_cases(bad, mx1)
    write_nvfp4_bad_cases(bad, nv1, bad_cases)
    write_model_layouts(ck, refused, bad, ref, rng, mx1, mx2, nv1, bad_cases)

    manifest = {"E": E, "H": H, "I": I, "top_k": TOP_K, "shared_intermediate": SHARED_I,
                "fp8_block": list(FP8_BLOCK), "vocab": VOCAB,
                "checkpoints": sorted(os.listdir(ck)), "bad": bad_cases,
                "refused": sorted(os.listdir(refused)),
                "heavy_tailed_window": window_stats(heavy), "mx_l1_window": window_stats(mx1)}
    with open(os.path.join(out, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)


if __name__ == "__main__":
    main()
