"""moe_ep.integrations.transformers: a tiny random DeepSeek V4 (transformers' own model class:
2 hash-routed + 2 top-k-routed MoE layers) with its routed experts run through moe_ep.

Three references, from strict to loose (float64 relative error ||out - ref||_2 / ||ref||_2):

- the recipe itself (tests/python/reference_layer.py, the numpy oracle of docs/spec.md), fed
  with the very inputs each experts module got in the moe_ep run: the integration's plumbing
  (weight layout, clamp, ids, weights, dtypes) must leave only the layer's own error, held to
  the thresholds of docs/spec.md §3.2;
- the same model run eagerly with transformers' own experts (grouped_mm, its default) holding
  the expert weights the layer holds (the library's quantizer, undone): what remains is the
  recipe's activation quantization (FP8 for mxfp4, FP4 for nvfp4), carried through the network;
- the same model with its original bf16 weights: the whole cost of the recipe, reported,
  loosely bounded.

Greedy decoding with generate() and the next-token argmax are compared token by token. The measured
figures are printed (pytest -s) and recorded in TESTING.md.
"""

import copy
import gc
import inspect
import os
import re
import subprocess

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (pip install torch)")
transformers = pytest.importorskip("transformers",
                                   reason="transformers is not installed (pip install 'transformers>=5')")
try:
    from transformers import DeepseekV4Config, DeepseekV4ForCausalLM  # noqa: F401
    from transformers.integrations.moe import ExpertsInterface
except ImportError as e:  # an older transformers
    pytest.skip(f"transformers {transformers.__version__} has no DeepSeek V4 or ExpertsInterface ({e}); "
                f"needs transformers >= 5", allow_module_level=True)

import moe_ep  # noqa: E402
import moe_ep.integrations.transformers as mt  # noqa: E402
import reference_layer as ref  # noqa: E402

HAS_CUDA = torch.cuda.is_available() and moe_ep.info()["cuda"] and \
    torch.cuda.get_device_capability() == (9, 0)
IMPLEMENTATION = {"mxfp4": "moe_ep", "nvfp4": "moe_ep_nvfp4"}
# docs/spec.md §3.2: a layer against the CPU layer (the oracle's arithmetic).
LAYER_TOLERANCE = {"mxfp4": 6e-3, "nvfp4": 3e-2}
# The model's logits against the same model with transformers' own experts holding the same
# (dequantized) weights: the recipe's activation quantization carried through four layers of a
# random network (TESTING.md has the measured figures), with room for the GPU's summation order.
LOGITS_TOLERANCE = {"mxfp4": 8e-2, "nvfp4": 1.6e-1}
# Against the original bf16 weights: the weights' FP4 quantization added.
LOGITS_TOLERANCE_BF16 = 2.5e-1
# Tokens equal, position by position: greedy generate() (a flipped choice changes the context
# of every later token) and the next-token argmax over a fixed context. A random model's logits
# are nearly flat, so a small change flips a close top-2.
GREEDY_FLOOR = {"mxfp4": 0.6, "nvfp4": 0.3}
ARGMAX_FLOOR = {"mxfp4": 0.8, "nvfp4": 0.6}

NUM_EXPERTS, TOP_K, VOCAB = 16, 4, 512


def tiny_config(**overrides):
    """DeepSeek V4 scaled down to moe_ep's alignment (H, I multiples of 128): 4 layers, the
    first 2 hash-routed, one of each attention kind."""
    kw = dict(vocab_size=VOCAB, hidden_size=256, moe_intermediate_size=128, num_hidden_layers=4,
              num_attention_heads=4, num_key_value_heads=1, head_dim=64, q_lora_rank=64,
              num_experts_per_tok=TOP_K, n_routed_experts=NUM_EXPERTS, o_groups=2, o_lora_rank=64,
              index_n_heads=4, index_head_dim=32, index_topk=16, sliding_window=16, hc_mult=2,
              mlp_layer_types=["hash_moe", "hash_moe", "moe", "moe"],
              layer_types=["sliding_attention", "compressed_sparse_attention",
                           "heavily_compressed_attention", "sliding_attention"],
              bos_token_id=0, eos_token_id=1, pad_token_id=0)
    kw.update(overrides)
    return DeepseekV4Config(**kw)


def tiny_model(seed=0, experts_implementation="grouped_mm"):
    """The seeded random model in bf16, with a hash table of distinct experts per token (the
    model initializes tid2eid to zeros: its real values come from a checkpoint)."""
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(
        tiny_config(), dtype=torch.bfloat16, experts_implementation=experts_implementation).eval()
    gen = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for layer in model.model.layers:
            if layer.mlp.is_hash:
                table = torch.stack([torch.randperm(NUM_EXPERTS, generator=gen)[:TOP_K] for _ in range(VOCAB)])
                layer.mlp.gate.tid2eid.copy_(table)
    return model


def write_tiny_checkpoint(directory, seed=0):
    """save_pretrained of the tiny model: one safetensors file in the naming transformers writes
    back for DeepSeek V4 (model.layers.{L}.ffn.experts.{e}.w1 / w3 / w2.weight bf16,
    ffn.gate.weight, ffn.gate.bias on routed layers, ffn.gate.tid2eid I64 on hash layers,
    ffn.shared_experts.w1 / w3 / w2.weight) with its config.json: the input of `moe_ep
    inspect` / `run --checkpoint` for a model saved by transformers. Returns the directory."""
    tiny_model(seed).save_pretrained(directory)
    return directory


def dequantized(w, recipe):
    """float64 weights [E, rows, K] after the library's bf16 quantizer (docs/spec.md §4.3, §5.1),
    as the numpy oracle computes it: MXFP4 per 32 along K; NVFP4 with one global per (expert,
    tensor) and e4m3 scales per 16."""
    a = w.detach().float().cpu().numpy().astype(np.float64)
    if recipe == "mxfp4":
        return ref.mxfp4_dequant(*ref.mxfp4_quantize(a))
    flat = a.reshape(a.shape[0], -1).astype(np.float32)  # one global per expert tensor
    return ref.nvfp4_act_roundtrip(flat).reshape(a.shape)


def oracle_weights(experts, recipe):
    return ref.ReferenceWeights(dequantized(experts.gate_up_proj, recipe), dequantized(experts.down_proj, recipe))


def oracle_experts(recipe, weights, hidden_states, ids, topk_weights, clamp):
    bits = hidden_states.detach().to(torch.bfloat16).cpu().contiguous().view(torch.int16).numpy().view(np.uint16)
    return ref.layer_forward(recipe, weights, bits, ids.cpu().numpy(), topk_weights.float().cpu().numpy(), clamp)


def with_dequantized_experts(model, recipe):
    """A copy of `model` (transformers' experts) whose expert weights are the layer's, dequantized."""
    copy_ = copy.deepcopy(model)
    with torch.no_grad():
        for layer in copy_.model.layers:
            e = layer.mlp.experts
            e.gate_up_proj.copy_(torch.from_numpy(dequantized(e.gate_up_proj, recipe)).to(e.gate_up_proj.dtype))
            e.down_proj.copy_(torch.from_numpy(dequantized(e.down_proj, recipe)).to(e.down_proj.dtype))
    return copy_


def rel(out, ref_):
    out, ref_ = np.asarray(out, np.float64), np.asarray(ref_, np.float64)
    return float(np.linalg.norm(out - ref_) / np.linalg.norm(ref_))


def greedy(model, prompts, new_tokens):
    with torch.no_grad():
        out = model.generate(prompts, attention_mask=torch.ones_like(prompts), max_new_tokens=new_tokens,
                             min_new_tokens=new_tokens, do_sample=False, pad_token_id=0)
    return out[:, prompts.shape[1]:]


@pytest.fixture(autouse=True)
def release_layers():
    """Each test's models (and with them their layers and the runtime) go when it ends: a process
    holds one moe_ep world at a time, so the CUDA tests need the CPU runtime gone."""
    yield
    gc.collect()


@pytest.fixture(scope="module")
def model():
    return tiny_model()


@pytest.fixture(scope="module")
def tokens():
    return torch.randint(2, VOCAB, (2, 24), generator=torch.Generator().manual_seed(7))


@pytest.fixture(scope="module")
def prompts():
    return torch.randint(2, VOCAB, (4, 8), generator=torch.Generator().manual_seed(11))


@pytest.fixture(scope="module")
def bf16_run(model, tokens, prompts):
    """The model's own run (bf16 weights, transformers' experts): logits and greedy tokens."""
    with torch.no_grad():
        return model(tokens).logits.double().numpy(), greedy(model, prompts, 16)


# ---- registration and the activation ---------------------------------------------------------


def test_registers_in_the_experts_interface():
    for name in ("moe_ep", "moe_ep_nvfp4"):
        assert name in ExpertsInterface._global_mapping
    m = transformers.AutoModelForCausalLM.from_config(tiny_config(), experts_implementation="moe_ep")
    assert m.config._experts_implementation == "moe_ep"


def test_clamp_is_swiglu_limit_and_other_activations_are_refused(model):
    experts = copy.deepcopy(model.model.layers[2].mlp.experts)
    assert mt.activation_clamp(experts) == model.config.swiglu_limit == 10.0
    # The gpt-oss form (alpha, +1 on up) and a clamp of the gate on both sides are not moe_ep's.
    experts._apply_gate = lambda gu: (lambda g, u: g * torch.sigmoid(1.702 * g) * (u + 1))(*gu.chunk(2, -1))
    with pytest.raises(moe_ep.UnsupportedError, match=r"_apply_gate is not moe_ep's clamped SwiGLU"):
        mt.activation_clamp(experts)
    experts._apply_gate = lambda gu: (lambda g, u: torch.nn.functional.silu(g.clamp(-10, 10)) * u.clamp(-10, 10))(
        *gu.chunk(2, -1))
    with pytest.raises(moe_ep.UnsupportedError, match=r"at gate = -31"):
        mt.activation_clamp(experts)
    del experts._apply_gate
    experts.has_bias = True
    with pytest.raises(moe_ep.UnsupportedError, match=r"has_bias = True"):
        mt.activation_clamp(experts)


def test_the_clamp_reaches_the_layer(model):
    # Weights large enough that most gate / up values pass swiglu_limit: the layer's output is
    # the oracle's with the clamp, and far from the oracle's without it.
    experts = copy.deepcopy(model.model.layers[2].mlp.experts)
    experts.config = tiny_config(experts_implementation="moe_ep")
    with torch.no_grad():
        experts.gate_up_proj.mul_(64.0)
    gen = torch.Generator().manual_seed(9)
    x = torch.randn(6, 256, generator=gen).to(torch.bfloat16)
    ids = torch.stack([torch.randperm(NUM_EXPERTS, generator=gen)[:TOP_K] for _ in range(6)])
    w = torch.rand(6, TOP_K, generator=gen)
    with torch.no_grad():
        y = experts(x, ids, w).float().numpy()
    weights = oracle_weights(experts, "mxfp4")
    assert rel(y, oracle_experts("mxfp4", weights, x, ids, w, 10.0)) <= LAYER_TOLERANCE["mxfp4"]
    assert rel(y, oracle_experts("mxfp4", weights, x, ids, w, None)) > 0.5


def test_unaligned_sizes_are_refused_naming_the_field():
    m = transformers.AutoModelForCausalLM.from_config(
        tiny_config(moe_intermediate_size=96), dtype=torch.bfloat16, experts_implementation="moe_ep")
    with pytest.raises(ValueError, match=r"intermediate_size = 96 .*multiple of 128"), torch.no_grad():
        m(torch.tensor([[2, 3, 4]]))


# ---- numerics --------------------------------------------------------------------------------


@pytest.mark.parametrize("recipe", ["mxfp4", "nvfp4"])
def test_each_experts_call_is_the_recipe(model, tokens, recipe):
    m = copy.deepcopy(model)
    m.set_experts_implementation(IMPLEMENTATION[recipe])
    calls = []
    for name, experts in mt.experts_modules(m):
        experts.register_forward_hook(lambda mod, args, out, name=name: calls.append((name, mod, args, out)))
    with torch.no_grad():
        m(tokens)
    assert len(calls) == 4
    weights = {}
    for name, experts, (x, ids, w), y in calls:
        assert experts._moe_ep_state.layer.info()["recipe"] == recipe
        if name not in weights:
            weights[name] = oracle_weights(experts, recipe)
        want = oracle_experts(recipe, weights[name], x, ids, w, model.config.swiglu_limit)
        err = rel(y.float().numpy(), want)
        print(f"\n{recipe} {name}: experts vs the recipe's oracle: {err:.2e}")
        assert err <= LAYER_TOLERANCE[recipe], f"{name}: {err:.3e}"


@pytest.mark.parametrize("recipe", ["mxfp4", "nvfp4"])
def test_logits_and_greedy_tokens_match_the_eager_model(model, tokens, prompts, bf16_run, recipe):
    m = copy.deepcopy(model)
    m.set_experts_implementation(IMPLEMENTATION[recipe])
    same_weights = with_dequantized_experts(model, recipe)
    want_bf16, new_bf16 = bf16_run
    with torch.no_grad():
        got = m(tokens).logits.double().numpy()
        want = same_weights(tokens).logits.double().numpy()
    err, err_bf16 = rel(got, want), rel(got, want_bf16)
    # Next-token choices on the same context (no divergence to carry forward).
    argmax = float((got.argmax(-1) == want.argmax(-1)).mean())
    new = greedy(m, prompts, 16)
    agree = float((new == greedy(same_weights, prompts, 16)).float().mean())
    agree_bf16 = float((new == new_bf16).float().mean())
    print(f"\n{recipe}: logits vs transformers' experts with the layer's weights {err:.2e}, with bf16 "
          f"weights {err_bf16:.2e}; "
          f"greedy tokens equal {agree:.1%} / {agree_bf16:.1%} ({new.numel()} tokens); next-token argmax "
          f"equal {argmax:.1%} ({got.shape[0] * got.shape[1]} positions)")
    assert err <= LOGITS_TOLERANCE[recipe]
    assert argmax >= ARGMAX_FLOOR[recipe]
    assert err_bf16 <= LOGITS_TOLERANCE_BF16
    assert agree >= GREEDY_FLOOR[recipe]


def fp8_interface_experts(config, **kw):
    """transformers' experts module for a checkpoint loaded with quant_method "fp8" (what
    from_pretrained puts in place of DeepseekV4Experts on a GPU), built here on the CPU."""
    from transformers.integrations.finegrained_fp8 import ALL_FP8_EXPERTS_FUNCTIONS, FP8Experts
    from transformers.integrations.moe import use_experts_implementation
    cls = use_experts_implementation(experts_class=FP8Experts, experts_interface=ALL_FP8_EXPERTS_FUNCTIONS)
    return cls(config=config, **kw)


def test_fp4_checkpoint_experts_are_taken_as_loaded(model):
    # DeepSeek V4's FP4 experts as transformers loads them: int8 e2m1 pairs + float8_e8m0fnu
    # scales per 32, which is MXFP4: the layer takes them as they are, so they give bitwise what
    # the bf16 experts they were quantized from give (the library's quantizer is the same one).
    pytest.importorskip("transformers.integrations.finegrained_fp8", reason="transformers without FP8 experts")
    if not hasattr(torch, "float8_e8m0fnu"):
        pytest.skip(f"torch {torch.__version__} has no float8_e8m0fnu")
    from transformers.integrations.finegrained_fp8 import FP8Experts
    if "expert_dtype" not in inspect.signature(FP8Experts.__init__).parameters:
        pytest.skip(f"transformers {transformers.__version__} loads no FP4 experts (FP8Experts takes no expert_dtype)")
    config = tiny_config(experts_implementation="moe_ep")
    dense = copy.deepcopy(model.model.layers[2].mlp.experts)
    dense.config = config
    fp4 = fp8_interface_experts(config, block_size=None, scale_fmt="ue8m0", expert_dtype="fp4",
                                swiglu_limit=config.swiglu_limit)
    with torch.no_grad():
        for name in ("gate_up_proj", "down_proj"):
            codes, scales = ref.mxfp4_quantize(getattr(dense, name).float().numpy().astype(np.float64))
            getattr(fp4, name).copy_(torch.from_numpy(codes).view(torch.int8))
            getattr(fp4, name + "_scale_inv").copy_(torch.from_numpy(scales).view(torch.float8_e8m0fnu))
    gen = torch.Generator().manual_seed(5)
    x = torch.randn(6, 256, generator=gen).to(torch.bfloat16)
    ids = torch.stack([torch.randperm(NUM_EXPERTS, generator=gen)[:TOP_K] for _ in range(6)])
    w = torch.rand(6, TOP_K, generator=gen).to(torch.bfloat16)
    with torch.no_grad():
        got = fp4(x, ids, w)
        assert torch.equal(got, dense(x, ids, w))
    assert fp4._moe_ep_state.layer.info()["recipe"] == "mxfp4"
    # FP8 block-scaled experts have no moe_ep recipe: refused with the way out.
    fp8 = fp8_interface_experts(config, block_size=(128, 128), expert_dtype="fp8", swiglu_limit=10.0)
    with pytest.raises(moe_ep.UnsupportedError, match=r"experts in torch.float8_e4m3fn .*dequantize=True"), \
            torch.no_grad():
        fp8(x, ids, w)


# ---- the cache, options, compile -------------------------------------------------------------


def test_weights_are_quantized_once_and_again_when_they_change(model, tokens):
    m = copy.deepcopy(model)
    m.set_experts_implementation("moe_ep")
    experts = m.model.layers[3].mlp.experts
    with torch.no_grad():
        first = m(tokens).logits
        layer = experts._moe_ep_state.layer
        assert torch.equal(m(tokens).logits, first)
        assert experts._moe_ep_state.layer is layer                  # cached
        experts.down_proj.mul_(2.0)                                    # in place: version counter
        second = m(tokens).logits
        assert experts._moe_ep_state.layer is not layer
        assert not torch.equal(second, first)
        layer = experts._moe_ep_state.layer
        experts.down_proj = torch.nn.Parameter(experts.down_proj.detach() / 2.0)   # a new tensor
        assert torch.equal(m(tokens).logits, first)
        assert experts._moe_ep_state.layer is not layer
    # More tokens than a layer call takes run in chunks: each token's result is the same.
    assert mt.configure(m, max_tokens=16) == 4
    with torch.no_grad():
        assert torch.equal(m(tokens).logits, first)
    assert experts._moe_ep_state.layer.info()["max_tokens_per_rank"] == 16
    # A copy gets its own state; layers of one device share one runtime.
    c = copy.deepcopy(m)
    assert c.model.layers[3].mlp.experts._moe_ep_state.handle != experts._moe_ep_state.handle
    assert mt.prepare(c) == 4
    assert c.model.layers[3].mlp.experts._moe_ep_state.layer.info()["activation_clamp"] == 10.0
    runtimes = {id(e._moe_ep_state.runtime) for _, e in mt.experts_modules(c)}
    assert len(runtimes) == 1


def test_experts_compile_without_graph_breaks(model):
    # Compiled before any eager forward: the state (and the activation check) is made while
    # dynamo traces; the layer is built inside the op at the first compiled call.
    m = copy.deepcopy(model)
    m.set_experts_implementation("moe_ep")
    block = m.model.layers[2].mlp
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(5, model.config.hidden_size, generator=gen).to(torch.bfloat16)
    ids = torch.stack([torch.randperm(NUM_EXPERTS, generator=gen)[:TOP_K] for _ in range(5)])
    w = torch.rand(5, TOP_K, generator=gen).to(torch.bfloat16)
    torch._dynamo.reset()
    with torch.no_grad():
        got = torch.compile(block.experts, fullgraph=True)(x, ids, w)
        assert torch.equal(got, block.experts(x, ids, w))
        # The whole MoE block (the model's router and shared expert around the op): inductor
        # rounds the bf16 router and shared expert its own way, so only close.
        xb = x.view(1, 5, -1)
        assert rel(torch.compile(block, fullgraph=True)(xb).float(), block(xb).float()) < 2e-2


# ---- the checkpoint --------------------------------------------------------------------------


def test_save_pretrained_writes_deepseek_v4_naming(tmp_path):
    from safetensors import safe_open
    directory = write_tiny_checkpoint(tmp_path / "tiny-v4")
    names = {}
    for f in directory.glob("*.safetensors"):
        with safe_open(str(f), "pt") as st:
            names.update({k: st.get_slice(k) for k in st.keys()})
    # transformers writes DeepSeek V4's own naming back (bf16 experts, one tensor per expert).
    for layer in range(4):
        p = f"model.layers.{layer}.ffn."
        for e in (0, NUM_EXPERTS - 1):
            assert names[p + f"experts.{e}.w1.weight"].get_shape() == [128, 256]
            assert names[p + f"experts.{e}.w3.weight"].get_shape() == [128, 256]
            assert names[p + f"experts.{e}.w2.weight"].get_shape() == [256, 128]
            assert names[p + f"experts.{e}.w1.weight"].get_dtype() == "BF16"
        assert names[p + "shared_experts.w1.weight"].get_shape() == [128, 256]
        assert names[p + "gate.weight"].get_shape() == [NUM_EXPERTS, 256]
        assert (p + "gate.tid2eid" in names) == (layer < 2)
        assert (p + "gate.bias" in names) == (layer >= 2)
    # from_pretrained with moe_ep runs the same layers as the model that was saved.
    loaded = transformers.AutoModelForCausalLM.from_pretrained(directory, experts_implementation="moe_ep")
    saved = tiny_model()
    saved.set_experts_implementation("moe_ep")
    # The saved model's dtypes: transformers 5.17 makes the model in bf16 throughout with
    # from_config(dtype=bf16) but loads its norms in fp32, and its attention then mixes dtypes.
    saved_dtypes = {name: t.dtype for name, t in [*saved.named_parameters(), *saved.named_buffers()]}
    with torch.no_grad():
        for name, t in [*loaded.named_parameters(), *loaded.named_buffers()]:
            t.data = t.data.to(saved_dtypes[name])
    tokens = torch.tensor([[2, 3, 5, 7, 11, 13]])
    with torch.no_grad():
        assert torch.equal(loaded(tokens).logits, saved(tokens).logits)
    assert loaded.model.layers[0].mlp.experts._moe_ep_state.layer is not None


def test_moe_ep_inspect_reads_the_saved_checkpoint(tmp_path):
    cli = os.environ.get("MOE_EP_CLI")
    if not cli:
        pytest.skip("set MOE_EP_CLI to a moe_ep binary to check `moe_ep inspect` on this checkpoint "
                    "(DeepSeek V4's naming with bf16 experts, as save_pretrained writes it)")
    directory = write_tiny_checkpoint(tmp_path / "tiny-v4")
    r = subprocess.run([cli, "inspect", str(directory)], capture_output=True, text=True)
    assert r.returncode == 0 and re.search(r"MoE layers found: 4\b", r.stdout), r.stdout + r.stderr


# ---- CUDA ------------------------------------------------------------------------------------


@pytest.mark.skipif(not HAS_CUDA, reason="no SM90 CUDA device or a build without CUDA")
@pytest.mark.parametrize("recipe", ["mxfp4", "nvfp4"])
def test_cuda_experts_calls_are_the_recipe(model, tokens, recipe):
    m = copy.deepcopy(model).to("cuda")
    m.set_experts_implementation(IMPLEMENTATION[recipe])
    calls = []
    for name, experts in mt.experts_modules(m):
        experts.register_forward_hook(lambda mod, args, out, name=name: calls.append((name, mod, args, out)))
    with torch.no_grad():
        m(tokens.cuda())
    for name, experts, (x, ids, w), y in calls:
        assert experts._moe_ep_state.layer.info()["device"].startswith("cuda")
        want = oracle_experts(recipe, oracle_weights(experts, recipe), x, ids, w, model.config.swiglu_limit)
        err = rel(y.float().cpu().numpy(), want)
        print(f"\ncuda {recipe} {name}: experts vs the recipe's oracle: {err:.2e}")
        assert err <= LAYER_TOLERANCE[recipe], f"{name}: {err:.3e}"
    same_weights = with_dequantized_experts(model, recipe).to("cuda")
    with torch.no_grad():
        err = rel(m(tokens.cuda()).logits.double().cpu().numpy(),
                  same_weights(tokens.cuda()).logits.double().cpu().numpy())
    print(f"cuda {recipe}: logits vs transformers' experts with the layer's weights {err:.2e}")
    assert err <= LOGITS_TOLERANCE[recipe]
    c = torch.compile(m.model.layers[2].mlp, fullgraph=True)
    x = torch.randn(1, 5, model.config.hidden_size, device="cuda", dtype=torch.bfloat16)
    with torch.no_grad():
        assert rel(c(x).float().cpu().numpy(), m.model.layers[2].mlp(x).float().cpu().numpy()) < 2e-2
