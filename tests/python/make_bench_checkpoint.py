#!/usr/bin/env python3
"""A model-sized MXFP4 checkpoint for measuring load throughput (`moe_ep inspect`, `moe_ep run
--checkpoint`): random e2m1 bytes and UE8M0 scales in [118, 126], in the per-expert (DeepSeek)
or fused layout, with a config.json. Not test data: the values mean nothing.

  python3 tests/python/make_bench_checkpoint.py OUT_DIR --preset deepseek-v4-flash --layout per-expert
"""

import argparse
import json
import os
import sys

try:
    import numpy as np
    import safetensors
    from safetensors import serialize_file
except ImportError as err:
    sys.exit(f"make_bench_checkpoint.py: {err}; install with "
             f"`python3 -m pip install -r tests/python/requirements.txt`")

PRESETS = {"deepseek-v4-flash": (4096, 2048, 256, 6), "deepseek-v4-pro": (7168, 3072, 384, 6),
           "tiny": (256, 128, 16, 4)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out_dir")
    ap.add_argument("--preset", default="deepseek-v4-flash", choices=sorted(PRESETS))
    ap.add_argument("--layout", default="per-expert", choices=["per-expert", "fused"])
    ap.add_argument("--experts", type=int, default=0, help="E (default: the preset's)")
    ap.add_argument("--layers", type=int, default=1, help="MoE layers (1, 2, ...)")
    a = ap.parse_args()
    H, I, E, K = PRESETS[a.preset]
    E = a.experts or E
    os.makedirs(a.out_dir, exist_ok=True)
    rng = np.random.default_rng(1)
    arrays, specs = [], {}

    def add(name, dtype, array):
        arrays.append(array)
        specs[name] = safetensors.TensorSpec(dtype=dtype, shape=tuple(array.shape),
                                             data_ptr=array.ctypes.data, data_len=array.nbytes)

    def weights(*shape):
        return rng.integers(0, 256, shape, dtype=np.uint8)

    def scales(*shape):
        return rng.integers(118, 127, shape, dtype=np.uint8)

    for L in range(1, a.layers + 1):
        p = f"model.layers.{L}.mlp.experts."
        if a.layout == "fused":
            add(p + "w13_weight", "uint8", weights(E, 2 * I, H // 2))
            add(p + "w13_weight_scale", "float8_e8m0fnu", scales(E, 2 * I, H // 32))
            add(p + "w2_weight", "uint8", weights(E, H, I // 2))
            add(p + "w2_weight_scale", "float8_e8m0fnu", scales(E, H, I // 32))
        else:
            for e in range(E):
                for proj, (n, k) in (("gate_proj", (I, H)), ("up_proj", (I, H)), ("down_proj", (H, I))):
                    add(f"{p}{e}.{proj}.weight", "uint8", weights(n, k // 2))
                    add(f"{p}{e}.{proj}.weight_scale", "float8_e8m0fnu", scales(n, k // 32))
    serialize_file(specs, os.path.join(a.out_dir, "model.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(a.out_dir, "config.json"), "w") as f:
        json.dump({"hidden_size": H, "moe_intermediate_size": I, "n_routed_experts": E,
                   "num_experts_per_tok": K, "num_hidden_layers": a.layers + 1,
                   "first_k_dense_replace": 1, "quantization_config": {"quant_method": "mxfp4"}}, f)


if __name__ == "__main__":
    main()
