"""moe_ep.integrations: the backend table, the weight-pack helpers (routed and shared experts), the
shared runtime and EPLB."""

import subprocess
import sys
import types

import ml_dtypes
import numpy as np
import pytest

import moe_ep
import problems
from moe_ep import integrations as integ


def test_import_pulls_in_no_engine_and_no_torch():
    code = ("import sys, moe_ep.integrations; "
            "bad = [m for m in ('torch', 'vllm', 'sglang') if m in sys.modules]; "
            "print(bad); sys.exit(1 if bad else 0)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_import_opens_no_nccl_library():
    # A process that imports torch after moe_ep must get torch's own libnccl.so.2 (an older one
    # loaded first leaves torch's symbols unresolved); only info() opens NCCL, for its status.
    code = ("import moe_ep, moe_ep.integrations; "
            "maps = open('/proc/self/maps').read(); "
            "print(moe_ep.__version__); sys.exit(1 if 'libnccl' in maps else 0)")
    r = subprocess.run([sys.executable, "-c", "import sys; " + code], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.strip() == moe_ep.info()["version"]


def test_backend_specs_and_support():
    assert integ.backend_spec("mxfp4").weight_formats[0] == "mxfp4"
    with pytest.raises(ValueError, match="backend = 'fp8'"):
        integ.backend_spec("fp8")
    assert integ.is_supported(None, "mxfp4") and integ.is_supported(None, "nvfp4")
    assert integ.is_supported((9, 0), "mxfp4") == moe_ep.info()["cuda"]
    assert not integ.is_supported((7, 5), "mxfp4")


def test_pack_fused_expert_weights_and_shared_runtime():
    p = problems.make_problem("mxfp4", "mxfp4", 1)
    params = {"w13_weight": p.tensors["w13"], "w13_weight_scale": p.tensors["w13_scale"],
              "w2_weight": p.tensors["w2"], "w2_weight_scale": p.tensors["w2_scale"]}
    pack = integ.pack_fused_expert_weights(params)
    assert (pack.num_experts, pack.hidden_size, pack.intermediate_size) == (p.E, p.H, p.I)
    with pytest.raises(ValueError, match="w2_weight_scale"):
        integ.pack_fused_expert_weights({k: v for k, v in params.items() if k != "w2_weight_scale"})
    a = integ.SharedRuntime.acquire(device="cpu")
    b = integ.SharedRuntime.acquire(device="cpu")
    assert a is b and a.count == 2
    layers = [moe_ep.Layer(a.runtime, num_experts=p.E, hidden_size=p.H, intermediate_size=p.I,
                           top_k=p.K, max_tokens_per_rank=8, weights=pack) for _ in range(2)]
    x, ids, w = problems.random_inputs(p, 3, 1)
    np.testing.assert_array_equal(layers[0].forward(x, ids, w).view(np.uint16),
                                  layers[1].forward(x, ids, w).view(np.uint16))
    b.release()
    a.release()
    assert a.count == 0 and a.runtime is None


def test_shared_expert_weights_from_an_engine_mlp():
    p = problems.make_problem("mxfp4", "mxfp4", 2)
    rng = np.random.default_rng(3)
    gate = (rng.standard_normal((32, p.H)) * 0.2).astype(ml_dtypes.bfloat16)
    up = (rng.standard_normal((32, p.H)) * 0.2).astype(ml_dtypes.bfloat16)
    down = (rng.standard_normal((p.H, 32)) * 0.05).astype(ml_dtypes.bfloat16)
    ns = types.SimpleNamespace
    merged = ns(gate_up_proj=ns(weight=np.concatenate([gate, up])), down_proj=ns(weight=down))
    split = {"gate_proj": {"weight": gate}, "up_proj": {"weight": up}, "down_proj": {"weight": down}}
    w13, w2 = integ.shared_expert_weights(split)
    np.testing.assert_array_equal(w13.view(np.uint16), merged.gate_up_proj.weight.view(np.uint16))
    assert w2 is down
    pack = getattr(moe_ep.WeightPack, p.weight_format)(**p.tensors)
    rt = moe_ep.Runtime.acquire(device="cpu")
    x, ids, w = problems.random_inputs(p, 4, 2)
    ys = []
    for mlp in (merged, split):
        s13, s2 = integ.shared_expert_weights(mlp)
        layer = moe_ep.Layer(rt, num_experts=p.E, hidden_size=p.H, intermediate_size=p.I, top_k=p.K,
                             max_tokens_per_rank=8, weights=pack, shared_w13=s13, shared_w2=s2)
        ys.append(layer.forward(x, ids, w).view(np.uint16))
    np.testing.assert_array_equal(ys[0], ys[1])
    with pytest.raises(ValueError, match="down_proj"):
        integ.shared_expert_weights({"gate_up_proj": {"weight": w13}})


def test_eplb_tables_follow_the_remap_rule():
    torch = pytest.importorskip("torch", reason="torch is not installed (pip install torch)")
    l2p, counts = integ.make_placement(4, [1, 1, 3])
    np.testing.assert_array_equal(counts, [1, 3, 1, 2])
    t = integ.EplbTables(l2p, counts)
    ids = torch.tensor([[1, 3, -1], [1, 1, 7], [0, 3, 2]], dtype=torch.int32)
    want = np.full((3, 3), -1)
    for r in range(3):
        for k in range(3):
            l = int(ids[r, k])
            if 0 <= l < 4:
                want[r, k] = l2p[l, (r * 3 + k) % counts[l]]
    np.testing.assert_array_equal(t.remap(ids).numpy(), want)
    assert int(t.load.sum()) == 0  # recording off
    t.recording.fill_(1)
    t.remap(ids)
    np.testing.assert_array_equal(t.load.numpy(), np.bincount(want[want >= 0], minlength=t.num_physical))


def test_validate_config_names_the_field():
    ok = dict(num_experts=16, hidden_size=256, intermediate_size=128, top_k=4)
    assert integ.validate_config("mxfp4", **ok).name == "mxfp4"
    for field, value, text in [("num_experts", 0, "num_experts = 0"), ("hidden_size", 200, "hidden_size = 200"),
                               ("intermediate_size", 64, "intermediate_size = 64"), ("top_k", 17, "top_k = 17")]:
        with pytest.raises(ValueError, match=text):
            integ.validate_config("mxfp4", **{**ok, field: value}, world_size=1)
    with pytest.raises(ValueError, match="multiple of world_size = 3"):
        integ.validate_config("mxfp4", **ok, world_size=3)
    with pytest.raises(ValueError, match="weight_format = 'nvfp4'"):
        integ.validate_config("mxfp4", **ok, weight_format="nvfp4")
    with pytest.raises(moe_ep.UnsupportedError, match="compute capability"):
        integ.validate_config("mxfp4", **ok, device_capability=(8, 0))
    assert integ.backend_spec("nvfp4").cuda_capabilities == (90,)


def test_mega_config_builds_the_layer():
    p = problems.make_problem("mxfp4", "mxfp4", 3)
    cfg = integ.MegaConfig(intermediate_size=p.I, top_k=p.K, activation_clamp=problems.CLAMP,
                           routed_scaling_factor=2.0)
    rt = integ.SharedRuntime.acquire(device="cpu")
    try:
        layer = moe_ep.Layer(rt.runtime, weights=moe_ep.WeightPack.mxfp4(**p.tensors),
                             **cfg.layer_kwargs(num_experts=p.E, hidden_size=p.H, max_tokens_per_rank=8))
        info = layer.info()
        assert (info["intermediate_size"], info["top_k"], info["activation_clamp"],
                info["routed_scaling_factor"]) == (p.I, p.K, problems.CLAMP, 2.0)
        del layer
    finally:
        rt.release()
    with pytest.raises(moe_ep.UnsupportedError, match="quantize_input"):
        integ.MegaConfig(intermediate_size=p.I, top_k=p.K, quantize_input=False).layer_kwargs(
            num_experts=p.E, hidden_size=p.H, max_tokens_per_rank=8)


def test_dequantize_mxfp4_matches_the_oracle_and_feeds_the_bf16_path():
    import reference_layer as ref
    p = problems.make_problem("mxfp4", "mxfp4", 4)
    w13 = integ.dequantize_mxfp4(p.tensors["w13"], p.tensors["w13_scale"])
    assert w13.dtype == ml_dtypes.bfloat16 and w13.shape == (p.E, 2 * p.I, p.H)
    # each element: e2m1 nibble * 2^(scale - 127), checked one block by hand
    b, s = p.tensors["w13"][0, 0, :16], np.asarray(p.tensors["w13_scale"]).view(np.uint8)[0, 0, 0]
    lut = np.array([0, .5, 1, 1.5, 2, 3, 4, 6, -0., -.5, -1, -1.5, -2, -3, -4, -6], np.float32)
    want = np.stack([lut[b & 15], lut[b >> 4]], -1).reshape(-1) * np.float32(2.0) ** (int(s) - 127)
    np.testing.assert_array_equal(np.asarray(w13[0, 0, :32], np.float32), want)
    params = {"w13_weight": p.tensors["w13"], "w13_weight_scale": p.tensors["w13_scale"],
              "w2_weight": p.tensors["w2"], "w2_weight_scale": p.tensors["w2_scale"]}
    pack = integ.mxfp4_to_bf16_pack(params)
    assert pack.format == "bf16" and (pack.num_experts, pack.hidden_size, pack.intermediate_size) == (p.E, p.H, p.I)
    # the bf16 weights re-quantized by the mxfp4 recipe give back the same layer, bit for bit
    rt = moe_ep.Runtime.acquire(device="cpu")
    kw = dict(num_experts=p.E, hidden_size=p.H, intermediate_size=p.I, top_k=p.K, max_tokens_per_rank=8,
              activation_clamp=problems.CLAMP)
    x, ids, w = problems.random_inputs(p, 5, 6)
    a = moe_ep.Layer(rt, weights=moe_ep.WeightPack.mxfp4(**p.tensors), **kw).forward(x, ids, w)
    b2 = moe_ep.Layer(rt, weights=pack, **kw).forward(x, ids, w)
    assert ref.relative_error(np.asarray(b2, np.float64), np.asarray(a, np.float64)) < 1e-2
    bad = np.asarray(p.tensors["w13_scale"]).view(np.uint8).copy()
    bad[0, 0, 0] = 0xFF
    with pytest.raises(ValueError, match="0xFF"):
        integ.dequantize_mxfp4(p.tensors["w13"], bad)
