#!/usr/bin/env python3
"""A model file an engine author can copy: a 4-layer model of tiny MoE blocks (H=256, I=128,
E=16, K=4, clamp 10), written the way an inference engine's model file is, and seeded: the
same command prints the same numbers on every run of a machine.

Each MoE block
- checks its config against the backend before loading anything (``validate_config``),
- owns fused-expert parameters (``w13_weight`` / ``w13_weight_scale`` / ``w2_weight`` /
  ``w2_weight_scale``: vLLM's MXFP4 layout) and a dense bf16 shared expert (``gate_up_proj`` /
  ``down_proj``, as DeepSeek-style blocks hold it),
- turns them into one moe_ep layer after "checkpoint loading" (``process_weights_after_loading``;
  the shared expert runs inside the layer, added in its combine), with the per-model knobs in
  one ``MegaConfig`` and one runtime (one workspace) for every block,
- registers the layer under its module prefix, as vLLM's custom ops find a layer by
  ``layer_name``, and calls ``torch.ops.moe_ep.forward_named_out`` into the output buffer.

When ``torch.distributed`` is initialized with NCCL, the runtime is the process group's
(``SharedRuntime.from_process_group``): the engine's EP group is moe_ep's world. The model runs
eagerly and, on a GPU, under a CUDA graph; both must agree bit for bit.

    python examples/vllm_style_moe.py [--device cuda:0|cpu] [--tokens 8] [--seed 0]
"""

import argparse

import torch

import moe_ep
import moe_ep.torch_ops  # registers torch.ops.moe_ep.*
from moe_ep.integrations import (MegaConfig, SharedRuntime, is_supported, pack_fused_expert_weights,
                                 shared_expert_weights, validate_config)

H, I, E, K, CLAMP = 256, 128, 16, 4, 10.0
IS = 128  # the shared expert's intermediate size
MEGA = MegaConfig(intermediate_size=I, top_k=K, activation_clamp=CLAMP, routed_scaling_factor=1.0)


def shared_runtime(device: str) -> SharedRuntime:
    """The process group's runtime when the engine runs distributed, else this device's."""
    dist = torch.distributed
    if dist.is_available() and dist.is_initialized() and dist.get_backend() == "nccl":
        return SharedRuntime.from_process_group(dist.group.WORLD, device=device)
    return SharedRuntime.acquire(device=device)


class SharedMlp(torch.nn.Module):
    """The dense shared expert of a block (bf16): gate_up_proj [2Is, H], down_proj [H, Is]."""

    def __init__(self, device: str, generator: torch.Generator) -> None:
        super().__init__()
        self.gate_up_proj = torch.nn.Linear(H, 2 * IS, bias=False, dtype=torch.bfloat16)
        self.down_proj = torch.nn.Linear(IS, H, bias=False, dtype=torch.bfloat16)
        with torch.no_grad():
            self.gate_up_proj.weight.copy_(torch.randn(2 * IS, H, generator=generator) * 2 / H ** 0.5)
            self.down_proj.weight.copy_(torch.randn(H, IS, generator=generator) * 0.1 / IS ** 0.5)
        self.to(device)


class MoeBlock(torch.nn.Module):
    def __init__(self, prefix: str, device: str, max_tokens: int, seed: int) -> None:
        super().__init__()
        cap = torch.cuda.get_device_capability(device) if device.startswith("cuda") else None
        validate_config(MEGA.recipe, num_experts=E, hidden_size=H, intermediate_size=I, top_k=K,
                        weight_format="mxfp4", device_capability=cap)
        g = torch.Generator().manual_seed(seed)
        u8 = dict(dtype=torch.uint8, generator=g)
        # what the checkpoint loader fills in (random MXFP4 bytes here)
        self.w13_weight = torch.nn.Parameter(torch.randint(0, 256, (E, 2 * I, H // 2), **u8), requires_grad=False)
        self.w13_weight_scale = torch.nn.Parameter(torch.randint(119, 123, (E, 2 * I, H // 32), **u8), requires_grad=False)
        self.w2_weight = torch.nn.Parameter(torch.randint(0, 256, (E, H, I // 2), **u8), requires_grad=False)
        self.w2_weight_scale = torch.nn.Parameter(torch.randint(119, 123, (E, H, I // 32), **u8), requires_grad=False)
        self.gate = torch.nn.Linear(H, E, bias=False, dtype=torch.bfloat16)
        with torch.no_grad():
            self.gate.weight.copy_(torch.randn(E, H, generator=g) / H ** 0.5)
        self.gate.to(device)
        self.shared_experts = SharedMlp(device, g)
        self.prefix, self.device, self.max_tokens = prefix, device, max_tokens

    def process_weights_after_loading(self) -> None:
        self.shared = shared_runtime(self.device)
        shared_w13, shared_w2 = shared_expert_weights(self.shared_experts)
        self.layer = moe_ep.Layer(self.shared.runtime, weights=pack_fused_expert_weights(self),
                                  shared_w13=shared_w13, shared_w2=shared_w2,
                                  **MEGA.layer_kwargs(num_experts=E, hidden_size=H,
                                                      max_tokens_per_rank=self.max_tokens))
        moe_ep.torch_ops.register(self.layer, name=self.prefix)
        for name in ("w13_weight", "w13_weight_scale", "w2_weight", "w2_weight_scale", "shared_experts"):
            delattr(self, name)  # the layer holds its own converted copy

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        logits = self.gate(x).float()
        w, ids = torch.topk(torch.softmax(logits, dim=-1), K, dim=-1)
        y = torch.empty_like(x)
        torch.ops.moe_ep.forward_named_out(x, ids.to(torch.int32), w, self.prefix, y)
        return x + y


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda:0" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--tokens", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    torch.manual_seed(args.seed)
    dev = torch.device(args.device)
    cap = torch.cuda.get_device_capability(dev) if dev.type == "cuda" else None
    print(f"moe_ep {moe_ep.__version__}: mxfp4 supported on {args.device}: {is_supported(cap, 'mxfp4')}")
    model = torch.nn.Sequential(*[MoeBlock(f"model.layers.{i}.mlp.experts", args.device, 64,
                                           seed=args.seed * 100 + 10 + i) for i in range(4)])
    for block in model:
        block.process_weights_after_loading()
    shared = model[0].shared
    assert all(b.shared is shared for b in model) and shared.count == 4
    x = torch.randn(args.tokens, H, generator=torch.Generator().manual_seed(args.seed)).to(torch.bfloat16).to(dev)
    with torch.no_grad():
        eager = model(x)
        checksum = int(eager.view(torch.int16).to(torch.int64).sum().item())
        print(f"eager: y[{args.tokens}, {H}] mean |y| = {eager.float().abs().mean().item():.6f}, "
              f"bit checksum {checksum}")
        if dev.type == "cuda":
            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                model(x)
            torch.cuda.current_stream().wait_stream(s)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                static_y = model(x)
            graph.replay()
            torch.cuda.synchronize()
            same = torch.equal(static_y.view(torch.int16), eager.view(torch.int16))
            print(f"CUDA graph replay equals eager bitwise: {same}")
            if not same:
                return 1
    print(f"runtime shared by {shared.count} layers: {shared.runtime}")
    print(f"symmetric workspace reserved: {shared.workspace_bytes} bytes (one for all layers; a "
          f"world-size-1 CUDA layer keeps its own scratch)")
    print(f"workspace of this model at EP=8 (host layout): "
          f"{moe_ep.workspace_bytes(8, E, 64, H, I, K)} bytes, shared by all 4 layers")
    for block in model:
        moe_ep.torch_ops.unregister(block.prefix)
        block.shared.release()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
