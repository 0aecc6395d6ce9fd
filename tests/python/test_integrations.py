"""moe_ep.integrations: the backend table, the weight-pack helper, the shared runtime and EPLB."""

import subprocess
import sys

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
