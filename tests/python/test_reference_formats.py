"""The oracle's own codecs (reference_layer.py) against ml_dtypes, bit for bit."""

import ml_dtypes
import numpy as np
import pytest

import reference_layer as ref

RNG_SEEDS = [1, 2, 3]


def _probe_values(seed, n=20000):
    rng = np.random.default_rng(seed)
    v = np.concatenate([rng.standard_normal(n) * 10.0 ** rng.uniform(-4, 3, n),
                        rng.uniform(-500, 500, n)]).astype(np.float32)
    return v


@pytest.mark.parametrize("seed", RNG_SEEDS)
def test_e2m1_encode_matches_ml_dtypes(seed):
    v = np.concatenate([_probe_values(seed) / 50.0,
                        # every midpoint and grid value, both signs
                        np.array([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 7.0, 100.0, 0.0, 6.0],
                                 np.float32)])
    v = np.concatenate([v, -v])
    want = v.astype(ml_dtypes.float4_e2m1fn).view(np.uint8) & 0xF
    np.testing.assert_array_equal(ref.e2m1_encode(v), want)


def test_e2m1_decode_matches_ml_dtypes():
    codes = np.arange(16, dtype=np.uint8)
    want = codes.view(ml_dtypes.float4_e2m1fn).astype(np.float64)
    np.testing.assert_array_equal(ref.e2m1_decode(codes), want)


def test_e4m3_decode_matches_ml_dtypes_for_every_code():
    codes = np.arange(256, dtype=np.uint8)
    want = codes.view(ml_dtypes.float8_e4m3fn).astype(np.float64)
    np.testing.assert_array_equal(ref.e4m3_decode(codes), want)  # NaN == NaN here


@pytest.mark.parametrize("seed", RNG_SEEDS)
def test_e4m3_encode_matches_ml_dtypes(seed):
    v = _probe_values(seed)
    # ties: midpoints between consecutive codes, including subnormals
    mids = ((ref.E4M3_TABLE[1:] + ref.E4M3_TABLE[:-1]) / 2).astype(np.float32)
    v = np.concatenate([v, mids, -mids, np.float32([448.0, 449.0, 464.0, 1e6, 0.0])])
    # ml_dtypes' float8_e4m3fn overflows to NaN; the recipe saturates (docs/spec.md §5).
    want = np.clip(v, -448, 448).astype(ml_dtypes.float8_e4m3fn).view(np.uint8)
    np.testing.assert_array_equal(ref.e4m3_encode(v), want)


def test_e8m0_decode_matches_ml_dtypes():
    codes = np.arange(256, dtype=np.uint8)
    want = codes.view(ml_dtypes.float8_e8m0fnu).astype(np.float64)
    np.testing.assert_array_equal(ref.e8m0_decode(codes), want)


@pytest.mark.parametrize("seed", RNG_SEEDS)
def test_bf16_round_matches_ml_dtypes(seed):
    rng = np.random.default_rng(seed)
    bits = rng.integers(0, 2 ** 32, 50000, dtype=np.uint64).astype(np.uint32)
    v = bits.view(np.float32)
    v = v[np.isfinite(v)]
    want = v.astype(ml_dtypes.bfloat16).view(np.uint16)
    np.testing.assert_array_equal(ref.bf16_bits(v), want)


@pytest.mark.parametrize("seed", RNG_SEEDS)
def test_mxfp4_quantize_roundtrip_is_within_half_a_step(seed):
    rng = np.random.default_rng(seed)
    w = rng.standard_normal((8, 64)) * 0.05
    packed, scales = ref.mxfp4_quantize(w)
    deq = ref.mxfp4_dequant(packed, scales)
    # the e2m1 element of each value is its ml_dtypes rounding of w / scale
    s = np.repeat(np.ldexp(1.0, scales.astype(np.int64) - 127), 32, axis=-1)
    want = (w / s).astype(np.float32).astype(ml_dtypes.float4_e2m1fn).astype(np.float64) * s
    np.testing.assert_array_equal(deq, want)
    # amax of each block maps into (3, 6]: the scale is the smallest power of two that fits
    amax = np.abs(w.reshape(8, 2, 32)).max(-1) / np.ldexp(1.0, scales.astype(np.int64) - 127)
    assert np.all((amax > 3.0) & (amax <= 6.0))


def test_q8_saturates_the_top_of_the_range():
    # Finite values from 1.9375 * 2^127 round to 2^128 (fp32 Inf) in e4m3 times any scale; Q8
    # holds them at 1.875 * 2^127 (quant.h kQ8MaxFinite), as the library does on CPU and GPU.
    v = np.ones((2, 32), dtype=np.float32)
    v[0, 3] = np.float32(3.3895314e38)  # bf16 max
    v[1, 3] = -np.float32(2.0**127 * 1.9375)
    back = ref.q8_dequant(*ref.q8(v))
    assert np.all(np.isfinite(back))
    np.testing.assert_array_equal(back[:, 3], [1.875 * 2.0**127, -1.875 * 2.0**127])


def test_q8_matches_spec_and_ml_dtypes():
    rng = np.random.default_rng(7)
    v = (rng.standard_normal((4, 128)) * 10.0 ** rng.uniform(-3, 3, (4, 1))).astype(np.float32)
    v[0, :32] = 0.0  # amax floor 1e-4
    codes, scales = ref.q8(v)
    s = np.ldexp(1.0, scales.astype(np.int64) - 127)
    g = v.reshape(4, 4, 32).astype(np.float64)
    np.testing.assert_array_equal(scales[0, 0], 127 + int(np.ceil(np.log2(1e-4 / 448))))
    amax = np.abs(g).max(-1)
    nz = amax > 1e-4
    assert np.all(amax[nz] <= 448 * s[nz]) and np.all(amax[nz] > 224 * s[nz])
    want = np.clip(g / s[..., None], -448, 448).astype(ml_dtypes.float8_e4m3fn).view(np.uint8)
    np.testing.assert_array_equal(codes.reshape(4, 4, 32), want)
