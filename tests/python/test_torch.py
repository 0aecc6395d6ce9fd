"""The package with torch tensors: CPU always (when torch is installed), CUDA on a GPU machine.
The CUDA forwards are compared with the package's CPU layer (the C++ reference backend, same
weights) and with the numpy oracle; CUDA-graph capture/replay, torch.compile(fullgraph=True),
bad inputs, a side stream and two layers sharing the runtime.

A process holds one runtime world at a time (docs/spec.md §7): the CPU references of a CUDA test are
computed, and their CPU layer released, before its CUDA runtime is acquired, and every test
drops its layers (and the op registry's) at its end."""

import gc

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (pip install torch)")

import moe_ep  # noqa: E402
import moe_ep.torch_ops as ops  # noqa: E402
import problems  # noqa: E402
import reference_layer as ref  # noqa: E402

HAS_CUDA = torch.cuda.is_available() and moe_ep.info()["cuda"]
needs_cuda = pytest.mark.skipif(not HAS_CUDA, reason="no CUDA device or a build without CUDA")
LIMITS = {"mxfp4": 1e-3, "nvfp4": 3e-2}       # vs the oracle (as tests/python/test_package_layer.py)
DEVICE_LIMITS = {"mxfp4": 2e-3, "nvfp4": 3e-2}  # vs the CPU layer (src/testing/tolerances.h)


@pytest.fixture(autouse=True)
def release_layers():
    yield
    ops.unregister_all()
    gc.collect()


def cpu_forward(p, x, ids, w):
    """The CPU layer's y for numpy inputs; its runtime is released before returning."""
    layer = layer_on(p, "cpu")
    y = layer.forward(x, ids, w)
    del layer
    gc.collect()
    return y


def to_torch(a, device="cpu"):
    """numpy (ml_dtypes) -> torch on `device`, by bit pattern."""
    name = a.dtype.name
    if name == "bfloat16":
        return torch.from_numpy(a.view(np.int16).copy()).view(torch.bfloat16).to(device)
    if name == "float8_e4m3fn":
        return torch.from_numpy(a.view(np.uint8).copy()).view(torch.float8_e4m3fn).to(device)
    return torch.from_numpy(np.ascontiguousarray(a)).to(device)


def layer_on(p, device, max_tokens=64, runtime=None, **kw):
    rt = runtime or moe_ep.Runtime.acquire(device=device)
    tensors = {k: to_torch(v, "cpu") for k, v in p.tensors.items()}
    pack = getattr(moe_ep.WeightPack, p.weight_format)(**tensors)
    return moe_ep.Layer(rt, num_experts=p.E, hidden_size=p.H, intermediate_size=p.I, top_k=p.K,
                        max_tokens_per_rank=max_tokens, recipe=p.recipe,
                        activation_clamp=problems.CLAMP, weights=pack, **kw)


def bits(t):
    return t.view(torch.int16).cpu().numpy()


def as_f64(t):
    return t.float().cpu().numpy().astype(np.float64)


def inputs(p, T, seed, device):
    x, ids, w = problems.random_inputs(p, T, seed)
    return x, ids, w, to_torch(x, device), to_torch(ids, device), to_torch(w, device)


def captured(fn, *args):
    """(graph, its output) of fn(*args) captured by torch, after a warm-up on a side stream as
    torch.cuda.graph asks."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        fn(*args)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        static_y = fn(*args)
    return g, static_y


def captured_forward(tx, tids, tw, handle):
    """(graph, its output) of one torch.ops.moe_ep.forward."""
    return captured(torch.ops.moe_ep.forward, tx, tids, tw, handle)


def router_inputs(p, T):
    """x bf16 [T, H], a gate f32 [E, H] and a correction bias f32 [E] for the router op tests."""
    g = torch.Generator().manual_seed(4)
    x = (torch.randn(T, p.H, generator=g)).to(torch.bfloat16)
    gate = torch.randn(p.E, p.H, generator=g) / p.H ** 0.5
    bias = torch.randn(p.E, generator=g) * 0.1
    return x, gate, bias


def poisoned(T, H, device):
    return torch.full((T, H), float("nan"), dtype=torch.bfloat16, device=device)


# ---- CPU ---------------------------------------------------------------------------------------


def test_cpu_torch_tensors_match_numpy_and_custom_op():
    p = problems.make_problem("mxfp4", "mxfp4", 1)
    layer = layer_on(p, "cpu")
    x, ids, w, tx, tids, tw = inputs(p, 9, 3, "cpu")
    want = layer.forward(x, ids, w).view(np.int16)
    out = poisoned(9, p.H, "cpu")
    assert layer.forward(tx, tids, tw, out=out) is out
    np.testing.assert_array_equal(bits(out), want)
    handle = ops.register(layer)
    np.testing.assert_array_equal(bits(torch.ops.moe_ep.forward(tx, tids, tw, handle)), want)
    fn = torch.compile(lambda a, b, c: torch.ops.moe_ep.forward(a, b, c, handle) * 2,
                       fullgraph=True, backend="aot_eager")
    np.testing.assert_array_equal(bits(fn(tx, tids, tw)), bits(torch.ops.moe_ep.forward(tx, tids, tw, handle) * 2))
    with pytest.raises(ValueError, match="layer handle"):
        torch.ops.moe_ep.forward(tx, tids, tw, 10 ** 9)


def test_torch_tensors_import_through_the_dlpack_exchange_api():
    """torch >= 2.10 describes its tensors through the DLPack C exchange API: the binding reads
    them without Python code (test_cpu_torch_tensors_match_numpy_and_custom_op checks the views
    it makes against the __dlpack__ path bit for bit)."""
    if not hasattr(torch.Tensor, "__dlpack_c_exchange_api__"):
        pytest.skip(f"torch {torch.__version__} has no DLPack C exchange API (torch >= 2.10 has)")
    x = torch.zeros(3, 4, dtype=torch.bfloat16)
    assert moe_ep._core._imports_through_dlpack_exchange_api(x)
    assert moe_ep._core._imports_through_dlpack_exchange_api(x[:, 1:])  # strided: the library checks it
    if not hasattr(np.ndarray, "__dlpack_c_exchange_api__"):  # numpy arrays take __dlpack__
        assert not moe_ep._core._imports_through_dlpack_exchange_api(np.zeros(3))


def test_cpu_fake_impl_gives_shape_without_running():
    from torch._subclasses.fake_tensor import FakeTensorMode
    with FakeTensorMode():
        x = torch.empty(5, 256, dtype=torch.bfloat16)
        y = torch.ops.moe_ep.forward(x, torch.empty(5, 4, dtype=torch.int32), torch.empty(5, 4), 0)
        assert y.shape == (5, 256) and y.dtype == torch.bfloat16


# ---- CUDA --------------------------------------------------------------------------------------


@needs_cuda
@pytest.mark.parametrize("recipe,weight_format", [("mxfp4", "mxfp4"), ("nvfp4", "nvfp4")])
@pytest.mark.parametrize("T", [1, 7, 64])
def test_cuda_forward_matches_cpu_layer_and_oracle(recipe, weight_format, T):
    p = problems.make_problem(recipe, weight_format, 11)
    x, ids, w, tx, tids, tw = inputs(p, T, 100 + T, "cuda")
    want_cpu = cpu_forward(p, x, ids, w)
    oracle = ref.layer_forward(recipe, p.oracle, x.view(np.uint16), ids, w, problems.CLAMP)
    for exact in (True, False) if recipe == "mxfp4" else (False,):
        gpu = layer_on(p, "cuda:0", exact_accumulation=exact)
        out = poisoned(T, p.H, "cuda")
        gpu.forward(tx, tids, tw, out=out)
        torch.cuda.synchronize()
        got = as_f64(out)
        assert np.all(np.isfinite(got)), "rows left unwritten"
        e_cpu = ref.relative_error(got, np.asarray(want_cpu, np.float64))
        e_ref = ref.relative_error(got, oracle)
        print(f"{recipe} T={T} exact={exact}: vs CPU layer {e_cpu:.3e}, vs oracle {e_ref:.3e}")
        if recipe == "mxfp4" and exact:
            # mma.sync kernels keep docs/spec.md's fp32 k32 sums: bitwise equal to the CPU layer
            np.testing.assert_array_equal(bits(out), want_cpu.view(np.int16))
        limit = 6e-3 if (recipe == "mxfp4" and not exact) else DEVICE_LIMITS[recipe]
        assert e_cpu <= limit
        assert e_ref <= max(limit, LIMITS[recipe])
        gpu.check_error_flags()
        del gpu
        gc.collect()


@needs_cuda
def test_cuda_graph_capture_replay_and_compile():
    p = problems.make_problem("mxfp4", "mxfp4", 2)
    gpu = layer_on(p, "cuda:0")
    handle = ops.register(gpu)
    x, ids, w, tx, tids, tw = inputs(p, 16, 5, "cuda")
    eager = torch.ops.moe_ep.forward(tx, tids, tw, handle).clone()
    g, static_y = captured_forward(tx, tids, tw, handle)
    g.replay()
    torch.cuda.synchronize()
    np.testing.assert_array_equal(bits(static_y), bits(eager))
    # new inputs copied into the captured tensors
    x2, ids2, w2, tx2, tids2, tw2 = inputs(p, 16, 6, "cuda")
    tx.copy_(tx2), tids.copy_(tids2), tw.copy_(tw2)
    g.replay()
    torch.cuda.synchronize()
    np.testing.assert_array_equal(bits(static_y), bits(torch.ops.moe_ep.forward(tx2, tids2, tw2, handle)))

    def model(a, b, c):  # elementwise around the op: exact, so compiled == eager bitwise
        return torch.ops.moe_ep.forward(a, b, c, handle) * 2 + a
    compiled = torch.compile(model, fullgraph=True)
    torch.testing.assert_close(compiled(tx2, tids2, tw2), model(tx2, tids2, tw2), rtol=0, atol=0)


def shared_expert_tensors(H, i_s, seed):
    """bf16 torch (CPU) weights of a shared expert whose output is of the routed y's size."""
    g = torch.Generator().manual_seed(seed)
    w13 = (torch.randn(2 * i_s, H, generator=g) * 4 / H ** 0.5).to(torch.bfloat16)
    w2 = (torch.randn(H, i_s, generator=g) * 0.05 / i_s ** 0.5).to(torch.bfloat16)
    return w13, w2


@needs_cuda
@pytest.mark.parametrize("T", [3, 100])  # the shared expert's dot-product and tensor-core kernels
def test_cuda_shared_expert_in_the_layer_matches_cpu_and_replays_in_a_torch_graph(T):
    p = problems.make_problem("mxfp4", "mxfp4", 5)
    w13, w2 = shared_expert_tensors(p.H, 64, 9)
    x, ids, w, tx, tids, tw = inputs(p, T, 11, "cuda")
    ids[0, :] = -1  # token 0: the shared expert's output alone
    tids[0, :] = -1
    cpu = layer_on(p, "cpu", max_tokens=128, shared_w13=w13, shared_w2=w2)
    want = as_f64(cpu.forward(to_torch(x), to_torch(ids), to_torch(w)))
    del cpu
    gc.collect()
    gpu = layer_on(p, "cuda:0", max_tokens=128, shared_w13=w13.cuda(), shared_w2=w2.cuda())
    assert "shared_expert" in gpu.info()["config"]
    handle = ops.register(gpu)
    eager = torch.ops.moe_ep.forward(tx, tids, tw, handle).clone()
    assert ref.relative_error(as_f64(eager), want) <= DEVICE_LIMITS["mxfp4"]
    assert eager[0].abs().sum().item() > 0
    g, static_y = captured_forward(tx, tids, tw, handle)  # the layer's second stream: a branch
    for _ in range(2):
        static_y.fill_(float("nan"))
        g.replay()
        torch.cuda.synchronize()
        np.testing.assert_array_equal(bits(static_y), bits(eager))


@needs_cuda
def test_cuda_side_stream_and_two_layers_sharing_the_runtime():
    p1 = problems.make_problem("mxfp4", "mxfp4", 3)
    p2 = problems.make_problem("nvfp4", "nvfp4", 4)
    x, ids, w, tx, tids, tw = inputs(p1, 8, 7, "cuda")
    want1 = cpu_forward(p1, x, ids, w)
    rt = moe_ep.Runtime.acquire(device="cuda:0")
    l1, l2 = layer_on(p1, "cuda:0", runtime=rt), layer_on(p2, "cuda:0", runtime=rt)
    assert l1.runtime.device == l2.runtime.device == "cuda:0"
    base1 = l1.forward(tx, tids, tw).clone()
    base2 = l2.forward(base1, tids, tw).clone()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        y1 = l1.forward(tx, tids, tw)
        y2 = l2.forward(y1, tids, tw)  # back to back on one stream
    s.synchronize()
    np.testing.assert_array_equal(bits(y1), bits(base1))
    np.testing.assert_array_equal(bits(y2), bits(base2))
    assert ref.relative_error(as_f64(y1), np.asarray(want1, np.float64)) <= 6e-3
    # the second layer against the oracle, on the first layer's output
    y1_np = bits(y1).view(np.uint16)
    want2 = ref.layer_forward("nvfp4", p2.oracle, y1_np, ids, w, problems.CLAMP)
    assert ref.relative_error(as_f64(y2), want2) <= DEVICE_LIMITS["nvfp4"]


@needs_cuda
def test_cuda_bad_inputs_are_refused_before_any_kernel():
    p = problems.make_problem("mxfp4", "mxfp4", 1)
    gpu = layer_on(p, "cuda:0", max_tokens=8)
    x, ids, w, tx, tids, tw = inputs(p, 4, 1, "cuda")
    out = poisoned(4, p.H, "cuda")
    cases = [
        ((tx.cpu(), tids, tw), "x is on cpu"),
        ((tx, tids.cpu(), tw), "topk_ids is on cpu"),
        ((tx.float(), tids, tw), "x has dtype f32"),
        ((tx, tids, tw.half()), "topk_weights has dtype f16"),
        ((torch.cat([tx, tx], 1)[:, ::2], tids, tw), "strides"),
        ((tx.t().contiguous().t(), tids, tw), "strides"),
        ((torch.cat([tx, tx, tx]), torch.cat([tids] * 3), torch.cat([tw] * 3)), "max_tokens_per_rank"),
    ]
    for args, text in cases:
        with pytest.raises(ValueError, match=text):
            gpu.forward(*args, out=out)
    torch.cuda.synchronize()
    assert torch.isnan(out.float()).all(), "a refused call wrote the output"
    if torch.cuda.device_count() > 1:
        with pytest.raises(ValueError, match="cuda:1"):
            gpu.forward(tx.to("cuda:1"), tids, tw)
    # device-side check: an out-of-range id is skipped and raises the sticky flag
    bad = tids.clone()
    bad[0, 0] = p.E + 3
    gpu.forward(tx, bad, tw, out=out)
    with pytest.raises(moe_ep.DeviceError):
        gpu.check_error_flags()
    gpu.forward(tx, tids, tw, out=out)  # the layer stays usable
    gpu.check_error_flags()


# ---- engine conventions: out= ops, layers by name, routed_scaling_factor, value checks -------


def test_cpu_out_and_named_ops_match_forward_and_compile():
    p = problems.make_problem("mxfp4", "mxfp4", 6)
    layer = layer_on(p, "cpu")
    name = "model.layers.0.mlp.experts"
    handle = ops.register(layer, name=name)
    x, ids, w, tx, tids, tw = inputs(p, 5, 8, "cpu")
    want = bits(torch.ops.moe_ep.forward(tx, tids, tw, handle))
    out = poisoned(5, p.H, "cpu")
    assert torch.ops.moe_ep.forward_out(tx, tids, tw, handle, out) is None
    np.testing.assert_array_equal(bits(out), want)
    np.testing.assert_array_equal(bits(torch.ops.moe_ep.forward_named(tx, tids, tw, name)), want)
    out.fill_(float("nan"))
    torch.ops.moe_ep.forward_named_out(tx, tids, tw, name, out)
    np.testing.assert_array_equal(bits(out), want)

    def model(a, b, c, o):  # the engine's pattern: a preallocated output, the layer by name
        torch.ops.moe_ep.forward_named_out(a, b, c, name, o)
        return o * 2
    compiled = torch.compile(model, fullgraph=True, backend="aot_eager")
    o2 = poisoned(5, p.H, "cpu")
    np.testing.assert_array_equal(bits(compiled(tx, tids, tw, o2)), bits(model(tx, tids, tw, out)))
    with pytest.raises(ValueError, match="layer_name = 'nope' is not registered"):
        torch.ops.moe_ep.forward_named(tx, tids, tw, "nope")
    ops.set_layer_resolver(lambda n: layer if n == "ctx:0" else None)  # an engine's forward context
    try:
        np.testing.assert_array_equal(bits(torch.ops.moe_ep.forward_named(tx, tids, tw, "ctx:0")), want)
        with pytest.raises(ValueError, match="unknown to the installed resolver"):
            torch.ops.moe_ep.forward_named(tx, tids, tw, name)
    finally:
        ops.set_layer_resolver(None)
    ops.unregister(name)
    with pytest.raises(ValueError, match="not registered"):
        torch.ops.moe_ep.forward(tx, tids, tw, handle)


def test_cpu_routed_scaling_factor_and_check_finite_on_torch_tensors():
    p = problems.make_problem("mxfp4", "mxfp4", 7)
    plain, scaled = layer_on(p, "cpu"), layer_on(p, "cpu", routed_scaling_factor=1.75)
    x, ids, w, tx, tids, tw = inputs(p, 6, 9, "cpu")
    np.testing.assert_array_equal(bits(scaled.forward(tx, tids, tw)),
                                  bits(plain.forward(tx, tids, tw * 1.75)))
    bad = tx.clone()
    bad[1, 3] = float("nan")
    with pytest.raises(ValueError, match=r"x\[1, 3\] is not finite"):
        plain.forward(bad, tids, tw, check_finite=True)


def test_bench_falls_back_to_the_cpu_without_a_gpu():
    import json
    import os
    import subprocess
    import sys
    r = subprocess.run([sys.executable, "-m", "moe_ep.bench", "--rounds", "3", "--device", "cuda:0"],
                       capture_output=True, text=True, env=dict(os.environ, CUDA_VISIBLE_DEVICES=""))
    assert r.returncode == 0, r.stderr
    assert "measuring on the CPU" in r.stderr
    res = json.loads(r.stdout)
    assert res["device"] == "cpu" and res["requested_device"] == "cuda:0"


@needs_cuda
def test_cuda_out_and_named_ops_capture_and_compile():
    p = problems.make_problem("mxfp4", "mxfp4", 8)
    gpu = layer_on(p, "cuda:0", routed_scaling_factor=1.5)
    name = "model.layers.1.mlp.experts"
    handle = ops.register(gpu, name=name)
    x, ids, w, tx, tids, tw = inputs(p, 16, 12, "cuda")
    plain = layer_on(p, "cuda:0")
    want = bits(plain.forward(tx, tids, tw * 1.5))  # the device multiply equals prescaled weights
    del plain
    np.testing.assert_array_equal(bits(torch.ops.moe_ep.forward(tx, tids, tw, handle)), want)
    out = poisoned(16, p.H, "cuda")
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        torch.ops.moe_ep.forward_named_out(tx, tids, tw, name, out)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        torch.ops.moe_ep.forward_out(tx, tids, tw, handle, out)
    out.fill_(float("nan"))
    g.replay()
    torch.cuda.synchronize()
    np.testing.assert_array_equal(bits(out), want)

    def model(a, b, c, o):
        torch.ops.moe_ep.forward_named_out(a, b, c, name, o)
        return o * 2 + a
    compiled = torch.compile(model, fullgraph=True)
    o2 = poisoned(16, p.H, "cuda")
    torch.testing.assert_close(compiled(tx, tids, tw, o2), model(tx, tids, tw, out), rtol=0, atol=0)


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda:0", marks=needs_cuda)])
def test_example_model_file_runs_and_is_deterministic(device):
    import os
    import pathlib
    import subprocess
    import sys
    example = pathlib.Path(__file__).resolve().parents[2] / "examples" / "vllm_style_moe.py"
    runs = [subprocess.run([sys.executable, str(example), "--device", device, "--tokens", "5"],
                           capture_output=True, text=True, env=dict(os.environ)) for _ in range(2)]
    for r in runs:
        assert r.returncode == 0, r.stdout + r.stderr
    assert "bit checksum" in runs[0].stdout
    assert runs[0].stdout == runs[1].stdout  # seeded: the same numbers every run


def test_cpu_router_op_compiles_with_the_layer():
    p = problems.make_problem("mxfp4", "mxfp4", 9)
    layer = layer_on(p, "cpu")
    handle = ops.register(layer)
    x, gate, bias = router_inputs(p, 6)

    def model(a):
        ids, w = torch.ops.moe_ep.route_deepseek_v4(a.float() @ gate.t(), p.K, 1.5, bias, 0, 0, None, None)
        return torch.ops.moe_ep.forward(a, ids, w, handle)
    want_ids, want_w = moe_ep.route_deepseek_v4((x.float() @ gate.t()).numpy(), top_k=p.K,
                                                routed_scaling_factor=1.5, bias=bias.numpy())
    ids, w = torch.ops.moe_ep.route_deepseek_v4(x.float() @ gate.t(), p.K, 1.5, bias, 0, 0, None, None)
    np.testing.assert_array_equal(ids.numpy(), want_ids)
    np.testing.assert_array_equal(w.numpy(), want_w)
    compiled = torch.compile(model, fullgraph=True, backend="aot_eager")
    np.testing.assert_array_equal(bits(compiled(x)), bits(model(x)))


@needs_cuda
def test_cuda_router_op_captures_and_compiles_with_the_layer():
    """The router op on CUDA tensors (the library's routing stage) equals the CPU router bitwise,
    replays in a captured CUDA graph with the layer, and compiles with fullgraph=True."""
    p = problems.make_problem("mxfp4", "mxfp4", 9)
    gpu = layer_on(p, "cuda:0")
    handle = ops.register(gpu)
    x, gate, bias = router_inputs(p, 24)
    logits = x.float() @ gate.t()
    want_ids, want_w = moe_ep.route_deepseek_v4(logits.numpy(), top_k=p.K, routed_scaling_factor=1.5,
                                                bias=bias.numpy())
    dx, dgate, dbias = x.cuda(), gate.cuda(), bias.cuda()
    ids, w = torch.ops.moe_ep.route_deepseek_v4(logits.cuda(), p.K, 1.5, dbias, 0, 0, None, None)
    np.testing.assert_array_equal(ids.cpu().numpy(), want_ids)
    np.testing.assert_array_equal(w.cpu().numpy().view(np.uint32), want_w.view(np.uint32))

    def model(a):
        r_ids, r_w = torch.ops.moe_ep.route_deepseek_v4(a.float() @ dgate.t(), p.K, 1.5, dbias, 0, 0,
                                                        None, None)
        return torch.ops.moe_ep.forward(a, r_ids, r_w, handle)
    eager = model(dx).clone()
    graph, static_y = captured(model, dx)
    graph.replay()
    torch.cuda.synchronize()
    np.testing.assert_array_equal(bits(static_y), bits(eager))
    compiled = torch.compile(model, fullgraph=True, backend="aot_eager")  # the gate matmul as eager's
    np.testing.assert_array_equal(bits(compiled(dx)), bits(eager))
