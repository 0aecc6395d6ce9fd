#!/usr/bin/env python3
"""What a coarser promotion of the FP8 GEMMs would cost in accuracy, emulated on the CPU.

The recipe (docs/spec.md) quantizes activations to Q8: e4m3 codes with one E8M0 scale per 32
elements. A GEMM on FP8 tensor cores sums each k32 block's products and multiplies the sum by the
block's activation scale in fp32 (the promotion: one FFMA per row, token and k32 block). To
promote once per group of g k32 blocks instead, the group's blocks must share a scale: each
block's codes re-encoded to e4m3 at the group's largest scale,

    A'[k] = e4m3(e4m3_value(A[k]) * 2^(sa[kb] - max over the group of sa)),

which is exact except where a code falls into e4m3's subnormals or below them. This script
measures that re-encoding alone (the tensor cores' own k-sum precision is not emulated), in
float64, against the recipe's GEMM on the same quantized weights, for activations drawn from a
normal, a Student-t (3 degrees of freedom), a normal with a few outlier columns, and a normal
whose k32 blocks are each scaled by 2^-j, j uniform in 0..8 (a token's neighbouring scales apart
by up to 8 octaves, the re-encoding's worst ordinary case), one row per (distribution, group) as
CSV:

    python3 bench/numerics/promotion_groups.py [--commit C] > bench/results/promotion_groups.csv

Columns: rel_err_vs_recipe (the re-encoded GEMM against the recipe's) and rel_err_recipe (the
recipe's GEMM against the unquantized activations, for scale), both ||out - ref|| / ||ref||;
zeroed: the share of nonzero codes the re-encoding turns into zero; rel_err_direct_vs_recipe: the
activations quantized once at the group's largest scale instead (a quantizer that writes one
scale per group), against the recipe's GEMM.
"""

import argparse
import datetime
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests" / "python"))
import reference_layer as ref  # noqa: E402  (the project's numpy reference, its own codecs)

H = 4096  # deepseek-v4-flash's hidden size: GEMM 1's K
ROWS = 256  # weight rows sampled
TOKENS = 64


def activations(kind, rng):
    if kind == "normal":
        return rng.standard_normal((TOKENS, H))
    if kind == "student-t3":
        return rng.standard_t(3, (TOKENS, H))
    if kind == "outlier-columns":
        x = rng.standard_normal((TOKENS, H))
        cols = rng.choice(H, 8, replace=False)
        x[:, cols] *= 100.0
        return x
    if kind == "mixed-block-scales":
        x = rng.standard_normal((TOKENS, H // 32, 32))
        x *= np.ldexp(1.0, -rng.integers(0, 9, (TOKENS, H // 32, 1)))
        return x.reshape(TOKENS, H)
    raise ValueError(kind)


def regroup(codes, scales, group):
    """Q8 codes [T, H] and scale bytes [T, H/32] -> values with `group` k32 blocks sharing a scale."""
    vals = ref.e4m3_decode(codes).reshape(TOKENS, -1, group, 32)
    sa = scales.astype(np.int64).reshape(TOKENS, -1, group)
    top = sa.max(axis=-1, keepdims=True)
    shifted = vals * np.ldexp(1.0, sa - top)[..., None]
    recoded = ref.e4m3_decode(ref.e4m3_encode(shifted))
    zeroed = np.count_nonzero((recoded == 0) & (vals != 0)) / max(np.count_nonzero(vals), 1)
    out = recoded * np.ldexp(1.0, top - 127)[..., None]
    return out.reshape(TOKENS, H), zeroed


def direct(x, scales, group):
    """x quantized once at each group's largest scale (what a quantizer that shares one E8M0 scale
    across `group` k32 blocks writes): one rounding instead of regroup's two."""
    top = scales.astype(np.int64).reshape(TOKENS, -1, group).max(axis=-1, keepdims=True)
    byte = np.broadcast_to(top, (TOKENS, H // (32 * group), group)).reshape(TOKENS, -1)
    codes = ref.q8_encode(x.reshape(TOKENS, -1, 32), byte).reshape(TOKENS, H)
    return ref.q8_dequant(codes, byte.astype(np.uint8))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--commit", default="", help="the commit column")
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    packed, wscale = ref.mxfp4_quantize(rng.standard_t(5, (ROWS, H)) * 0.02)
    w = ref.mxfp4_dequant(packed, wscale)
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
    print("gpu,date,commit,distribution,k_per_promotion,rel_err_vs_recipe,rel_err_recipe,zeroed,"
          "rel_err_direct_vs_recipe")
    for kind in ("normal", "student-t3", "outlier-columns", "mixed-block-scales"):
        x = activations(kind, rng)
        codes, scales = ref.q8(x)
        recipe = ref.q8_dequant(codes, scales) @ w.T
        exact = x @ w.T
        for group in (1, 2, 4, 8):
            xg, zeroed = regroup(codes, scales, group)
            got = xg @ w.T
            got_direct = direct(x, scales, group) @ w.T
            print(f"cpu (numpy),{date},{args.commit},{kind},{32 * group},"
                  f"{ref.relative_error(got, recipe):.3e},{ref.relative_error(recipe, exact):.3e},{zeroed:.2e},"
                  f"{ref.relative_error(got_direct, recipe):.3e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
