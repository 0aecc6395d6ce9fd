#!/usr/bin/env python3
"""Bit-exact test vectors for the moe_ep number formats and quantizers (docs/spec.md §3-5).

Element formats (e4m3, e2m1, e8m0, bf16) are encoded and decoded by ml_dtypes. The block recipes
(Q8, MXFP4, NVFP4) are implemented here in vectorised numpy straight from the SPEC, using
ml_dtypes only for the element roundings. tests/core/test_formats_*.cpp and test_quant_*.cpp
compare the library against these files byte for byte; ctest runs this script as the fixture
`format_vectors`.

Output: OUT_DIR/<case>.<array>.npy for every case, and OUT_DIR/manifest.txt (written last) that
lists the cases, one per line. Arithmetic conventions shared with the library (quant.h): the
scale exponents are ceil(log2(.)) of the exact real quotient; NVFP4 evaluates its formulas in
fp32, left to right as written in the SPEC.
"""

import argparse
import os
import sys

try:
    import numpy as np
    import ml_dtypes
except ImportError as err:  # the message ctest shows when the fixture fails
    sys.exit(f"gen_format_vectors.py: {err}; install with "
             f"`python3 -m pip install -r tests/python/requirements.txt`")

F32 = np.float32
E4M3 = ml_dtypes.float8_e4m3fn
E2M1 = ml_dtypes.float4_e2m1fn
E8M0 = ml_dtypes.float8_e8m0fnu
BF16 = ml_dtypes.bfloat16

FLT_MAX = F32(np.finfo(F32).max)


# ---------------------------------------------------------------- element formats (ml_dtypes)

def e4m3_code(x):
    """RNE, saturating to +-448 (SPEC §5). ml_dtypes turns |x| >= 464 and +-Inf into NaN instead
    of saturating, so it is given x clipped to +-448 (a no-op for every value the two rules agree
    on; clip keeps NaN, which both encode as 0x7F with the sign of x)."""
    return np.clip(np.asarray(x, F32), F32(-448), F32(448)).astype(E4M3).view(np.uint8)


def e2m1_code(x):
    """RNE, saturating to +-6; ml_dtypes saturates float4_e2m1fn by itself. NaN has no e2m1
    encoding: ml_dtypes gives -0 for +NaN, the library documents +0 (formats.h), so NaN must not
    reach here."""
    x = np.asarray(x, F32)
    assert not np.isnan(x).any()
    return x.astype(E2M1).view(np.uint8)


def bf16_code(x):
    return np.asarray(x, F32).astype(BF16).view(np.uint16)


def decode(codes, fmt):
    return np.asarray(codes, np.uint8).view(fmt).astype(F32)


def e8m0_value(byte):
    return decode(np.asarray(byte, np.uint8), E8M0)


# ---------------------------------------------------------------- inputs

def bits_to_f32(bits):
    return np.asarray(bits, np.uint64).astype(np.uint32).view(F32)


def octave_floats(rng, n, lo_exp, hi_exp):
    """Random sign, exponent uniform in [lo_exp, hi_exp], random 23-bit mantissa (normal fp32)."""
    sign = rng.integers(0, 2, n, dtype=np.uint64)
    exp = rng.integers(lo_exp + 127, hi_exp + 128, n).astype(np.uint64)
    mant = rng.integers(0, 1 << 23, n, dtype=np.uint64)
    return bits_to_f32((sign << 31) | (exp << 23) | mant)


def random_bit_floats(rng, n):
    """Uniformly random fp32 bit patterns, NaNs replaced by random finite values."""
    x = bits_to_f32(rng.integers(0, 1 << 32, n, dtype=np.uint64))
    nan = np.isnan(x)
    x[nan] = octave_floats(rng, int(nan.sum()), -126, 127)
    return x


def fp32_subnormals(rng, n):
    sign = rng.integers(0, 2, n, dtype=np.uint64)
    mant = rng.integers(1, 1 << 23, n, dtype=np.uint64)
    return bits_to_f32((sign << 31) | mant)


def with_neighbours(x):
    """x and its fp32 neighbours towards -inf and +inf."""
    x = np.asarray(x, F32)
    return np.concatenate([x, np.nextafter(x, F32(-np.inf)), np.nextafter(x, F32(np.inf))])


def both_signs(x):
    x = np.asarray(x, F32)
    return np.concatenate([x, -x])


def midpoints(magnitudes):
    """Midpoints of adjacent values of a sorted list; each must be exact in fp32."""
    m = np.asarray(magnitudes, np.float64)
    mid = (m[:-1] + m[1:]) / 2
    assert np.array_equal(mid.astype(F32).astype(np.float64), mid)
    return mid.astype(F32)


def nan_variants():
    bits = [0x7FC00000, 0x7F800001, 0x7FA00000, 0x7F810000, 0x7FFFFFFF, 0x7FC00001]
    return both_signs(bits_to_f32(bits))


SPECIAL_ZEROS = np.array([0.0, -0.0], F32)
INFS = np.array([np.inf, -np.inf], F32)


# ---------------------------------------------------------------- block recipes (SPEC §3-5)

def ceil_log2(x):
    """ceil(log2(x)) for finite x > 0 (float64), exact: frexp gives x = m * 2^e, m in [0.5, 1)."""
    m, e = np.frexp(np.asarray(x, np.float64))
    return np.where(m == 0.5, e - 1, e).astype(np.int64)


def e8m0_scale_byte(amax, divisor, lo):
    """Byte of 2^ceil(log2(amax / divisor)), clamped to [lo, 254]; +Inf amax gives 254.
    The float64 quotient of an fp32 amax by 448 or 6 never rounds onto a power of two, so its
    ceil(log2) is that of the exact quotient."""
    amax = np.asarray(amax, np.float64)
    finite = np.isfinite(amax) & (amax > 0)
    safe = np.where(finite, amax, 1.0)
    e = np.where(finite, ceil_log2(safe / divisor), 1000)
    return np.clip(e + 127, lo, 254).astype(np.uint8)


def q8_scale_byte(amax):
    """Q8 (SPEC §3): amax floored at 1e-4 (as fp32), s = 2^ceil(log2(amax / 448)), byte in [1, 254]."""
    return e8m0_scale_byte(np.maximum(np.asarray(amax, F32), F32(1e-4)), 448.0, 1)


# The largest magnitude Q8 holds (quant.h kQ8MaxFinite): 1.875 * 2^127. A finite value above it
# saturates to it before the division (else e4m3 rounds it to 2^128 / s, and the code times s is
# fp32 Inf); the scale still comes from the raw amax; Inf and NaN pass unchanged.
Q8_MAX_FINITE = F32(1.875 * 2.0**127)


def q8_quantize(v):
    blocks = np.asarray(v, F32).reshape(-1, 32)
    scales = q8_scale_byte(np.abs(blocks).max(axis=1))
    over = (np.abs(blocks) > Q8_MAX_FINITE) & np.isfinite(blocks)
    blocks = np.where(over, np.copysign(Q8_MAX_FINITE, blocks), blocks).astype(F32)
    q = e4m3_code(blocks / e8m0_value(scales)[:, None])
    return q.reshape(-1), scales


def q8_dequantize(q, scales):
    return (decode(q, E4M3).reshape(-1, 32) * e8m0_value(scales)[:, None]).reshape(-1)


def mxfp4_scale_byte(amax):
    """MXFP4 (SPEC §5): s = 2^ceil(log2(amax / 6)), byte clamped to [0, 254]. The SPEC leaves an
    all-zero block open; quant.h fixes its byte at 127 (s = 1)."""
    amax = np.asarray(amax, F32)
    return np.where(amax == 0, np.uint8(127), e8m0_scale_byte(amax, 6.0, 0)).astype(np.uint8)


def pack_e2m1(codes):
    """Low nibble = even element (SPEC §5)."""
    codes = np.asarray(codes, np.uint8).reshape(*codes.shape[:-1], -1, 2)
    return (codes[..., 0] | (codes[..., 1] << 4)).astype(np.uint8)


def unpack_e2m1(packed):
    packed = np.asarray(packed, np.uint8)
    return np.stack([packed & 0xF, packed >> 4], axis=-1).reshape(*packed.shape[:-1], -1)


def mxfp4_quantize(w):
    w = np.asarray(w, F32)
    rows, k = w.shape
    blocks = w.reshape(rows, k // 32, 32)
    scales = mxfp4_scale_byte(np.abs(blocks).max(axis=2))
    codes = e2m1_code(blocks / e8m0_value(scales)[..., None])
    return pack_e2m1(codes.reshape(rows, k)), scales


def mxfp4_dequantize(packed, scales):
    rows = packed.shape[0]
    values = decode(unpack_e2m1(packed), E2M1).reshape(rows, -1, 32)
    return (values * e8m0_value(scales)[..., None]).reshape(rows, -1)


def nvfp4_global_encode(amax):
    """g = 448 * 6 / A in fp32; 1 where A == 0 or g overflows."""
    amax = np.asarray(amax, F32)
    with np.errstate(divide="ignore", over="ignore"):
        g = F32(448 * 6) / amax
    return np.where((amax == 0) | ~np.isfinite(g), F32(1), g).astype(F32)


def nvfp4_quantize(w, g):
    """SPEC §4 in fp32: s = e4m3(g * amax_block / 6); q = e2m1(clamp(v * g / s, +-6)), q = 0 where
    s == 0. g is one factor for the tensor or one per row."""
    w = np.asarray(w, F32)
    rows, k = w.shape
    g = np.broadcast_to(np.asarray(g, F32).reshape(-1, 1, 1), (rows, 1, 1))
    blocks = w.reshape(rows, k // 16, 16)
    amax = np.abs(blocks).max(axis=2, keepdims=True)
    scales = e4m3_code(g * amax / F32(6))
    s = decode(scales, E4M3)
    with np.errstate(divide="ignore", invalid="ignore"):
        x = np.clip(blocks * g / s, F32(-6), F32(6))
    codes = np.where(s == 0, np.uint8(0), e2m1_code(np.where(s == 0, F32(0), x)))
    return pack_e2m1(codes.reshape(rows, k)), scales.reshape(rows, k // 16)


def nvfp4_dequantize(packed, scales, g):
    rows = packed.shape[0]
    q = decode(unpack_e2m1(packed), E2M1).reshape(rows, -1, 16)
    return (q * decode(scales, E4M3)[..., None] / F32(g)).reshape(rows, -1)


# ---------------------------------------------------------------- cases

class Writer:
    def __init__(self, out_dir):
        self.out_dir = out_dir
        self.cases = []

    def case(self, name, **arrays):
        for key, value in arrays.items():
            np.save(os.path.join(self.out_dir, f"{name}.{key}.npy"), np.ascontiguousarray(value))
        self.cases.append(name)

    def finish(self, seed):
        with open(os.path.join(self.out_dir, "manifest.txt"), "w") as f:
            f.write(f"# gen_format_vectors.py seed={seed} numpy={np.__version__} "
                    f"ml_dtypes={ml_dtypes.__version__}\n")
            f.writelines(c + "\n" for c in self.cases)


def positive_values(fmt, num_codes):
    v = decode(np.arange(num_codes), fmt)
    return np.unique(v[np.isfinite(v) & (v >= 0)])


def element_cases(out, rng):
    out.case("e4m3_decode", input=np.arange(256, dtype=np.uint8),
             expected=decode(np.arange(256), E4M3))
    out.case("e2m1_decode", input=np.arange(16, dtype=np.uint8),
             expected=decode(np.arange(16), E2M1))
    out.case("e8m0_decode", input=np.arange(256, dtype=np.uint8),
             expected=decode(np.arange(256), E8M0))
    bf16_all = np.arange(1 << 16, dtype=np.uint16)
    out.case("bf16_decode", input=bf16_all, expected=bf16_all.view(BF16).astype(F32))

    # Per format: (name, encoder, fp32 inputs by category). The virtual next code after the
    # maximum (480 for e4m3, 8 for e2m1) puts the saturation boundary among the ties.
    e4m3_mags = np.append(positive_values(E4M3, 256), 480.0)
    e2m1_mags = np.append(positive_values(E2M1, 16), 8.0)
    bf16_finite = np.arange(0x7F80, dtype=np.uint64)  # +0 ... max finite
    sat_e4m3 = [448, 449, 463.99997, 464, 464.00003, 480, 500, 1e4, 1e38, FLT_MAX]
    sat_e2m1 = [6, 6.0000005, 6.5, 7, 7.0000005, 8, 100, 1e30, FLT_MAX]
    sat_bf16 = [3.38953139e38, 3.3895314e38, 3.39e38, 3.4e38, FLT_MAX]
    formats = {
        "e4m3": (e4m3_code, {
            "random": octave_floats(rng, 200_000, -14, 10),
            "bits": random_bit_floats(rng, 100_000),
            "ties": both_signs(with_neighbours(midpoints(e4m3_mags))),
            "subnormal": np.concatenate([  # e4m3 subnormals (< 2^-6) and fp32 subnormals
                octave_floats(rng, 20_000, -12, -7), fp32_subnormals(rng, 5_000)]),
            "saturation": both_signs(np.concatenate([with_neighbours(sat_e4m3), INFS])),
            "special": np.concatenate([SPECIAL_ZEROS, nan_variants()]),
        }),
        "e2m1": (e2m1_code, {
            "random": octave_floats(rng, 100_000, -4, 4),
            "bits": random_bit_floats(rng, 50_000),
            "ties": both_signs(with_neighbours(midpoints(e2m1_mags))),
            "subnormal": fp32_subnormals(rng, 5_000),
            "saturation": both_signs(np.concatenate([with_neighbours(sat_e2m1), INFS])),
            "special": SPECIAL_ZEROS,
        }),
        "bf16": (bf16_code, {
            "random": octave_floats(rng, 200_000, -126, 127),
            "bits": random_bit_floats(rng, 300_000),
            # Every midpoint between adjacent finite bf16 values (the last one is between the
            # maximum and Inf and rounds to Inf), and its fp32 neighbours.
            "ties": both_signs(bits_to_f32(np.concatenate(
                [(bf16_finite << 16) | d for d in (0x7FFF, 0x8000, 0x8001)]))),
            "subnormal": fp32_subnormals(rng, 50_000),
            "saturation": both_signs(np.concatenate([with_neighbours(sat_bf16), INFS])),
            # bf16 keeps NaN: ml_dtypes and the library give the quiet NaN 0x7FC0 with the sign.
            "special": np.concatenate([SPECIAL_ZEROS, nan_variants()]),
        }),
    }
    for name, (encode, categories) in formats.items():
        for category, x in categories.items():
            x = np.asarray(x, F32)
            out.case(f"{name}_encode_{category}", input=x, expected=encode(x))
    # e2m1 has no NaN: the library documents +0 for every NaN (formats.h), not ml_dtypes' choice.
    nans = nan_variants()
    out.case("e2m1_encode_nan", input=nans, expected=np.zeros(nans.size, np.uint8))

    powers = bits_to_f32(np.arange(1, 255, dtype=np.uint64) << 23)  # 2^-126 ... 2^127
    subnormal_powers = bits_to_f32(np.uint64(1) << np.arange(23, dtype=np.uint64))
    x = np.concatenate([np.abs(octave_floats(rng, 50_000, -126, 127)),
                        np.abs(fp32_subnormals(rng, 5_000)), subnormal_powers,
                        powers, np.nextafter(powers, F32(np.inf)),
                        np.nextafter(powers, F32(0)), [FLT_MAX]]).astype(F32)
    out.case("ceil_log2", input=x, expected=ceil_log2(x).astype(np.int32))


def amax_values(rng):
    """Block amax values for the scale-byte cases: random octaves over the whole fp32 range,
    fp32 subnormals, the exact boundaries 448 * 2^k and 6 * 2^k with neighbours, the Q8 floor,
    powers of two, the largest float and +Inf."""
    k = np.arange(-149, 128, dtype=np.float64)
    boundaries = np.concatenate([448.0 * 2.0 ** k, 6.0 * 2.0 ** k, 2.0 ** k])
    boundaries = boundaries[(boundaries <= FLT_MAX) & (boundaries >= 2.0 ** -149)].astype(F32)
    x = np.concatenate([np.abs(octave_floats(rng, 20_000, -126, 127)),
                        np.abs(fp32_subnormals(rng, 2_000)), with_neighbours(boundaries),
                        with_neighbours([1e-4, 1e-5, 1e-6]), [0.0, FLT_MAX, np.inf]])
    return x.astype(F32)


def gaussian_blocks(rng, num_blocks, block, lo_exp, hi_exp):
    """Gaussian blocks, each with its own scale 2^u, u uniform in [lo_exp, hi_exp]."""
    scale = np.exp2(rng.uniform(lo_exp, hi_exp, (num_blocks, 1)))
    return (rng.standard_normal((num_blocks, block)) * scale).astype(F32)


def block_with_amax(rng, amax, block, fill=None):
    """A block whose largest magnitude is exactly amax (at a random position, random sign)."""
    amax = F32(amax)
    v = (rng.uniform(-1, 1, block) * np.float64(amax)).astype(F32) if fill is None else \
        np.asarray(fill, F32).copy()
    v[rng.integers(block)] = amax if rng.integers(2) else -amax
    return v


def tie_block(rng, scale, mids, block):
    """Elements that land exactly on midpoints of the element format after division by the
    power-of-two scale, plus one element = max * scale that fixes that scale."""
    v = rng.choice(both_signs(mids), block).astype(np.float64) * scale
    return v.astype(F32)


def q8_structured_blocks(rng):
    e4m3_mids = midpoints(positive_values(E4M3, 256))
    blocks = [
        np.zeros(32, F32),
        np.where(rng.integers(0, 2, 32) == 1, F32(-0.0), F32(0.0)).astype(F32),
        (rng.uniform(-1, 1, 32) * 1e-6).astype(F32),     # amax far below the 1e-4 floor
        block_with_amax(rng, 1e-4, 32),
        block_with_amax(rng, np.nextafter(F32(1e-4), F32(0)), 32),
        block_with_amax(rng, np.nextafter(F32(1e-4), F32(1)), 32),
        fp32_subnormals(rng, 32),
        block_with_amax(rng, FLT_MAX, 32),
        block_with_amax(rng, np.inf, 32),                # scale byte clamps to 254
        block_with_amax(rng, -np.inf, 32),
    ]
    for k in range(-20, 21, 3):
        s = 2.0 ** k
        blocks.append(block_with_amax(rng, 448 * s, 32))                   # s exactly 2^k
        blocks.append(block_with_amax(rng, np.nextafter(F32(448 * s), F32(np.inf)), 32))
        blocks.append(block_with_amax(rng, 2.0 ** (k + 3), 32))           # amax a power of two
        blocks.append(block_with_amax(rng, 448 * s, 32, tie_block(rng, s, e4m3_mids, 32)))
        # Elements that are e4m3 subnormals after scaling.
        blocks.append(block_with_amax(rng, 448 * s, 32,
                                      (rng.uniform(-1, 1, 32) * 2.0 ** -6 * s).astype(F32)))
    return np.stack(blocks)


def mxfp4_structured_blocks(rng):
    e2m1_mids = midpoints(positive_values(E2M1, 16))
    blocks = [
        np.zeros(32, F32),                               # byte 127 by convention (quant.h)
        np.where(rng.integers(0, 2, 32) == 1, F32(-0.0), F32(0.0)).astype(F32),
        fp32_subnormals(rng, 32),                        # byte clamps to 0
        block_with_amax(rng, 1e-40, 32),
        # amax / 6 just above 2^-127 is an fp32 subnormal that rounds onto 2^-127: the exact
        # quotient gives byte 1, the rounded one would give byte 0.
        block_with_amax(rng, np.nextafter(F32(6 * 2.0 ** -127), F32(1)), 32),
        block_with_amax(rng, F32(6 * 2.0 ** -127), 32),
        block_with_amax(rng, FLT_MAX, 32),
        block_with_amax(rng, np.inf, 32),
        block_with_amax(rng, -np.inf, 32),
    ]
    for k in range(-30, 31, 4):
        s = 2.0 ** k
        blocks.append(block_with_amax(rng, 6 * s, 32))
        blocks.append(block_with_amax(rng, np.nextafter(F32(6 * s), F32(np.inf)), 32))
        blocks.append(block_with_amax(rng, np.nextafter(F32(6 * s), F32(0)), 32))
        blocks.append(block_with_amax(rng, 2.0 ** (k + 2), 32))
        blocks.append(block_with_amax(rng, 6 * s, 32, tie_block(rng, s, e2m1_mids, 32)))
    return np.stack(blocks)


def q8_cases(out, rng):
    amax = amax_values(rng)
    out.case("q8_scale_byte", input=amax, expected=q8_scale_byte(amax))
    for name, blocks in (("random", gaussian_blocks(rng, 512, 32, -30, 30)),
                         ("structured", q8_structured_blocks(rng))):
        v = blocks.reshape(-1)
        q, scales = q8_quantize(v)
        out.case(f"q8_quantize_{name}", input=v, q=q, scales=scales)
    q = rng.integers(0, 256, 32 * 512, dtype=np.uint8)
    scales = np.concatenate([np.arange(255), rng.integers(0, 255, 512 - 255)]).astype(np.uint8)
    out.case("q8_dequantize", q=q, scales=scales, expected=q8_dequantize(q, scales))


def mxfp4_cases(out, rng):
    amax = amax_values(rng)
    out.case("mxfp4_scale_byte", input=amax, expected=mxfp4_scale_byte(amax))
    for name, w in (("random", gaussian_blocks(rng, 64 * 8, 32, -40, 40).reshape(64, 256)),
                    ("structured", mxfp4_structured_blocks(rng))):
        packed, scales = mxfp4_quantize(w)
        out.case(f"mxfp4_quantize_{name}", input=w, packed=packed, scales=scales)
    rows, k = 48, 256
    packed = rng.integers(0, 256, (rows, k // 2), dtype=np.uint8)
    scales = np.concatenate([np.arange(255), rng.integers(0, 255, rows * k // 32 - 255)])
    scales = scales.astype(np.uint8).reshape(rows, k // 32)
    out.case("mxfp4_dequantize", packed=packed, scales=scales,
             expected=mxfp4_dequantize(packed, scales))


def nvfp4_structured_rows(rng, k):
    """Rows of 16-element blocks that hit the NVFP4 edge cases. Row 0 holds the tensor amax 2688,
    so g = 1 for the whole tensor and the scale of a block of amax 6 * s is exactly s."""
    e2m1_mids = midpoints(positive_values(E2M1, 16))
    e4m3_values = positive_values(E4M3, 256)[1:]
    e4m3_values = e4m3_values[e4m3_values <= 384]  # keeps every block amax below 2688
    nb = k // 16
    rows = []
    first = gaussian_blocks(rng, nb, 16, -2, 2)
    first[0] = block_with_amax(rng, 2688, 16)
    rows.append(first)
    zero_row = np.zeros((nb, 16), F32)
    zero_row[1] = -0.0
    rows.append(zero_row)
    edge = []
    for s in rng.choice(e4m3_values, 4 * nb):
        kind = rng.integers(6)
        if kind == 0:    # e2m1 ties: the scale is exactly s, v * g / s lands on midpoints
            edge.append(block_with_amax(rng, 6 * s, 16, tie_block(rng, s, e2m1_mids, 16)))
        elif kind == 1:  # amax_block / 6 between e4m3 values: s rounds, v * g / s may pass 6
            edge.append(block_with_amax(rng, 6 * s * rng.uniform(1, 1.125), 16))
        elif kind == 2:  # scale rounds to 0: q must be 0 although v is not
            edge.append(block_with_amax(rng, 6 * 2.0 ** -11 * rng.uniform(0.5, 1), 16))
        elif kind == 3:  # e4m3-subnormal scales
            edge.append(block_with_amax(rng, 6 * 2.0 ** -7 * rng.uniform(0.01, 1), 16))
        elif kind == 4:  # all zero, signed
            edge.append(np.where(rng.integers(0, 2, 16) == 1, F32(-0.0), F32(0.0)).astype(F32))
        else:
            edge.append(block_with_amax(rng, 6 * s, 16))
    rows.extend(np.stack(edge).reshape(4, nb, 16))
    return np.stack(rows).reshape(-1, k)


def nvfp4_cases(out, rng):
    amax = amax_values(rng)
    out.case("nvfp4_global_encode", input=amax, expected=nvfp4_global_encode(amax))

    k = 256
    random_w = (rng.standard_normal((64, k)) *
                np.exp2(rng.uniform(-6, 6, (64, k // 16))).repeat(16, axis=1)).astype(F32)
    for name, w in (("random", random_w), ("structured", nvfp4_structured_rows(rng, k))):
        g = nvfp4_global_encode(np.abs(w).max())
        packed, scales = nvfp4_quantize(w, g)
        out.case(f"nvfp4_quantize_{name}", input=w, global_encode=np.array([g], F32),
                 packed=packed, scales=scales)
    # A global factor unrelated to the tensor: block scales saturate at 448 and v * g / s
    # clamps to +-6.
    g = F32(2688 / np.abs(random_w).max() * 37.5)
    packed, scales = nvfp4_quantize(random_w, g)
    out.case("nvfp4_quantize_saturating", input=random_w, global_encode=np.array([g], F32),
             packed=packed, scales=scales)

    # Activations: one global factor per row.
    x = np.concatenate([gaussian_blocks(rng, 24, 512, -12, 12),
                        nvfp4_structured_rows(rng, 512)]).astype(F32)
    x[3] = 0.0
    x[4] = 0.0
    x[4, 17] = F32(-3e-38)
    g_rows = nvfp4_global_encode(np.abs(x).max(axis=1))
    packed, scales = nvfp4_quantize(x, g_rows)
    out.case("nvfp4_rows", input=x, packed=packed, scales=scales, global_encode=g_rows)

    rows, k = 32, 128
    packed = rng.integers(0, 256, (rows, k // 2), dtype=np.uint8)
    codes = np.arange(256, dtype=np.uint8)
    codes = codes[~np.isnan(decode(codes, E4M3))]
    scales = rng.choice(codes, (rows, k // 16)).astype(np.uint8)
    g = F32(rng.uniform(0.5, 2) * 2.0 ** rng.integers(-20, 20))
    out.case("nvfp4_dequantize", packed=packed, scales=scales, global_encode=np.array([g], F32),
             expected=nvfp4_dequantize(packed, scales, g))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out_dir", help="folder for the .npy files (created, stale files removed)")
    parser.add_argument("--seed", type=int, default=20240601)
    args = parser.parse_args()
    np.seterr(all="ignore")  # overflow to Inf and NaN casts are part of the cases

    os.makedirs(args.out_dir, exist_ok=True)
    for name in os.listdir(args.out_dir):
        if name.endswith(".npy") or name == "manifest.txt":
            os.remove(os.path.join(args.out_dir, name))
    out = Writer(args.out_dir)
    rng = np.random.default_rng(args.seed)
    element_cases(out, rng)
    q8_cases(out, rng)
    mxfp4_cases(out, rng)
    nvfp4_cases(out, rng)
    out.finish(args.seed)
    print(f"gen_format_vectors.py: {len(out.cases)} cases in {args.out_dir} (seed {args.seed})")


if __name__ == "__main__":
    main()
