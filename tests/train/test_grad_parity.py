"""Gradient parity with torch: random-weight transformers causal LMs (LLaMA with GQA, Qwen2 with q/k/v
biases, Mistral with a sliding window, GPT-2 with tied embeddings), loaded by volvox, trained on the same
batch with the same loss (next-token cross entropy, padding and prompt rows labelled -100). The loss
agrees to 1e-5 and every parameter's gradient to 1e-4 (norm of the difference / norm)."""

import numpy as np
import pytest
import torch

from hf_models import build_causal_lm, train_bpe_tokenizer
from volvox.compile.autodiff import grad_name
from volvox.compile.memory import bind_dims, lifetimes
from volvox.errors import BlueprintError, ShapeError, UnsupportedError
from volvox.ir.graph import Graph, Node, TensorSpec
from volvox.ops.context import RunContext
from volvox.runtime.executor import Executor
from volvox.train import causal_lm_graph, training_graph

MODELS = {"llama": {}, "qwen2": {}, "mistral": dict(sliding_window=3), "gpt2": {}}
BASE = dict(num_hidden_layers=2, hidden_size=48, num_attention_heads=4, num_key_value_heads=2, intermediate_size=80,
            max_position_embeddings=256)
GEMMA = dict(BASE, num_hidden_layers=3, head_dim=16, query_pre_attn_scalar=24, sliding_window=6,
             layer_types=["sliding_attention", "full_attention", "sliding_attention"])
FAMILIES = {"qwen3": dict(BASE, head_dim=16),                # QK-norm: a reshape to heads, rms_norm, back
            "phi3": dict(BASE, sliding_window=7),            # fused qkv / gate_up sliced apart
            "gemma3_text": GEMMA}                            # embed scale, (1 + w) norms, GeGLU, post norms


def build_family(directory, model_type, tokenizer_json, vocab, **kw):
    """A random ``model_type`` causal LM (fp32, weights widened, norms randomised) saved with the tokenizer."""
    import shutil

    import transformers as tf

    torch.manual_seed(0)
    config = tf.AutoConfig.for_model(model_type, vocab_size=vocab, bos_token_id=None, eos_token_id=None,
                                     pad_token_id=None, **kw)
    model = tf.AutoModelForCausalLM.from_config(config).float().eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.ndim >= 2 or "bias" in name:
                p.mul_(4.0)
            elif "norm" in name:
                p.add_(0.3 * torch.randn_like(p))
    model.save_pretrained(directory)
    shutil.copy(tokenizer_json, directory / "tokenizer.json")
    return model


@pytest.fixture(scope="module")
def tokenizer_json(tmp_path_factory):
    path = tmp_path_factory.mktemp("tok") / "tokenizer.json"
    return path, train_bpe_tokenizer(path)


@pytest.fixture(scope="module")
def batch(tokenizer_json):
    """tokens (2, 9) and their next-token labels: row 1 is padded after 6 tokens, a prompt's rows -100."""
    vocab = tokenizer_json[1]
    tokens = np.random.default_rng(3).integers(0, vocab, (2, 9)).astype(np.int32)  # (batch, seq)
    tokens[1, 6:] = 0
    labels = np.full(tokens.shape, -100, np.int32)                                  # (batch, seq)
    labels[:, :-1] = tokens[:, 1:]
    labels[1, 5:] = -100   # padding
    labels[0, :2] = -100   # a prompt
    return tokens, labels


def gpt2_grads(grads: dict, layers: int) -> dict:
    """volvox's GPT-2 gradients under transformers' names: Conv1D weights are [in, out], and c_attn holds
    Q, K and V side by side."""
    out = {n: g for n, g in grads.items() if ".attn." not in n and ".mlp." not in n}
    for i in range(layers):
        v, t = f"transformer.h.{i}.", f"transformer.h.{i}."
        out[t + "attn.c_attn.weight"] = np.concatenate([grads[v + f"attn.{p}_proj.weight"] for p in "qkv"]).T
        out[t + "attn.c_attn.bias"] = np.concatenate([grads[v + f"attn.{p}_proj.bias"] for p in "qkv"])
        for ours, theirs in (("attn.o_proj", "attn.c_proj"), ("mlp.fc", "mlp.c_fc"), ("mlp.proj", "mlp.c_proj")):
            out[t + theirs + ".weight"] = grads[v + ours + ".weight"].T
            out[t + theirs + ".bias"] = grads[v + ours + ".bias"]
    return out


@pytest.mark.parametrize("kind", list(MODELS) + list(FAMILIES))
def test_every_gradient_matches_torch(kind, tokenizer_json, batch, tmp_path):
    path, vocab = tokenizer_json
    if kind in MODELS:
        model = build_causal_lm(tmp_path, kind, path, vocab, **MODELS[kind])
    else:
        model = build_family(tmp_path, kind, path, vocab, **FAMILIES[kind])
    tokens, labels = batch
    logits = model(input_ids=torch.tensor(tokens, dtype=torch.long)).logits            # (batch, seq, vocab)
    want_loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                                  torch.tensor(labels.reshape(-1), dtype=torch.long), ignore_index=-100)
    want_loss.backward()
    want = {n: p.grad.numpy() for n, p in model.named_parameters()}

    tg = training_graph(tmp_path, trainable="all")
    try:
        attention = [n for n in tg.graph.nodes if n.op == "causal_attention"]
        if kind in MODELS:
            assert attention and all(n.params.get("window", 0) == MODELS[kind].get("sliding_window", 0) for n in attention)
        out = Executor(tg.joint(), tg.weights).run(RunContext(), {"tokens": tokens, "labels": labels, **tg.params})
    finally:
        tg.close()
    assert abs(float(out["loss"]) - want_loss.item()) <= 1e-5
    got = {n: out[grad_name(n)] for n in tg.params}
    if kind == "gpt2":
        got = gpt2_grads(got, model.config.n_layer)
    assert set(got) == set(want)
    for name, g in want.items():
        err = np.linalg.norm(got[name] - g) / np.linalg.norm(g)
        assert err < 1e-4, f"{kind} {name}: relative gradient error {err:.2e}"


def test_frozen_model_and_refusals(tokenizer_json, tmp_path):
    path, vocab = tokenizer_json
    build_causal_lm(tmp_path, "llama", path, vocab)
    tg = training_graph(tmp_path, trainable=["model.layers.0.mlp.down_proj.weight"])
    try:
        assert list(tg.params) == ["model.layers.0.mlp.down_proj.weight"]
        assert [s.name for s in tg.graph.inputs] == ["tokens", "labels", "model.layers.0.mlp.down_proj.weight"]
        joint = tg.joint()
        assert joint.outputs == ["loss", "grad/model.layers.0.mlp.down_proj.weight"]
        # frozen weights get no gradient nodes: no weight gradient of any other linear
        assert sum(n.op == "linear_grad_weight" for n in joint.nodes) == 1
        # the memory planner sees the joint graph's lifetimes: the logits die at the first backward node
        buffers, _ = lifetimes(bind_dims(joint, {"batch": 2, "seq": 5}), {"batch": 2, "seq": 5})
        logits = next(b for b in buffers if b.name == "logits")
        assert joint.nodes[logits.last].op == "cross_entropy_grad"
        run = Executor(joint, tg.weights).run
        tokens = np.zeros((2, 5), np.int32)
        with pytest.raises(ShapeError, match="dim 'seq' is 5 elsewhere, 4 here"):
            run(RunContext(), {"tokens": tokens, "labels": np.zeros((2, 4), np.int32), **tg.params})
        with pytest.raises(ShapeError, match=f"label {vocab} is outside"):
            run(RunContext(), {"tokens": tokens, "labels": np.full((2, 5), vocab, np.int32), **tg.params})
    finally:
        tg.close()
    with pytest.raises(BlueprintError, match="not a weight of the graph"):
        training_graph(tmp_path, trainable=["nope"])
    build_family(tmp_path / "gemma2", "gemma2", path, vocab, **dict(GEMMA, attn_logit_softcapping=8.0))
    with pytest.raises(UnsupportedError, match="node 'l0.attn': soft-capped or non-causal attention"):
        training_graph(tmp_path / "gemma2")
    image = Graph([TensorSpec("x", (1, 4), "float32")], {}, [Node("r", "relu", {"x": "x"}, {"y": "y"})], ["y"])
    with pytest.raises(UnsupportedError, match="not a decoder-only text model graph"):
        causal_lm_graph(image)


def test_forward_is_the_inference_graph_and_compiles(tokenizer_json, batch, tmp_path):
    """The training graph's loss is the cross entropy of the inference model's own logits (row by row, the
    KV-cache path); compiled (frozen Q/K/V merged into linear_split, gate/up into swiglu) it gives the
    uncompiled gradients."""
    import volvox
    from volvox.compile import compile_graph
    from volvox.compile.autodiff import differentiate

    path, vocab = tokenizer_json
    build_causal_lm(tmp_path, "llama", path, vocab)
    tokens, labels = batch
    lm = volvox.load(tmp_path)
    rows = []
    for b in range(len(tokens)):
        logits = lm.logits(tokens[b].tolist()).astype(np.float64)              # (seq, vocab)
        lse = np.log(np.exp(logits - logits.max(-1, keepdims=True)).sum(-1)) + logits.max(-1)
        rows += [lse[t] - logits[t, labels[b, t]] for t in range(tokens.shape[1]) if labels[b, t] != -100]
    lm.close()
    trainable = ["model.norm.weight", "model.layers.0.input_layernorm.weight", "lm_head.weight"]
    tg = training_graph(tmp_path, trainable=trainable)
    try:
        feeds = {"tokens": tokens, "labels": labels, **tg.params}
        plain = Executor(tg.joint(), tg.weights).run(RunContext(), feeds)
        compiled, weights, _ = compile_graph(tg.graph, dict(tg.weights))
        assert {"linear_split", "swiglu"} <= {n.op for n in compiled.nodes}
        fused = Executor(differentiate(compiled, "loss", trainable), weights).run(RunContext(), feeds)
    finally:
        tg.close()
    assert abs(float(plain["loss"]) - np.mean(rows)) <= 1e-5 * np.mean(rows)
    assert float(fused["loss"]) == float(plain["loss"])
    for name in trainable:
        want = plain[grad_name(name)]
        assert np.linalg.norm(fused[grad_name(name)] - want) / np.linalg.norm(want) < 1e-5, name


def test_quantized_gguf_model_trains_its_norms(batch, tmp_path):
    """A q8_0 GGUF LLaMA (interleaved RoPE, tied quantized embedding): frozen quantized weights, the float
    norms trainable. Its loss is the inference logits' cross entropy; through the numpy references
    (dequantized products) the gradients equal central differences of the loss."""
    import volvox
    from tiny_gguf import write_tiny_llama

    path = tmp_path / "tiny.gguf"
    write_tiny_llama(path, qtype="q8_0", embed_qtype="q8_0")
    tokens, labels = batch
    tokens = tokens % 200                                                      # (batch, seq) within the byte vocab
    labels = np.where(labels == -100, -100, labels % 200).astype(np.int32)
    tg = training_graph(path, trainable="all")
    try:
        assert set(tg.params) == {"output_norm.weight"} | {f"blk.{i}.{n}_norm.weight" for i in (0, 1) for n in ("attn", "ffn")}
        assert {n.params["style"] for n in tg.graph.nodes if n.op == "rope"} == {"interleaved"}
        feeds = {"tokens": tokens, "labels": labels, **tg.params}
        kernel_loss = float(Executor(tg.graph, tg.weights).run(RunContext(), feeds)["loss"])
        out = Executor(tg.joint(), tg.weights, reference=True).run(RunContext(), feeds)
        forward = Executor(tg.graph, tg.weights, reference=True)
        for name in ("output_norm.weight", "blk.0.attn_norm.weight"):
            picks, fd = [0, 5, 17, 40], []
            for i in picks:
                losses = []
                for sign in (1, -1):
                    moved = dict(tg.params, **{name: tg.params[name].copy()})
                    moved[name][i] += sign * 1e-2
                    losses.append(float(forward.run(RunContext(), {**feeds, **moved})["loss"]))
                fd.append((losses[0] - losses[1]) / 2e-2)
            got = out[grad_name(name)][picks]
            assert np.linalg.norm(got - fd) / np.linalg.norm(fd) < 2e-3, name
    finally:
        tg.close()
    lm = volvox.load(path)
    rows = []
    for b in range(len(tokens)):
        logits = lm.logits(tokens[b].tolist()).astype(np.float64)              # (seq, vocab)
        lse = np.log(np.exp(logits - logits.max(-1, keepdims=True)).sum(-1)) + logits.max(-1)
        rows += [lse[t] - logits[t, labels[b, t]] for t in range(tokens.shape[1]) if labels[b, t] != -100]
    lm.close()
    assert abs(kernel_loss - np.mean(rows)) <= 1e-5 * np.mean(rows)


def test_block_checkpointing_gives_the_same_gradients_in_less_memory(tokenizer_json, tmp_path):
    """joint(checkpoint_blocks=True): the residual stream is kept, each block's activations are recomputed
    for its backward (the same kernels: the same bits), and the planner's peak drops."""
    path, vocab = tokenizer_json
    build_causal_lm(tmp_path, "llama", path, vocab)
    tokens = np.random.default_rng(5).integers(0, vocab, (2, 48)).astype(np.int32)  # (batch, seq)
    labels = np.roll(tokens, -1, axis=1)
    labels[:, -1] = -100
    probe = training_graph(tmp_path)
    norms = [n for n in probe.graph.weights if "norm" in n]
    probe.close()
    tg = training_graph(tmp_path, trainable=norms)
    dims = {"batch": 2, "seq": 48}
    try:
        feeds = {"tokens": tokens, "labels": labels, **tg.params}
        outs, peaks = [], []
        for checkpoint in (False, True):
            joint = tg.joint(checkpoint_blocks=checkpoint)
            outs.append(Executor(joint, tg.weights).run(RunContext(), feeds))
            buffers, _ = lifetimes(bind_dims(joint, dims), dims)
            peaks.append(max(sum(b.size for b in buffers if b.first <= i <= b.last) for i in range(len(joint.nodes))))
        recomputed = [n for n in joint.nodes if n.id.startswith("recompute.")]
        assert {n.op for n in recomputed} >= {"linear", "causal_attention", "rope"}
        # a block's forward activation now dies in the forward
        first_backward = next(i for i, n in enumerate(joint.nodes) if n.id.startswith(("bw", "recompute.")))
        assert next(b for b in buffers if b.name == "l0.q").last < first_backward
    finally:
        tg.close()
    for name in outs[0]:
        np.testing.assert_array_equal(outs[1][name], outs[0][name])
    assert peaks[1] < 0.75 * peaks[0], peaks
