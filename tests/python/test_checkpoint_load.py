"""moe_ep.load_layer on the checkpoints of gen_checkpoints.py (written here into a temporary
directory): a ready layer with its shared expert and router, checked against the independent
oracle (reference_layer.py) and an independent router; the shared experts' dequantization checked
bit for bit against ml_dtypes; refusals that name their reason."""

import json
import os
import struct
import subprocess
import sys

import ml_dtypes
import numpy as np
import pytest

import moe_ep
import reference_layer as ref

HERE = os.path.dirname(__file__)
LIMITS = {"mxfp4": (1e-3, 0.97), "nvfp4": (3e-2, 0.90)}
F32 = np.float32


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    out = tmp_path_factory.mktemp("checkpoints") / "data"
    subprocess.run([sys.executable, os.path.join(HERE, "gen_checkpoints.py"), str(out)], check=True)
    return out


@pytest.fixture(scope="module")
def runtime():
    return moe_ep.Runtime.acquire(device="cpu")


# ---- raw safetensors reading (the file format, not the library) ------------------------------

ML_DTYPES = {"U8": np.uint8, "I8": np.int8, "I32": np.int32, "I64": np.int64, "F32": np.float32,
             "BF16": ml_dtypes.bfloat16, "F8_E4M3": ml_dtypes.float8_e4m3fn,
             "F8_E8M0": ml_dtypes.float8_e8m0fnu}


def raw_tensor(directory, name):
    """Tensor `name` of a checkpoint directory as a numpy array of its ml_dtypes type."""
    index = os.path.join(directory, "model.safetensors.index.json")
    file = "model.safetensors"
    if os.path.exists(index):
        with open(index) as f:
            file = json.load(f)["weight_map"][name]
    with open(os.path.join(directory, file), "rb") as f:
        blob = f.read()
    n = struct.unpack("<Q", blob[:8])[0]
    entry = json.loads(blob[8:8 + n])[name]
    b, e = entry["data_offsets"]
    return np.frombuffer(blob[8 + n + b:8 + n + e], ML_DTYPES[entry["dtype"]]).reshape(entry["shape"])


def e2m1_values(packed):
    """Packed e2m1 (low nibble = even element) as ml_dtypes float4_e2m1fn, widened to float32."""
    nibbles = np.empty(packed.shape[:-1] + (packed.shape[-1] * 2,), np.uint8)
    nibbles[..., 0::2] = packed.view(np.uint8) & 0xF
    nibbles[..., 1::2] = packed.view(np.uint8) >> 4
    return nibbles.view(ml_dtypes.float4_e2m1fn).astype(F32)


def per_block(scales, rows, k, bn, bk):
    return np.repeat(np.repeat(scales, bn, axis=0), bk, axis=1)[:rows, :k]


# ---- the tests --------------------------------------------------------------------------------

def oracle_weights(info, recipe):
    if info["format"] == "mxfp4":
        return ref.weights_from_mxfp4(info["w13"], info["w13_scale"], info["w2"], info["w2_scale"])
    if info["format"] == "nvfp4":
        return ref.weights_from_nvfp4(info["w13"], info["w13_scale"], info["w13_global"], info["w2"],
                                      info["w2_scale"], info["w2_global"])
    assert recipe == "mxfp4"  # bf16 experts: the layer quantizes them by docs/spec.md §5.1
    w13 = ref.mxfp4_quantize(ref.bf16_from_bits(info["w13"]))
    w2 = ref.mxfp4_quantize(ref.bf16_from_bits(info["w2"]))
    return ref.weights_from_mxfp4(*w13, *w2)


@pytest.mark.parametrize("name,layer,recipe", [
    ("deepseek_v4_native", 0, None), ("deepseek_v4_native", 1, None),
    ("transformers_deepseek_v4", 0, "mxfp4"), ("transformers_deepseek_v4", 1, "mxfp4"),
    ("transformers_deepseek_v4", 1, "nvfp4")])
def test_load_layer_routes_with_its_router_and_matches_the_oracle(data, runtime, name, layer, recipe):
    path = str(data / "ckpt" / name)
    lay = moe_ep.load_layer(runtime, path, layer, max_tokens_per_rank=64, recipe=recipe)
    info = moe_ep._core._load_checkpoint_layer(path, layer)
    assert isinstance(lay, moe_ep.Layer)
    assert lay.checkpoint["layout"] == ("deepseek-v4" if name.startswith("deepseek") else "transformers")
    d = lay.info()
    assert d["activation_clamp"] == 10.0 and d["top_k"] == 2
    assert "shared_intermediate_size=96" in d["desc"]
    assert lay.router.is_hash_layer == (layer == 0)
    rng = np.random.default_rng(layer + 7)
    x = rng.standard_normal((19, d["hidden_size"])).astype(ml_dtypes.bfloat16)
    tokens = rng.integers(0, 64, 19).astype(np.int64)
    ids, w = lay.router.route(x, token_ids=tokens)
    y = lay.route_and_forward(x, token_ids=tokens)
    np.testing.assert_array_equal(y.view(np.uint16), lay.forward(x, ids, w).view(np.uint16))
    if recipe == "nvfp4":
        return  # the oracle has no bf16 -> nvfp4 weight quantizer; the C++ suite checks it bitwise
    routed = ref.layer_forward(d["recipe"], oracle_weights(info, d["recipe"]), x.view(np.uint16), ids, w, 10.0)
    want = ref.shared_expert_add(routed, x.view(np.uint16), info["shared_w13"], info["shared_w2"], 10.0)
    got = np.asarray(y, np.float64)
    err = ref.relative_error(got, want)
    limit, min_match = LIMITS[d["recipe"]]
    assert err <= limit and np.mean(got == want) >= min_match, f"rel_err {err:.3e}"


@pytest.mark.parametrize("name,layer", [("deepseek_v4_native", 0), ("deepseek_v4_native", 1),
                                        ("transformers_deepseek_v4", 0), ("transformers_deepseek_v4", 1)])
def test_router_is_deepseek_v4s(data, runtime, name, layer):
    """ids by sqrt(softplus(logits)) + bias (or the table's row), weights renormalized times the
    routed_scaling_factor, by float64 numpy on the same logits."""
    lay = moe_ep.load_layer(runtime, str(data / "ckpt" / name), layer, max_tokens_per_rank=64)
    r = lay.router
    rng = np.random.default_rng(3)
    x = rng.standard_normal((40, r.weight.shape[1])).astype(ml_dtypes.bfloat16)
    tokens = rng.integers(0, 64, 40)
    logits = r.logits(x)
    np.testing.assert_allclose(logits, x.astype(np.float64) @ r.weight.T.astype(np.float64), rtol=1e-5, atol=1e-5)
    ids, w = r.route(logits=logits, token_ids=tokens)
    v = logits.astype(np.float64)
    s = np.sqrt(np.maximum(v, 0) + np.log1p(np.exp(-np.abs(v))))
    if r.is_hash_layer:
        want = r.hash_table[tokens]
    else:
        want = np.argsort(-(s + r.bias), axis=1, kind="stable")[:, :r.top_k]
    np.testing.assert_array_equal(ids, want)
    chosen = np.take_along_axis(s, want, axis=1)
    np.testing.assert_allclose(w, chosen / chosen.sum(axis=1, keepdims=True) * 1.5, rtol=1e-5)
    if r.is_hash_layer:
        with pytest.raises(ValueError, match="pass token_ids"):
            r.route(x)


def test_shared_experts_dequantize_as_ml_dtypes_does(data):
    """Each stored form, dequantized by ml_dtypes in float32 and rounded to bf16 once:
    FP8 x E8M0 block scale (DeepSeek V4), FP8 x fp32 block scale_inv (DeepSeek V3), and NVFP4
    bf16(fp32(e2m1 * e4m3) * weight_scale_2) (ModelOpt)."""
    cases = [("deepseek_v4_native", 1, "layers.1.ffn.shared_experts.", ("w1", "w3", "w2"), "fp8"),
             ("mxfp4_per_expert", 1, "model.layers.1.mlp.shared_experts.", ("gate_proj", "up_proj", "down_proj"), "fp8"),
             ("nvfp4_shared_nvfp4", 1, "model.layers.1.mlp.shared_experts.", ("gate_proj", "up_proj", "down_proj"), "nvfp4")]
    for name, layer, prefix, proj, kind in cases:
        d = str(data / "ckpt" / name)
        info = moe_ep._core._load_checkpoint_layer(d, layer)
        want = []
        for p in proj:
            w = raw_tensor(d, prefix + p + ".weight")
            if kind == "fp8":
                scale_name = prefix + p + (".scale" if name.startswith("deepseek") else ".weight_scale_inv")
                s = raw_tensor(d, scale_name).astype(F32)
                v = w.astype(F32) * per_block(s, *w.shape, 64, 32)
            else:
                blocks = raw_tensor(d, prefix + p + ".weight_scale").astype(F32)
                ws2 = raw_tensor(d, prefix + p + ".weight_scale_2").astype(F32)
                v = (e2m1_values(w) * np.repeat(blocks, 16, axis=1)) * ws2
            want.append(v.astype(ml_dtypes.bfloat16).view(np.uint16))
        np.testing.assert_array_equal(info["shared_w13"], np.concatenate(want[:2]), err_msg=name)
        np.testing.assert_array_equal(info["shared_w2"], want[2], err_msg=name)


def test_expert_bytes_and_globals_are_the_files(data):
    """DeepSeek V4's I8 experts are the packed bytes as stored; compressed-tensors' weight_global_scale
    g becomes weight_scale_2 = fp32(1 / g)."""
    d = str(data / "ckpt" / "deepseek_v4_native")
    info = moe_ep._core._load_checkpoint_layer(d, 1, first_expert=5, num_experts=2)
    assert info["w13"].shape == (2, 256, 64) and not info["w13"].flags.writeable
    np.testing.assert_array_equal(info["w13"][1, :128], raw_tensor(d, "layers.1.ffn.experts.6.w1.weight").view(np.uint8))
    np.testing.assert_array_equal(info["w2_scale"][0], raw_tensor(d, "layers.1.ffn.experts.5.w2.scale").view(np.uint8))
    c = str(data / "ckpt" / "compressed_tensors_nvfp4")
    ct = moe_ep._core._load_checkpoint_layer(c, 1)
    g = raw_tensor(c, "model.layers.1.mlp.experts.3.up_proj.weight_global_scale")[0]
    assert ct["w13_global"][3, 1] == F32(1) / g


def test_refusals_name_their_reason(data, runtime):
    with pytest.raises(moe_ep.UnsupportedError, match=r"gpt-oss.*sigmoid\(1\.702 \* gate\).*gate_up_proj_bias"):
        moe_ep.load_layer(runtime, str(data / "refused" / "gpt_oss"))
    no_moe = str(data / "ckpt" / "pattern_no_config")
    with pytest.raises(ValueError, match="no MoE layer found"):
        moe_ep.load_layer(runtime, no_moe)
    lay = moe_ep.load_layer(runtime, no_moe, tensor_pattern="model.layers.{L}.block_sparse_moe.experts.{e}.{proj}.weight",
                            proj_names=("w1", "w3", "w2"), top_k=2)
    assert lay.checkpoint["layer"] == 1
    with pytest.raises(moe_ep.UnsupportedError, match="no router weight"):
        lay.router.route(np.zeros((1, 128), ml_dtypes.bfloat16))
    bad = str(data / "bad" / "fp8_shared_block_size_number")
    with pytest.raises(ValueError, match="weight_block_size.*--no-shared-expert"):
        moe_ep.load_layer(runtime, bad)
    lay = moe_ep.load_layer(runtime, bad, shared_expert=False)
    assert "shared_intermediate_size=0" in lay.info()["desc"]
    assert any("left out" in n for n in lay.checkpoint["notes"])
    assert lay.checkpoint["config"]["ignored_keys"][0]["key"] == "quantization_config.weight_block_size"
    with pytest.raises(moe_ep.UnsupportedError, match="scoring_func"):
        moe_ep.load_layer(runtime, str(data / "ckpt" / "qwen3_moe_nvfp4")).router.route(
            np.zeros((1, 128), ml_dtypes.bfloat16))
    names = [layout["name"] for layout in moe_ep.known_checkpoint_layouts()]
    assert names == ["per-expert", "deepseek-v4", "deepseek-v4-hf", "compressed-tensors", "fused", "transformers", "gpt-oss"]
