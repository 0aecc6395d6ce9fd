#!/usr/bin/env python3
"""PyTorch peers of the moe_ep layer, timed the same way as `moe_ep bench` (CUDA graph replays,
median of event-timed replays), for the side-by-side table of bench/RESULTS.md.

Two pipelines of the same layer (route -> GEMM 1 -> clamped SwiGLU * topk weight -> GEMM 2 ->
combine in slot order), on weights that are dequantized MXFP4 (e2m1 * 2^k per 32 along K):
  bf16:        torch._grouped_mm on bf16 weights and activations
  fp8-rowwise: torch._scaled_grouped_mm, e4m3 with one fp32 scale per activation row and per
               weight output row
Rows are grouped by expert with each group padded to 16 rows (the grouped GEMMs' alignment);
every step is a device op, so a forward is capturable. --check compares both with a float32
loop over tokens at small T. --fp8-rate measures dense torch._scaled_mm throughput.

Usage: python3 bench/torch_peer.py --preset deepseek-v4-flash --tokens 1,8,128 --csv out.csv
"""
import argparse
import csv
import math
import sys
import time

import torch

PRESETS = {  # H, I, E, K, clamp, routed scaling factor (docs/spec.md §10)
    "deepseek-v4-flash": (4096, 2048, 256, 6, 10.0, 1.5),
    "deepseek-v4-pro": (7168, 3072, 384, 6, 10.0, 2.5),
    "tiny": (256, 128, 16, 4, 10.0, 1.0),
}
E2M1 = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0]


def dequantized_mxfp4(rows, k, gen, dev, std):
    """[rows, k] bf16: e2m1 codes times a power-of-two scale per 32 elements."""
    lut = torch.tensor(E2M1, device=dev, dtype=torch.float32)
    codes = torch.randint(0, 16, (rows, k), device=dev, generator=gen)
    # scale so that the block's largest magnitude (6) maps near 3 std
    base = math.floor(math.log2(3.0 * std / 6.0))
    exps = base + torch.randint(-1, 2, (rows, k // 32, 1), device=dev, generator=gen).float()
    return (lut[codes].view(rows, k // 32, 32) * torch.exp2(exps)).view(rows, k).to(torch.bfloat16)


class Weights:
    def __init__(self, H, I, E, dev, seed):
        gen = torch.Generator(device=dev)
        gen.manual_seed(seed)
        self.w13 = torch.empty(E, 2 * I, H, device=dev, dtype=torch.bfloat16)
        self.w2 = torch.empty(E, H, I, device=dev, dtype=torch.bfloat16)
        for e in range(E):
            self.w13[e] = dequantized_mxfp4(2 * I, H, gen, dev, 1.0 / math.sqrt(H))
            self.w2[e] = dequantized_mxfp4(H, I, gen, dev, 1.0 / math.sqrt(I))
        self.w13_t = self.w13.transpose(-2, -1)  # [E, H, 2I], column-major per expert
        self.w2_t = self.w2.transpose(-2, -1)
        self.w13_q, self.w13_s = rowwise_fp8_per_expert(self.w13)
        self.w2_q, self.w2_s = rowwise_fp8_per_expert(self.w2)
        self.w13_qt = self.w13_q.transpose(-2, -1)
        self.w2_qt = self.w2_q.transpose(-2, -1)


def rowwise_fp8(t):
    """e4m3 codes and fp32 scales over the last dimension (one scale per row)."""
    amax = t.float().abs().amax(dim=-1).clamp(min=1e-12)
    scale = amax / 448.0
    q = (t.float() / scale.unsqueeze(-1)).clamp(-448.0, 448.0).to(torch.float8_e4m3fn)
    return q, scale.float()


def rowwise_fp8_per_expert(w):
    """rowwise_fp8 of [E, N, K] one expert at a time (bounded fp32 temporaries)."""
    q = torch.empty(w.shape, device=w.device, dtype=torch.float8_e4m3fn)
    s = torch.empty(w.shape[:2], device=w.device, dtype=torch.float32)
    for e in range(w.shape[0]):
        q[e], s[e] = rowwise_fp8(w[e])
    return q, s


class Routing:
    """Static-shape routing for T tokens: expert-grouped rows, groups padded to 16, holes and
    padding go to rows that no group covers (a trash row at the end)."""

    def __init__(self, ids, weights, E):
        T, K = ids.shape
        dev = ids.device
        n = T * K
        self.rows = n + 16 * E + 1
        trash = self.rows - 1
        key = torch.where(ids.flatten() >= 0, ids.flatten(), torch.full_like(ids.flatten(), E))
        order = torch.argsort(key, stable=True)
        counts = torch.zeros(E + 1, device=dev, dtype=torch.int64).index_add_(
            0, key, torch.ones_like(key))[:E]
        padded = (counts + 15) // 16 * 16
        pad_end = torch.cumsum(padded, 0)
        pad_start = pad_end - padded
        start = torch.cumsum(counts, 0) - counts
        skey = key[order]
        e = skey.clamp(max=E - 1)
        pos = torch.arange(n, device=dev)
        dest_sorted = torch.where(skey < E, pad_start[e] + pos - start[e], torch.full_like(pos, trash))
        self.dest = torch.empty_like(dest_sorted).scatter_(0, order, dest_sorted)  # per slot
        self.valid = (ids.flatten() >= 0)
        self.token = torch.arange(n, device=dev) // K
        self.offs = pad_end.to(torch.int32)
        self.row_weight = torch.zeros(self.rows, device=dev, dtype=torch.float32)
        self.row_weight.index_copy_(0, self.dest, torch.where(self.valid, weights.flatten(), 0.0))
        self.T, self.K = T, K


def swiglu(gu, I, clamp, w):
    gate = gu[:, :I].float().clamp(max=clamp)
    up = gu[:, I:].float().clamp(-clamp, clamp)
    return torch.nn.functional.silu(gate) * up * w.unsqueeze(1)


def combine(o, r, H):
    # holes read a row no group wrote (garbage, maybe NaN): select, don't multiply by 0
    slot = torch.where(r.valid.unsqueeze(1), o.index_select(0, r.dest).float(), 0.0)
    return slot.view(r.T, r.K, H).sum(1).to(torch.bfloat16)


def forward_bf16(x, r, W, H, I, clamp):
    a = torch.zeros(r.rows, H, device=x.device, dtype=torch.bfloat16)
    a.index_copy_(0, r.dest, x.index_select(0, r.token))
    gu = torch._grouped_mm(a, W.w13_t, offs=r.offs)
    h = swiglu(gu, I, clamp, r.row_weight).to(torch.bfloat16)
    o = torch._grouped_mm(h, W.w2_t, offs=r.offs)
    return combine(o, r, H)


def forward_fp8(x, r, W, H, I, clamp):
    a = torch.zeros(r.rows, H, device=x.device, dtype=torch.bfloat16)
    a.index_copy_(0, r.dest, x.index_select(0, r.token))
    aq, asc = rowwise_fp8(a)
    gu = torch._scaled_grouped_mm(aq, W.w13_qt, asc, W.w13_s, offs=r.offs, out_dtype=torch.bfloat16)
    h = swiglu(gu, I, clamp, r.row_weight)
    hq, hsc = rowwise_fp8(h)
    o = torch._scaled_grouped_mm(hq, W.w2_qt, hsc, W.w2_s, offs=r.offs, out_dtype=torch.bfloat16)
    return combine(o, r, H)


def reference(x, ids, weights, W, I, clamp):
    """float32 loop over tokens on the bf16 weights."""
    T, K = ids.shape
    y = torch.zeros(T, x.shape[1], device=x.device, dtype=torch.float32)
    for t in range(T):
        for k in range(K):
            e = int(ids[t, k])
            if e < 0:
                continue
            gu = (x[t].float() @ W.w13[e].float().t()).to(torch.bfloat16).float()
            gate = gu[:I].clamp(max=clamp)
            up = gu[I:].clamp(-clamp, clamp)
            h = torch.nn.functional.silu(gate) * up * weights[t, k]
            y[t] += (h @ W.w2[e].float().t()).to(torch.bfloat16).float()
    return y


def make_inputs(T, H, E, K, scale, dev, seed):
    gen = torch.Generator(device=dev)
    gen.manual_seed(seed)
    x = torch.randn(T, H, device=dev, generator=gen).to(torch.bfloat16)
    ids = torch.argsort(torch.rand(T, E, device=dev, generator=gen), dim=1)[:, :K].contiguous()
    w = torch.rand(T, K, device=dev, generator=gen) + 0.1
    w = w / w.sum(1, keepdim=True) * scale
    return x, ids, w


def time_graph(fn, iters, warmup):
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(warmup):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    g.replay()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    stops = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    for i in range(iters):
        starts[i].record()
        g.replay()
        stops[i].record()
    torch.cuda.synchronize()
    times = sorted(a.elapsed_time(b) * 1e3 for a, b in zip(starts, stops))
    return times[len(times) // 2]


def fp8_rate(dev):
    n = 8192
    a = torch.randn(n, n, device=dev).to(torch.float8_e4m3fn)
    b = torch.randn(n, n, device=dev).to(torch.float8_e4m3fn).t()
    one = torch.ones((), device=dev)
    f = lambda: torch._scaled_mm(a, b, one, one, out_dtype=torch.bfloat16)
    us = time_graph(f, 20, 3)
    return 2.0 * n ** 3 / (us * 1e-6)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", default="deepseek-v4-flash", choices=sorted(PRESETS))
    ap.add_argument("--tokens", default="1,8,32,128,512,2048,8192")
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--csv", default="")
    ap.add_argument("--check", action="store_true", help="compare both peers with a float32 loop at T=8")
    ap.add_argument("--fp8-rate", action="store_true", help="measure dense torch._scaled_mm TFLOP/s")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    dev = torch.device("cuda")
    H, I, E, K, clamp, scale = PRESETS[args.preset]
    print(f"torch_peer: torch {torch.__version__} on {torch.cuda.get_device_name(0)}; preset {args.preset} "
          f"H={H} I={I} E={E} K={K}", flush=True)
    rows = []
    if args.fp8_rate:
        rate = fp8_rate(dev)
        print(f"torch_peer: dense fp8 torch._scaled_mm 8192^3: {rate / 1e12:.0f} TFLOP/s", flush=True)
        rows.append({"preset": "dense-8192", "peer": "fp8-scaled-mm-rate", "tokens": 0,
                     "time_us": "", "tflops": f"{rate / 1e12:.1f}", "rel_err": ""})
    t0 = time.time()
    W = Weights(H, I, E, dev, args.seed)
    torch.cuda.synchronize()
    print(f"torch_peer: weights ready in {time.time() - t0:.1f} s", flush=True)
    peers = {"bf16": forward_bf16, "fp8-rowwise": forward_fp8}
    if args.check:
        x, ids, w = make_inputs(8, H, E, K, scale, dev, args.seed + 99)
        ids[1, 2] = -1
        r = Routing(ids, w, E)
        ref = reference(x, ids, w, W, I, clamp)
        for name, fn in peers.items():
            try:
                y = fn(x, r, W, H, I, clamp).float()
                err = ((y - ref).norm() / ref.norm()).item()
                print(f"torch_peer: check {name}: rel_err vs float32 loop = {err:.3e}", flush=True)
            except Exception as exc:  # report and keep going: the other peer may still run
                print(f"torch_peer: check {name} failed: {exc}", flush=True)
    for T in [int(t) for t in args.tokens.split(",") if t]:
        x, ids, w = make_inputs(T, H, E, K, scale, dev, args.seed + T)
        flops = 2.0 * T * K * (2 * I * H + H * I)
        for name, fn in peers.items():
            try:
                # routing is part of the timed forward, as in moe_ep
                us = time_graph(lambda: fn(x, Routing(ids, w, E), W, H, I, clamp), args.iters, args.warmup)
                print(f"torch_peer: T={T:<6} {name:<12} {us:10.1f} us  {flops / us * 1e-6:8.2f} TFLOP/s", flush=True)
                rows.append({"preset": args.preset, "peer": name, "tokens": T, "time_us": f"{us:.2f}",
                             "tflops": f"{flops / us * 1e-6:.3f}", "rel_err": ""})
            except Exception as exc:
                print(f"torch_peer: T={T} {name} failed: {exc}", flush=True)
    if args.csv:
        with open(args.csv, "w", newline="") as f:
            wr = csv.DictWriter(f, fieldnames=["preset", "peer", "tokens", "time_us", "tflops", "rel_err"])
            wr.writeheader()
            wr.writerows(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
