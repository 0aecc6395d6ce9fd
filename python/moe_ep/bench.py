"""``python -m moe_ep.bench``: the Python call overhead over the C++ forward.

Host time of one call on a tiny-preset MXFP4 layer at T tokens (eager launches are
asynchronous, so this is what the caller's thread spends): the library's forward in a C++ loop
with the arguments imported once (the baseline), ``layer.forward`` and
``torch.ops.moe_ep.forward`` from Python; the overhead is the difference. Under CUDA-graph
replay no Python or binding code runs at all. Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np


def _tiny_layer(torch, device, seed=1):
    import moe_ep
    E, H, I, K = 16, 256, 128, 4
    g = torch.Generator(device="cpu").manual_seed(seed)
    w13 = torch.randint(0, 256, (E, 2 * I, H // 2), dtype=torch.uint8, generator=g)
    w2 = torch.randint(0, 256, (E, H, I // 2), dtype=torch.uint8, generator=g)
    s13 = torch.randint(120, 123, (E, 2 * I, H // 32), dtype=torch.uint8, generator=g)
    s2 = torch.randint(120, 123, (E, H, I // 32), dtype=torch.uint8, generator=g)
    rt = moe_ep.Runtime.acquire(device=device)
    layer = moe_ep.Layer(rt, num_experts=E, hidden_size=H, intermediate_size=I, top_k=K,
                         max_tokens_per_rank=256, activation_clamp=10.0,
                         weights=moe_ep.WeightPack.mxfp4(w13, s13, w2, s2))
    return layer, (E, H, I, K)


def _host_us(fn, sync, rounds, per_round=20):
    """Median host microseconds of one call: `per_round` calls between synchronizations (few
    enough that the launch queue never blocks), `rounds` times."""
    samples = []
    for _ in range(rounds):
        sync()
        t0 = time.perf_counter()
        for _ in range(per_round):
            fn()
        samples.append((time.perf_counter() - t0) / per_round * 1e6)
    sync()
    return float(np.median(samples))


def _gpu_unusable(torch, moe_ep, device: str) -> str:
    """Why `device` cannot run the bench, or '' when it can."""
    if not moe_ep.info()["cuda"]:
        return "this moe_ep build has no CUDA backend"
    if not torch.cuda.is_available():
        return f"torch {torch.__version__} sees no CUDA device"
    index = torch.device(device).index or 0
    if index >= torch.cuda.device_count():
        return f"torch sees {torch.cuda.device_count()} CUDA device(s)"
    cc = torch.cuda.get_device_capability(index)
    from moe_ep.integrations import is_supported
    if not is_supported(cc, "mxfp4"):
        return f"compute capability {cc[0]}.{cc[1]} has no moe_ep kernels (SM90 needed)"
    return ""


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m moe_ep.bench", description=__doc__)
    ap.add_argument("--tokens", "-T", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=200)
    ap.add_argument("--device", default="auto",
                    help="auto (cuda:0 when a GPU is usable, else cpu), cpu, cuda or cuda:N")
    args = ap.parse_args(argv)
    try:
        import torch
    except ImportError:
        print("python -m moe_ep.bench needs torch: pip install 'moe_ep[torch]'", file=sys.stderr)
        return 2
    import moe_ep
    import moe_ep.torch_ops as ops

    requested = args.device
    if requested == "auto" or requested.startswith("cuda"):
        reason = _gpu_unusable(torch, moe_ep, "cuda:0" if requested == "auto" else requested)
        if reason:
            what = "no usable GPU" if requested == "auto" else f"{requested} is not usable"
            print(f"moe_ep.bench: {what} ({reason}); measuring on the CPU", file=sys.stderr)
            args.device = "cpu"
        elif requested == "auto":
            args.device = "cuda:0"

    layer, (E, H, I, K) = _tiny_layer(torch, args.device)
    dev = torch.device(args.device)
    T = args.tokens
    x = torch.randn(T, H, device=dev).to(torch.bfloat16)
    ids = torch.stack([torch.randperm(E)[:K] for _ in range(T)]).to(torch.int32).to(dev)
    w = torch.rand(T, K, device=dev)
    y = torch.empty_like(x)
    handle = ops.register(layer)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    n = 20
    for _ in range(5):  # warm-up
        layer.forward(x, ids, w, out=y)
        torch.ops.moe_ep.forward(x, ids, w, handle)
    res = {"device": args.device, "requested_device": requested, "T": T, "rounds": args.rounds, "calls_per_round": n}
    cpp = []
    for _ in range(args.rounds):
        sync()
        cpp.append(layer._host_time_forward(x, ids, w, y, n) / n * 1e6)
    sync()
    res["cpp_forward_host_us"] = float(np.median(cpp))
    res["layer_forward_host_us"] = _host_us(lambda: layer.forward(x, ids, w, out=y), sync, args.rounds, n)
    res["custom_op_host_us"] = _host_us(lambda: torch.ops.moe_ep.forward(x, ids, w, handle), sync,
                                        args.rounds, n)
    res["python_overhead_eager_us"] = res["layer_forward_host_us"] - res["cpp_forward_host_us"]
    res["custom_op_overhead_eager_us"] = res["custom_op_host_us"] - res["cpp_forward_host_us"]
    if dev.type == "cuda":
        g = torch.cuda.CUDAGraph()
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            torch.ops.moe_ep.forward(x, ids, w, handle)
        torch.cuda.current_stream().wait_stream(s)
        with torch.cuda.graph(g):
            out = torch.ops.moe_ep.forward(x, ids, w, handle)
        res["graph_replay_host_us"] = _host_us(g.replay, sync, args.rounds, n)
        sync()
        t0 = time.perf_counter()
        for _ in range(n * 10):
            g.replay()
        sync()
        res["graph_replay_wall_per_forward_us"] = (time.perf_counter() - t0) / (n * 10) * 1e6
        res["python_overhead_graph_us"] = 0.0  # a replay runs no Python and no binding code
        del out
    print(json.dumps(res))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
