"""moe_ep.Runtime.from_process_group: the runtime joins an existing torch.distributed NCCL
group. World size 1 on one GPU: the group's runtime gives, bit for bit, the world-size-1 layer
of Runtime.acquire. World size 2+ (one process per GPU, a TCP store on localhost): each rank's
output equals the single-rank CPU layer on that rank's tokens, bit for bit (exact_accumulation:
docs/spec.md §3's fp32 k32 sums). Each case runs in child processes, so the group and the runtime
world live and die with them. Skipped, with the reason, where there is no torch, no NCCL build,
or too few GPUs."""

import os
import pathlib
import socket
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (pip install 'moe_ep[torch]')")

import moe_ep  # noqa: E402  (after torch: both use torch's libnccl.so.2)

HERE = pathlib.Path(__file__).parent
BUILD = moe_ep.info()


def _skip_reason(ranks):
    if not torch.cuda.is_available():
        return "no CUDA device"
    if not BUILD["cuda"] or not BUILD["nccl"]:
        return "this moe_ep build has no CUDA backend with the NCCL path"
    import torch.distributed as dist
    if not dist.is_available() or not dist.is_nccl_available():
        return f"torch {torch.__version__} has no NCCL process groups"
    if torch.cuda.device_count() < ranks:
        return f"needs {ranks} GPUs, this machine has {torch.cuda.device_count()}"
    return ""


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


WORKER = r'''
import gc, os, sys
import numpy as np
import torch, torch.distributed as dist
import moe_ep, problems
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
torch.cuda.set_device(rank)
p = problems.make_problem("mxfp4", "mxfp4", 21)
T = 6
x, ids, w = problems.random_inputs(p, T, 300 + rank)  # each rank its own tokens

def layer(rt, experts):
    t = {k: torch.from_numpy(np.ascontiguousarray(v[experts]).view(np.uint8)) for k, v in p.tensors.items()}
    return moe_ep.Layer(rt, num_experts=p.E, hidden_size=p.H, intermediate_size=p.I, top_k=p.K,
                        max_tokens_per_rank=16, activation_clamp=problems.CLAMP, exact_accumulation=True,
                        weights=moe_ep.WeightPack.mxfp4(**t))

tx = torch.from_numpy(x.view(np.int16)).view(torch.bfloat16)
tids, tw = torch.from_numpy(ids), torch.from_numpy(w)
# the reference: world size 1 with every expert (CPU, or with MODE=gpu1 the GPU's own
# world-size-1 layer), released before the group's runtime is acquired (one world at a time)
if os.environ["MODE"] == "gpu1":
    ref_layer = layer(moe_ep.Runtime.acquire(device=f"cuda:{rank}"), slice(None))
    want = ref_layer.forward(tx.cuda(), tids.cuda(), tw.cuda()).cpu()
else:
    ref_layer = layer(moe_ep.Runtime.acquire(device="cpu"), slice(None))
    want = ref_layer.forward(tx, tids, tw)
torch.cuda.synchronize()
del ref_layer
gc.collect()
dist.init_process_group("nccl", rank=rank, world_size=world, device_id=torch.device("cuda", rank))
rt = moe_ep.Runtime.from_process_group(dist.group.WORLD, device=f"cuda:{rank}")
assert (rt.world_size, rt.rank, rt.device) == (world, rank, f"cuda:{rank}"), repr(rt)
e_loc = p.E // world
mine = layer(rt, slice(rank * e_loc, (rank + 1) * e_loc))
got = mine.forward(tx.cuda(), tids.cuda(), tw.cuda())
torch.cuda.synchronize()
mine.check_error_flags()
same = torch.equal(got.cpu().view(torch.int16), want.view(torch.int16))
print(f"rank {rank}/{world}: bitwise equal {same}", flush=True)
del mine, rt
gc.collect()
dist.destroy_process_group()
sys.exit(0 if same else 1)
'''


def _run(ranks, mode):
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()),
               WORLD_SIZE=str(ranks), MODE=mode,
               PYTHONPATH=os.pathsep.join([str(HERE)] + [p for p in sys.path if p]))
    procs = [subprocess.Popen([sys.executable, "-c", WORKER], env=dict(env, RANK=str(r)),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for r in range(ranks)]
    outs = []
    for pr in procs:
        try:
            outs.append(pr.communicate(timeout=300)[0])
        except subprocess.TimeoutExpired:
            pr.kill()
            outs.append(pr.communicate()[0] + "\n(timed out)")
    text = "\n".join(outs)
    print(text)
    assert all(pr.returncode == 0 for pr in procs), text
    assert text.count("bitwise equal True") == ranks, text


def test_world_size_1_process_group_matches_the_world_size_1_layer():
    reason = _skip_reason(1)
    if reason:
        pytest.skip(reason)
    _run(1, "gpu1")


@pytest.mark.parametrize("ranks", [2, 4, 8])
def test_multi_rank_process_group_matches_the_single_rank_layer(ranks):
    reason = _skip_reason(ranks)
    if reason:
        pytest.skip(reason)
    _run(ranks, "cpu")


def test_from_process_group_refuses_without_an_initialized_group():
    import torch.distributed as dist
    if dist.is_available() and dist.is_initialized():
        pytest.skip("a process group is already initialized in this process")
    with pytest.raises(RuntimeError, match="init_process_group"):
        moe_ep.Runtime.from_process_group(device="cuda:0")
