"""Seeded test problems for the package tests: MXFP4 / NVFP4 / bf16 expert weights and routed
inputs in the layouts of moe_ep.WeightPack, as numpy arrays (ml_dtypes element types)."""

from __future__ import annotations

from dataclasses import dataclass, field

import ml_dtypes
import numpy as np

import reference_layer as ref

TINY = dict(num_experts=16, hidden_size=256, intermediate_size=128, top_k=4)
CLAMP = 10.0


@dataclass
class Problem:
    recipe: str
    weight_format: str
    E: int
    H: int
    I: int
    K: int
    tensors: dict = field(default_factory=dict)  # WeightPack factory arguments
    oracle: ref.ReferenceWeights = None


def make_problem(recipe: str, weight_format: str, seed: int, dims: dict = TINY) -> Problem:
    rng = np.random.default_rng(seed)
    E, H, I = dims["num_experts"], dims["hidden_size"], dims["intermediate_size"]
    p = Problem(recipe, weight_format, E, H, I, dims["top_k"])

    def nibbles(shape):
        return rng.integers(0, 16, shape, dtype=np.uint8)

    if weight_format == "mxfp4":
        w13 = ref.pack_e2m1(nibbles((E, 2 * I, H)))
        w2 = ref.pack_e2m1(nibbles((E, H, I)))
        s13 = rng.integers(127 - 7, 127 - 4, (E, 2 * I, H // 32), dtype=np.uint8)
        s2 = rng.integers(127 - 7, 127 - 4, (E, H, I // 32), dtype=np.uint8)
        p.tensors = dict(w13=w13, w13_scale=s13, w2=w2, w2_scale=s2)
        p.oracle = ref.weights_from_mxfp4(w13, s13, w2, s2)
    elif weight_format == "nvfp4":
        w13 = ref.pack_e2m1(nibbles((E, 2 * I, H)))
        w2 = ref.pack_e2m1(nibbles((E, H, I)))
        # e4m3 block scales in [0.5, 4); weight_scale_2 per expert, shared by gate and up
        s13 = ref.e4m3_encode(rng.uniform(0.5, 4.0, (E, 2 * I, H // 16)))
        s2 = ref.e4m3_encode(rng.uniform(0.5, 4.0, (E, H, I // 16)))
        g13 = np.repeat(rng.uniform(0.005, 0.02, (E, 1)), 2, axis=1).astype(np.float32)
        g2 = rng.uniform(0.005, 0.02, E).astype(np.float32)
        p.tensors = dict(w13=w13, w13_scale=s13.view(ml_dtypes.float8_e4m3fn), w13_global=g13,
                         w2=w2, w2_scale=s2.view(ml_dtypes.float8_e4m3fn), w2_global=g2)
        p.oracle = ref.weights_from_nvfp4(w13, s13, g13, w2, s2, g2)
    elif weight_format == "bf16":
        w13 = (rng.standard_normal((E, 2 * I, H)) / np.sqrt(H)).astype(ml_dtypes.bfloat16)
        w2 = (rng.standard_normal((E, H, I)) / np.sqrt(I)).astype(ml_dtypes.bfloat16)
        p.tensors = dict(w13=w13, w2=w2)
        if recipe != "mxfp4":
            raise ValueError("the oracle quantizes bf16 weights for the mxfp4 recipe only")
        # the layer quantizes bf16 weights to MXFP4 by docs/spec.md §5; so does the oracle
        q13, s13 = ref.mxfp4_quantize(w13.astype(np.float64))
        q2, s2 = ref.mxfp4_quantize(w2.astype(np.float64))
        p.oracle = ref.weights_from_mxfp4(q13, s13, q2, s2)
    else:
        raise ValueError(weight_format)
    return p


def random_inputs(p: Problem, T: int, seed: int, holes: float = 0.1, id_dtype=np.int32):
    """x ~ N(0, 1) bf16; distinct experts per token, -1 with probability `holes`; positive
    weights."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((T, p.H)).astype(ml_dtypes.bfloat16)
    ids = np.stack([rng.permutation(p.E)[:p.K] for _ in range(T)]) if T else np.zeros((0, p.K))
    ids = np.where(rng.random((T, p.K)) < holes, -1, ids).astype(id_dtype)
    w = rng.uniform(0.1, 1.0, (T, p.K)).astype(np.float32)
    return x, ids, w


def structured_inputs(p: Problem, T: int):
    """x[t, j] = small integers exactly representable in bf16 and e4m3 ((t + j) % 9 - 4);
    token t routes to experts (t + k) % 3 (so experts >= 3 get no token), the last slot of odd
    tokens is -1 and token 2 has only -1 slots (its row must be exactly zero)."""
    t_idx = np.arange(T)[:, None]
    x = (((t_idx + np.arange(p.H)[None, :]) % 9) - 4).astype(ml_dtypes.bfloat16)
    ids = ((t_idx + np.arange(p.K)[None, :]) % 3).astype(np.int64)
    ids[1::2, -1] = -1
    if T > 2:
        ids[2, :] = -1
    w = np.full((T, p.K), 0.25, np.float32)
    return x, ids, w
