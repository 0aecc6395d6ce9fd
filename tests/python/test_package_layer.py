"""The package's CPU forward (moe_ep.Layer on numpy arrays) against the independent oracle
(reference_layer.py), by the float64 relative-error metric and the thresholds of the C++ CPU
reference tests (tests/cpu/test_cpu_layer_reference.cpp: against a model that rounds gu, o and
y to bf16, mxfp4 <= 1e-3 with >= 97% of the outputs bitwise equal, nvfp4 <= 3e-2 with >= 90%)."""

import ml_dtypes
import numpy as np
import pytest

import moe_ep
import problems
import reference_layer as ref

LIMITS = {"mxfp4": (1e-3, 0.97), "nvfp4": (3e-2, 0.90)}
NAN_BF16 = np.uint16(0x7FC0)


def make_layer(p, max_tokens=64, clamp=problems.CLAMP):
    rt = moe_ep.Runtime.acquire(device="cpu")
    pack = getattr(moe_ep.WeightPack, p.weight_format)(**p.tensors)
    return moe_ep.Layer(rt, num_experts=p.E, hidden_size=p.H, intermediate_size=p.I, top_k=p.K,
                        max_tokens_per_rank=max_tokens, recipe=p.recipe, activation_clamp=clamp,
                        weights=pack)


def poisoned_out(T, H):
    return np.full((T, H), NAN_BF16, np.uint16).view(ml_dtypes.bfloat16)


def check_against_oracle(p, layer, x, ids, w, clamp=problems.CLAMP):
    out = poisoned_out(*x.shape)
    y = layer.forward(x, ids, w, out=out)
    assert y is out
    got = np.asarray(out, dtype=np.float64)
    want = ref.layer_forward(p.recipe, p.oracle, x.view(np.uint16), ids, w, clamp)
    assert np.all(np.isfinite(got)), "NaN left in the output: rows not written"
    err = ref.relative_error(got, want)
    match = float(np.mean(got == want)) if got.size else 1.0
    limit, min_match = LIMITS[p.recipe]
    info = (f"recipe={p.recipe} weights={p.weight_format} T={x.shape[0]} rel_err={err:.3e} "
            f"bitwise={match:.4f}")
    assert err <= limit, info
    assert match >= min_match, info
    return got, want


CASES = [("mxfp4", "mxfp4"), ("mxfp4", "bf16"), ("nvfp4", "nvfp4")]


@pytest.mark.parametrize("recipe,weight_format", [("mxfp4", "mxfp4"), ("nvfp4", "nvfp4")])
def test_shared_expert_is_added_to_y(recipe, weight_format):
    p = problems.make_problem(recipe, weight_format, 3)
    rng = np.random.default_rng(5)
    i_s = 64
    w13s = (rng.standard_normal((2 * i_s, p.H)) * 4 / np.sqrt(p.H)).astype(ml_dtypes.bfloat16)
    w2s = (rng.standard_normal((p.H, i_s)) * 0.05 / np.sqrt(i_s)).astype(ml_dtypes.bfloat16)  # o ~ the routed y
    rt = moe_ep.Runtime.acquire(device="cpu")
    pack = getattr(moe_ep.WeightPack, p.weight_format)(**p.tensors)
    layer = moe_ep.Layer(rt, num_experts=p.E, hidden_size=p.H, intermediate_size=p.I, top_k=p.K,
                         max_tokens_per_rank=64, recipe=p.recipe, activation_clamp=problems.CLAMP,
                         weights=pack, shared_w13=w13s, shared_w2=w2s)
    assert "shared_intermediate_size=64" in layer.info()["desc"]
    assert "Is = 64" in layer.info()["config"]["shared_expert"]
    x, ids, w = problems.random_inputs(p, 9, 77)
    ids[2, :] = -1  # token 2: the shared expert's output alone
    out = poisoned_out(*x.shape)
    layer.forward(x, ids, w, out=out)
    got = np.asarray(out, dtype=np.float64)
    routed = ref.layer_forward(p.recipe, p.oracle, x.view(np.uint16), ids, w, problems.CLAMP)
    want = ref.shared_expert_add(routed, x.view(np.uint16), w13s.view(np.uint16), w2s.view(np.uint16),
                                 problems.CLAMP)
    err = ref.relative_error(got, want)
    assert err <= LIMITS[p.recipe][0], f"rel_err {err:.3e}"
    # Both parts matter: leaving either out is far outside the limit.
    assert ref.relative_error(routed, want) > 10 * LIMITS[p.recipe][0]
    assert ref.relative_error(want - routed, want) > 10 * LIMITS[p.recipe][0]
    assert np.count_nonzero(got[2]) > p.H // 2, "token 2 must carry the shared expert's output"
    with pytest.raises(ValueError, match="shared_w2 is missing"):
        moe_ep.Layer(rt, num_experts=p.E, hidden_size=p.H, intermediate_size=p.I, top_k=p.K,
                     max_tokens_per_rank=64, recipe=p.recipe, weights=pack, shared_w13=w13s)
    with pytest.raises(ValueError, match=r"shared_w13 has 127 rows; expected \[2Is, H\]"):
        moe_ep.Layer(rt, num_experts=p.E, hidden_size=p.H, intermediate_size=p.I, top_k=p.K,
                     max_tokens_per_rank=64, recipe=p.recipe, weights=pack, shared_w13=w13s[:127],
                     shared_w2=w2s)


@pytest.mark.parametrize("recipe,weight_format", CASES)
@pytest.mark.parametrize("seed", [1, 2])
def test_random_inputs_match_oracle(recipe, weight_format, seed):
    p = problems.make_problem(recipe, weight_format, seed)
    layer = make_layer(p)
    for T in (1, 7, 33):
        x, ids, w = problems.random_inputs(p, T, seed * 100 + T)
        check_against_oracle(p, layer, x, ids, w)


@pytest.mark.parametrize("recipe,weight_format", CASES)
def test_structured_inputs_match_oracle(recipe, weight_format):
    p = problems.make_problem(recipe, weight_format, 5)
    layer = make_layer(p)
    x, ids, w = problems.structured_inputs(p, 12)
    got, want = check_against_oracle(p, layer, x, ids, w)
    assert np.all(got[2] == 0.0), "a token with only -1 slots must get exactly zeros"
    assert np.any(got[0] != 0.0)


def test_no_clamp_and_int64_ids():
    p = problems.make_problem("mxfp4", "mxfp4", 9)
    layer = make_layer(p, clamp=None)
    x, ids, w = problems.random_inputs(p, 9, 91, id_dtype=np.int64)
    x = (np.asarray(x, np.float32) * 4).astype(ml_dtypes.bfloat16)  # gu beyond the clamp of 10
    check_against_oracle(p, layer, x, ids, w, clamp=None)


def test_zero_tokens_and_allocated_output():
    p = problems.make_problem("mxfp4", "mxfp4", 3)
    layer = make_layer(p)
    x, ids, w = problems.random_inputs(p, 0, 1)
    y = layer.forward(x, ids, w)
    assert y.shape == (0, p.H) and y.dtype == ml_dtypes.bfloat16
    x, ids, w = problems.random_inputs(p, 5, 2)
    y = layer.forward(x, ids, w)  # out=None: a new array like x
    assert y.shape == x.shape and y.dtype == x.dtype
    np.testing.assert_array_equal(y.view(np.uint16), layer.forward(x, ids, w).view(np.uint16))


def test_repeated_forwards_are_bitwise_identical():
    p = problems.make_problem("nvfp4", "nvfp4", 4)
    layer = make_layer(p)
    x, ids, w = problems.random_inputs(p, 17, 4)
    first = layer.forward(x, ids, w).view(np.uint16).copy()
    for _ in range(3):
        np.testing.assert_array_equal(layer.forward(x, ids, w).view(np.uint16), first)


def test_info_and_workspace_formula():
    p = problems.make_problem("mxfp4", "mxfp4", 1)
    layer = make_layer(p, max_tokens=32)
    info = layer.info()
    assert info["implementation"] == "cpu" and info["device"] == "cpu"
    assert (info["num_experts"], info["hidden_size"], info["intermediate_size"],
            info["top_k"], info["max_tokens_per_rank"]) == (p.E, p.H, p.I, p.K, 32)
    assert info["activation_clamp"] == problems.CLAMP and isinstance(info["config"], dict)
    build = moe_ep.info()
    assert build["version"] == moe_ep.__version__
    assert any(b["name"] == "cpu" for b in build["backends"])

    # include/moe_ep/workspace.h, the host layout, evaluated here from its table
    def align(n):
        return (n + 255) // 256 * 256

    R, E, T, H, I, K = 2, 16, 32, 256, 128, 4
    S = R * T * K
    regions = [4 * R, 4 * (E // R), 4 * R * T, 4 * R * T * K, 4 * R * T * K, R * T * H,
               R * T * H // 16, 4 * R * T, S * (I + I // 16 + 4), 2 * S * H, 2 * T * K * H]
    assert moe_ep.workspace_bytes(R, E, T, H, I, K) == sum(align(r) for r in regions)


def test_bad_inputs_raise_before_running():
    p = problems.make_problem("mxfp4", "mxfp4", 1)
    layer = make_layer(p, max_tokens=8)
    x, ids, w = problems.random_inputs(p, 4, 1)
    cases = [
        ((x.astype(np.float32), ids, w), ValueError, "x has dtype f32"),
        ((x, ids.astype(np.float32), w), ValueError, "topk_ids has dtype f32"),
        ((x, ids, w[:, :2].copy()), ValueError, "topk_weights has shape"),
        ((x[:, ::2], ids, w), ValueError, "x has shape"),
        ((np.asfortranarray(np.tile(x, (1, 1))).T.copy().T, ids, w), ValueError, "strides"),
        ((x, np.full_like(ids, p.E), w), ValueError, "topk_ids"),
        ((x, ids, w, np.zeros((4, p.H), np.float32)), ValueError, "y has dtype f32"),
        (([[1.0]], ids, w), TypeError, "x is a list"),
    ]
    xl, idl, wl = problems.random_inputs(p, 9, 2)
    cases.append(((xl, idl, wl), ValueError, "max_tokens_per_rank"))
    for args, exc, text in cases:
        with pytest.raises(exc, match=text) as info:
            layer.forward(*args)
        if exc is ValueError:
            assert info.value.code == "invalid argument"
    # the layer still works after every refusal
    check_against_oracle(p, layer, x, ids, w)


def test_bad_construction_names_the_parameter():
    p = problems.make_problem("mxfp4", "mxfp4", 1)
    rt = moe_ep.Runtime.acquire(device="cpu")
    pack = moe_ep.WeightPack.mxfp4(**p.tensors)
    kw = dict(num_experts=p.E, hidden_size=p.H, intermediate_size=p.I, top_k=p.K,
              max_tokens_per_rank=8, weights=pack)
    with pytest.raises(ValueError, match="recipe"):
        moe_ep.Layer(rt, recipe="fp8", **kw)
    with pytest.raises(ValueError, match="activation_clamp"):
        moe_ep.Layer(rt, activation_clamp=-1.0, **kw)
    with pytest.raises(ValueError, match="device"):
        moe_ep.Runtime.acquire(device="gpu0")
    with pytest.raises(ValueError, match=r"w2_scale has shape \[16, 256, 3\]; expected \[E, H, I/32\]"):
        moe_ep.WeightPack.mxfp4(p.tensors["w13"], p.tensors["w13_scale"], p.tensors["w2"],
                                p.tensors["w2_scale"][:, :, :3])
    bad = dict(p.tensors)
    bad["w13_scale"] = bad["w13_scale"].copy()
    bad["w13_scale"][0, 0, 0] = 0xFF
    with pytest.raises(ValueError, match="0xFF|NaN|255"):
        moe_ep.Layer(rt, **{**kw, "weights": moe_ep.WeightPack.mxfp4(**bad)})
    with pytest.raises(TypeError, match="WeightPack"):
        moe_ep.Layer(rt, **{**kw, "weights": object()})
    # GPU kernel choices are refused by the CPU backend, each named, never ignored.
    for pin, name in [(dict(gemm="wgmma"), "gemm=wgmma"), (dict(decode_split_k=2), "decode_split_k=2"),
                      (dict(fuse_quantize_route=True), "fuse_quantize_route=true"),
                      (dict(one_token_layer=False), "one_token_layer=false")]:
        with pytest.raises(moe_ep.UnsupportedError, match=name):
            moe_ep.Layer(rt, **kw, **pin)


def test_runtime_is_shared_and_a_different_world_is_refused():
    a = moe_ep.Runtime.acquire(device="cpu")
    b = moe_ep.Runtime.acquire(device="cpu")
    assert repr(a) == repr(b) and a.world_size == 1 and a.device == "cpu"
    with pytest.raises(RuntimeError, match="world"):
        moe_ep.Runtime.acquire(world_size=2, rank=0, device="cpu", comm="simulated")


def test_a_released_world_can_be_replaced():
    import gc
    a = moe_ep.Runtime.acquire(device="cpu")
    del a
    gc.collect()
    b = moe_ep.Runtime.acquire(world_size=2, rank=0, device="cpu", comm="simulated")
    assert b.world_size == 2 and b.rank == 0
    del b
    gc.collect()
    assert moe_ep.Runtime.acquire(device="cpu").world_size == 1
