"""The package's own surface beyond the layer math: refusals that leak nothing, read-only
arrays, the opt-in value checks, routed_scaling_factor, the router from Python, the version
and the metadata. numpy only (torch where noted, skipped with the reason without it)."""

import gc
import pathlib
import re
import subprocess
import sys
import tracemalloc

import ml_dtypes
import numpy as np
import pytest

import moe_ep
import problems
from test_package_layer import make_layer, poisoned_out

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_refused_forwards_leak_nothing():
    """Every library refusal raises a new exception carrying `.code`; none of it may stay
    allocated. 20000 refusals leaked ~1.3 MB before the fix (the code string); the bound is
    far below that and far above tracemalloc's noise."""
    p = problems.make_problem("mxfp4", "mxfp4", 1)
    layer = make_layer(p, max_tokens=8)
    x, ids, w = problems.random_inputs(p, 4, 1)
    bad = x.astype(np.float32)

    def refuse(n):
        for _ in range(n):
            try:
                layer.forward(bad, ids, w)
            except ValueError as e:
                assert e.code == "invalid argument"

    refuse(2000)  # warm caches (nanobind's, the interpreter's)
    gc.collect()
    tracemalloc.start()
    try:
        refuse(100)
        gc.collect()
        before = tracemalloc.get_traced_memory()[0]
        refuse(20000)
        gc.collect()
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert grown < 64 * 1024, f"20000 refused forwards left {grown} bytes allocated"


def test_read_only_inputs_work_and_a_read_only_out_says_so():
    p = problems.make_problem("mxfp4", "mxfp4", 2)
    layer = make_layer(p)
    x, ids, w = problems.random_inputs(p, 5, 3)
    want = layer.forward(x, ids, w).view(np.uint16).copy()
    ro = [a.copy() for a in (x, ids, w)]
    for a in ro:
        a.flags.writeable = False
    np.testing.assert_array_equal(layer.forward(*ro).view(np.uint16), want)
    out = poisoned_out(5, p.H)
    out.flags.writeable = False
    with pytest.raises(ValueError, match="out is a read-only array; expected a writable one"):
        layer.forward(x, ids, w, out=out)


def test_check_finite_names_the_first_bad_element():
    p = problems.make_problem("mxfp4", "mxfp4", 3)
    layer = make_layer(p)
    x, ids, w = problems.random_inputs(p, 6, 4)
    layer.forward(x, ids, w, check_finite=True)  # clean inputs pass
    bx = x.copy()
    bx[2, 7] = np.inf
    bx[4, 1] = np.nan
    with pytest.raises(ValueError, match=r"x\[2, 7\] is not finite"):
        layer.forward(bx, ids, w, check_finite=True)
    bw = w.copy()
    bw[3, 1] = np.nan
    with pytest.raises(ValueError, match=r"topk_weights\[3, 1\] = nan is not finite"):
        layer.forward(x, ids, bw, check_finite=True)
    bi = ids.copy()
    bi[1] = [5, 2, 5, -1][: p.K] if p.K == 4 else bi[1]
    with pytest.raises(ValueError, match=r"topk_ids\[1\] holds expert 5 in slots \[0, 2\]"):
        layer.forward(x, bi, w, check_finite=True)
    # unchecked: the forward does not read values for speed (documented)
    layer.forward(bx, bi, bw)


def test_check_inputs_environment_turns_the_check_on_everywhere():
    code = ("import numpy as np, moe_ep, problems, test_package_layer as t\n"
            "p = problems.make_problem('mxfp4', 'mxfp4', 1)\n"
            "layer = t.make_layer(p)\n"
            "x, ids, w = problems.random_inputs(p, 3, 1)\n"
            "w[0, 0] = np.inf\n"
            "try:\n    layer.forward(x, ids, w)\nexcept ValueError as e:\n    print(e)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       cwd=pathlib.Path(__file__).parent,
                       env={**__import__("os").environ, "MOE_EP_CHECK_INPUTS": "1"})
    assert "topk_weights[0, 0] = inf is not finite" in r.stdout, r.stdout + r.stderr


def test_routed_scaling_factor_scales_the_routed_weights_only():
    p = problems.make_problem("mxfp4", "mxfp4", 4)
    rt = moe_ep.Runtime.acquire(device="cpu")
    pack = moe_ep.WeightPack.mxfp4(**p.tensors)
    kw = dict(num_experts=p.E, hidden_size=p.H, intermediate_size=p.I, top_k=p.K,
              max_tokens_per_rank=16, activation_clamp=problems.CLAMP, weights=pack)
    plain = moe_ep.Layer(rt, **kw)
    scaled = moe_ep.Layer(rt, routed_scaling_factor=2.5, **kw)
    assert scaled.info()["routed_scaling_factor"] == 2.5
    x, ids, w = problems.random_inputs(p, 7, 5)
    want = plain.forward(x, ids, (w * np.float32(2.5)).astype(np.float32)).view(np.uint16)
    np.testing.assert_array_equal(scaled.forward(x, ids, w).view(np.uint16), want)
    assert not np.array_equal(plain.forward(x, ids, w).view(np.uint16), want)
    for bad in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="routed_scaling_factor"):
            moe_ep.Layer(rt, routed_scaling_factor=bad, **kw)


def _router_oracle(logits, bias, k, factor):
    """include/moe_ep/router.h in float64 (the weights to ~1e-6 of the fp32 router)."""
    v = logits.astype(np.float64)
    s = np.sqrt(np.maximum(v, 0) + np.log1p(np.exp(-np.abs(v))))
    score = s + (bias if bias is not None else 0)
    ids = np.argsort(-score, axis=1, kind="stable")[:, :k]
    sel = np.take_along_axis(s, ids, axis=1)
    return ids, sel / np.maximum(sel.sum(1, keepdims=True), 1e-20) * factor


def test_route_deepseek_v4_on_numpy():
    rng = np.random.default_rng(7)
    T, E, K = 9, 32, 4
    logits = rng.standard_normal((T, E)).astype(np.float32)
    bias = (rng.standard_normal(E) * 0.1).astype(np.float32)
    ids, weights = moe_ep.route_deepseek_v4(logits, top_k=K, routed_scaling_factor=1.5, bias=bias)
    assert ids.dtype == np.int32 and weights.dtype == np.float32 and ids.shape == (T, K)
    want_ids, want_w = _router_oracle(logits, bias, K, 1.5)
    np.testing.assert_array_equal(ids, want_ids)
    np.testing.assert_allclose(weights, want_w, rtol=2e-6)
    # bf16 logits, int64 ids, caller's outputs
    out = (np.zeros((T, K), np.int64), np.zeros((T, K), np.float32))
    lb = logits.astype(ml_dtypes.bfloat16)
    r_ids, r_w = moe_ep.route_deepseek_v4(lb, top_k=K, out=out)
    assert r_ids is out[0] and r_w is out[1]
    np.testing.assert_array_equal(r_ids, _router_oracle(lb.astype(np.float32), None, K, 1.0)[0])
    # hash layer: ids from the table, in table order
    table = rng.integers(0, E, (50, K)).astype(np.int32)
    tok = rng.integers(0, 50, T).astype(np.int64)
    h_ids, h_w = moe_ep.route_deepseek_v4(logits, top_k=K, layer_idx=1, num_hash_layers=2,
                                          token_ids=tok, hash_table=table)
    np.testing.assert_array_equal(h_ids, table[tok])
    np.testing.assert_allclose(h_w.sum(1), 1.0, rtol=1e-5)

    class Remap:  # an EPLB table: any object with remap(ids)
        def remap(self, ids):
            return np.where(ids >= 0, ids + 100, -1).astype(ids.dtype)
    e_ids, _ = moe_ep.route_deepseek_v4(logits, top_k=K, bias=bias, eplb=Remap())
    np.testing.assert_array_equal(e_ids, want_ids + 100)
    bad = logits.copy()
    bad[3, 5] = np.nan
    with pytest.raises(ValueError, match="logits"):
        moe_ep.route_deepseek_v4(bad, top_k=K)
    with pytest.raises(ValueError, match="top_k"):
        moe_ep.route_deepseek_v4(logits, top_k=E + 1)


def test_route_deepseek_v4_on_torch_cpu_and_cuda():
    torch = pytest.importorskip("torch", reason="torch is not installed (pip install torch)")
    rng = np.random.default_rng(8)
    logits = rng.standard_normal((5, 16)).astype(np.float32)
    n_ids, n_w = moe_ep.route_deepseek_v4(logits, top_k=3)
    t_ids, t_w = moe_ep.route_deepseek_v4(torch.from_numpy(logits), top_k=3)
    assert isinstance(t_ids, torch.Tensor) and t_ids.dtype == torch.int32
    np.testing.assert_array_equal(t_ids.numpy(), n_ids)
    np.testing.assert_array_equal(t_w.numpy(), n_w)
    if torch.cuda.is_available() and moe_ep.info()["cuda"]:
        bias = (rng.standard_normal(16) * 0.1).astype(np.float32)
        c_ids, c_w = moe_ep.route_deepseek_v4(torch.from_numpy(logits).cuda(), top_k=3,
                                              routed_scaling_factor=2.5,
                                              bias=torch.from_numpy(bias).cuda())
        h_ids, h_w = moe_ep.route_deepseek_v4(logits, top_k=3, routed_scaling_factor=2.5, bias=bias)
        assert c_ids.device.type == "cuda"
        np.testing.assert_array_equal(c_ids.cpu().numpy(), h_ids)
        np.testing.assert_array_equal(c_w.cpu().numpy().view(np.uint32), h_w.view(np.uint32))


def _placement(L, redundant):
    """A placement that replicates hot experts (every 5th) several times: [L, R] and [L]."""
    extra = [(5 * j) % L for j in range(redundant)]
    rows = [[l] + [L + j for j, e in enumerate(extra) if e == l] for l in range(L)]
    R = max(len(r) for r in rows)
    l2p = np.array([r + [-1] * (R - len(r)) for r in rows], np.int32)
    return l2p, np.array([len(r) for r in rows], np.int32)


def _remap(ids, l2p, counts):
    """include/moe_ep/eplb.h's rule in numpy: slot (t, k) of logical l -> l2p[l, (t*K+k) % n[l]]."""
    T, K = ids.shape
    out = np.full_like(ids, -1)
    for t in range(T):
        for k in range(K):
            l = ids[t, k]
            if 0 <= l < l2p.shape[0]:
                out[t, k] = l2p[l, (t * K + k) % counts[l]]
    return out


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_routing_stage_routes_remaps_and_counts(device):
    if device == "cuda":
        torch = pytest.importorskip("torch", reason="torch is not installed (pip install torch)")
        if not (torch.cuda.is_available() and moe_ep.info()["cuda"]):
            pytest.skip("no CUDA device or a build without CUDA")
    rng = np.random.default_rng(11)
    T, L, K = 37, 20, 4
    logits = rng.standard_normal((T, L)).astype(np.float32)
    l2p, counts = _placement(L, 6)
    want_logical, want_w = moe_ep.route_deepseek_v4(logits, top_k=K, routed_scaling_factor=1.5)
    want = _remap(want_logical, l2p, counts)
    stage = moe_ep.RoutingStage(device, L, K, routed_scaling_factor=1.5,
                                logical_to_physical=l2p, replica_count=counts)
    assert stage.num_physical == L + 6 and stage.has_router and stage.has_placement
    stage.set_recording(True)
    if device == "cpu":
        ids = np.full((T, K), 0x7F7F7F7F, np.int32)
        w = np.full((T, K), np.nan, np.float32)
        stage.route(ids, logits, topk_weights=w)
    else:
        ids = torch.full((T, K), 0x7F7F7F7F, dtype=torch.int32, device="cuda")
        w = torch.full((T, K), float("nan"), device="cuda")
        stage.route(ids, torch.from_numpy(logits).cuda(), topk_weights=w)
        torch.cuda.synchronize()
        ids, w = ids.cpu().numpy(), w.cpu().numpy()
    np.testing.assert_array_equal(ids, want)
    np.testing.assert_array_equal(w.view(np.uint32), want_w.view(np.uint32))
    np.testing.assert_array_equal(stage.counter_values(),
                                  np.bincount(want.ravel(), minlength=L + 6))
    stage.reset_counters()
    assert sum(stage.counter_values()) == 0
    assert stage.read_error_flags() == 0
    # remap only, on the caller's logical ids (holes and out-of-range ids become -1)
    remap = moe_ep.RoutingStage(device, L, K, router=False, logical_to_physical=l2p,
                                replica_count=counts)
    logical = want_logical.astype(np.int64)
    logical[0, 0], logical[1, 1] = -1, L + 3
    out = np.zeros((T, K), np.int64)
    if device == "cpu":
        remap.route(out, logical_ids=logical)
    else:
        d_out = torch.zeros((T, K), dtype=torch.int64, device="cuda")
        remap.route(d_out, logical_ids=torch.from_numpy(logical).cuda())
        out = d_out.cpu().numpy()
    np.testing.assert_array_equal(out, _remap(logical, l2p, counts))
    with pytest.raises(ValueError, match="router"):
        moe_ep.RoutingStage(device, L, K, router=False)
    with pytest.raises(ValueError, match="topk_weights"):
        stage.route(np.zeros((T, K), np.int32) if device == "cpu" else
                    torch.zeros((T, K), dtype=torch.int32, device="cuda"),
                    logits if device == "cpu" else torch.from_numpy(logits).cuda())


def test_version_is_single_sourced():
    cmake = (ROOT / "CMakeLists.txt").read_text()
    version = re.search(r"project\(moe_ep VERSION ([0-9.]+)", cmake).group(1)
    assert moe_ep.__version__ == version == moe_ep.info()["version"]
    assert f"## {version}" in (ROOT / "CHANGELOG.md").read_text()
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert 'dynamic = ["version"]' in pyproject and "Apache-2.0" in pyproject
    assert "Apache License" in (ROOT / "LICENSE").read_text()
    try:  # an installed package's metadata says the same
        from importlib.metadata import PackageNotFoundError, version as dist_version
        assert dist_version("moe_ep") == version
    except PackageNotFoundError:
        pass  # the build tree (PYTHONPATH), not an installed wheel


def test_bench_without_torch_says_what_to_install():
    code = ("import sys; sys.modules['torch'] = None; import runpy; "
            "runpy.run_module('moe_ep.bench', run_name='__main__')")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 2, r.stdout + r.stderr
    assert "pip install 'moe_ep[torch]'" in r.stderr and "Traceback" not in r.stderr
