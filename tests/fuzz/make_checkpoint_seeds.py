#!/usr/bin/env python3
"""Seeds of the checkpoint-reader fuzz target (fuzz_checkpoint_reader.cpp): small valid
safetensors files and checkpoint directories (per-expert and fused MXFP4, NVFP4, sharded with an
index), written with the standard library alone.

  python3 tests/fuzz/make_checkpoint_seeds.py tests/fuzz/corpus/checkpoint_reader
"""
import json
import os
import random
import struct
import sys

SEP = b"\n##\n"


def safetensors(tensors, metadata=None):
    """tensors: list of (name, dtype, shape, bytes) -> file bytes."""
    header, offset, data = {}, 0, b""
    for name, dtype, shape, raw in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(raw)]}
        offset += len(raw)
        data += raw
    if metadata:
        header["__metadata__"] = metadata
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + data


def rand_bytes(rng, n, lo=0, hi=255):
    return bytes(rng.randint(lo, hi) for _ in range(n))


def config(H, I, E, K, quant=None):
    c = {"model_type": "deepseek_v4", "hidden_size": H, "moe_intermediate_size": I, "n_routed_experts": E,
         "num_experts_per_tok": K, "num_hidden_layers": 1, "first_k_dense_replace": 0,
         "routed_scaling_factor": 1.5}
    if quant:
        c["quantization_config"] = quant
    return json.dumps(c).encode()


def per_expert(rng, H, I, E, nvfp4=False):
    out = []
    block = 16 if nvfp4 else 32
    for e in range(E):
        for proj, (n, k) in (("gate_proj", (I, H)), ("up_proj", (I, H)), ("down_proj", (H, I))):
            base = f"model.layers.0.mlp.experts.{e}.{proj}"
            out.append((base + ".weight", "U8", [n, k // 2], rand_bytes(rng, n * k // 2)))
            if nvfp4:
                out.append((base + ".weight_scale", "F8_E4M3", [n, k // block], rand_bytes(rng, n * k // block, 0x30, 0x40)))
                out.append((base + ".weight_scale_2", "F32", [], struct.pack("<f", 0.5)))
            else:
                out.append((base + ".weight_scale", "U8", [n, k // block], rand_bytes(rng, n * k // block, 118, 126)))
    return out


def fused(rng, H, I, E):
    return [("model.layers.0.mlp.experts.w13_weight", "U8", [E, 2 * I, H // 2], rand_bytes(rng, E * 2 * I * H // 2)),
            ("model.layers.0.mlp.experts.w13_weight_scale", "U8", [E, 2 * I, H // 32], rand_bytes(rng, E * 2 * I * H // 32, 118, 126)),
            ("model.layers.0.mlp.experts.w2_weight", "U8", [E, H, I // 2], rand_bytes(rng, E * H * I // 2)),
            ("model.layers.0.mlp.experts.w2_weight_scale", "U8", [E, H, I // 32], rand_bytes(rng, E * H * I // 32, 118, 126))]


def main():
    out_dir = sys.argv[1]
    os.makedirs(out_dir, exist_ok=True)
    rng = random.Random(16)
    H, I, E = 64, 32, 2
    seeds = {
        "file_small": b"\0" + safetensors([("a", "F32", [2, 3], rand_bytes(rng, 24)), ("b", "BF16", [4], rand_bytes(rng, 8)),
                                            ("c", "U8", [], b"\7")], {"format": "pt"}),
        "file_f4_e8m0": b"\0" + safetensors([("w", "F4", [4, 8], rand_bytes(rng, 16)), ("s", "F8_E8M0", [4, 1], b"\x7f" * 4)]),
        "dir_per_expert_mxfp4": b"\1" + config(H, I, E, 1) + SEP + SEP + safetensors(per_expert(rng, H, I, E)),
        "dir_per_expert_nvfp4": b"\1" + config(H, I, E, 1, {"quant_method": "modelopt", "quant_algo": "NVFP4"}) + SEP + SEP +
                                safetensors(per_expert(rng, H, I, E, nvfp4=True)),
        "dir_fused_mxfp4": b"\1" + config(H, I, E, 1) + SEP + SEP + safetensors(fused(rng, H, I, E)),
    }
    tensors = per_expert(rng, H, I, E)
    index = {"metadata": {"total_size": sum(len(t[3]) for t in tensors)},
             "weight_map": {t[0]: "model-00001.safetensors" for t in tensors}}
    seeds["dir_indexed"] = b"\1" + config(H, I, E, 1) + SEP + json.dumps(index).encode() + SEP + safetensors(tensors)
    # Refused inputs that stress the reader's bounds (its error messages must not recurse; its scan
    # must stay linear): nesting 30,000 deep (16,000 in config.json, beside a shard), within the 64 KB inputs of scripts/fuzz.sh, in a
    # tensor entry, a shape, __metadata__ and config.json; and 900 tiny tensors in one file.
    deep = b"[" * 30000 + b"]" * 30000

    def raw_header(text):
        return struct.pack("<Q", len(text)) + text

    seeds["file_deep_entry"] = b"\0" + raw_header(b'{"a":' + deep + b"}")
    seeds["file_deep_shape"] = b"\0" + raw_header(b'{"a":{"dtype":"F32","shape":' + deep + b',"data_offsets":[0,0]}}')
    seeds["file_deep_metadata"] = b"\0" + raw_header(b'{"__metadata__":{"k":' + deep + b"}}")
    seeds["dir_deep_config"] = b"\1" + b'{"hidden_size":' + deep[14000:-14000] + b"}" + SEP + SEP + safetensors(per_expert(rng, H, I, E))
    seeds["file_many_tensors"] = b"\0" + safetensors([(f"t{i}", "U8", [1], bytes([i % 256])) for i in range(900)])
    for name, data in seeds.items():
        with open(os.path.join(out_dir, name), "wb") as f:
            f.write(data)
        print(f"{name}: {len(data)} bytes")


if __name__ == "__main__":
    main()
