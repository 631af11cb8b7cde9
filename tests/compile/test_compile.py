"""The graph compiler: every model the project runs computes the same outputs with every pass
on and with none; LLaMA fusions; pass selection; trace. (Each pass on its own:
test_compile_passes.py; the memory plan: test_compile_memory.py.)"""

import json
from pathlib import Path

import numpy as np
import pytest

import volvox
from real_models import DATA, VISION_MODELS, cached, random_feeds
from volvox import hub
from volvox.compile import CPU_ONLY, PASSES, compile_graph
from volvox.ir.graph import Graph, Node, TensorSpec
from tiny_gguf import write_tiny_llama
from volvox.ops import validate



def assert_same(got: dict, want: dict) -> None:
    """Integer outputs bit-exact; float ones within float32 rounding of the largest value."""
    assert got.keys() == want.keys()
    for key in want:
        if want[key].dtype.kind in "iu":
            np.testing.assert_array_equal(got[key], want[key])
        else:
            np.testing.assert_allclose(got[key], want[key], rtol=1e-5, atol=1e-5 * np.abs(want[key]).max())


@pytest.mark.parametrize("qtype", ["f32", "q4_1", "q8_0"])
def test_passes_on_equal_passes_off(tmp_path, qtype):
    path = write_tiny_llama(tmp_path / "t.gguf", qtype=qtype, embed_qtype="q8_0" if qtype != "f32" else "f32")
    ids = [3, 9, 27, 81, 243, 100, 7]
    with volvox.load(path) as on, volvox.load(path, optimize=False) as off:
        assert len(on.graph.nodes) < len(off.graph.nodes)
        # Quantized rows are computed exactly as before; f32 GEMM tiles over N, so a merged matrix
        # may sum some columns in another order (float rounding only).
        check = np.testing.assert_array_equal if qtype != "f32" else \
            (lambda a, b: np.testing.assert_allclose(a, b, rtol=0, atol=1e-5 * np.abs(b).max()))
        check(on.logits(ids), off.logits(ids))
        s_on, s_off = on.new_session(), off.new_session()
        s_on.forward(ids)
        s_off.forward(ids)
        check(s_on.forward([5]), s_off.forward([5]))


def test_llama_fusions_shape_the_graph(tmp_path):
    with volvox.load(write_tiny_llama(tmp_path / "t.gguf", n_layers=3)) as lm:
        ops = [n.op for n in lm.graph.nodes]
        src = [n.op for n in lm.source_graph.nodes]
        assert src.count("linear") == 3 * 7 + 1 and src.count("silu") == 3
        assert ops.count("swiglu") == 3 and "silu" not in ops and "mul" not in ops
        assert ops.count("linear_split") == 3  # q, k, v of each layer: one matmul
        assert ops.count("linear") == 3 * 3 + 1  # gate+up, o, down per layer, and the head
        steps = {name: (before, after) for name, before, after in lm.compile_report.steps}
        assert steps["fuse_swiglu"][0] - steps["fuse_swiglu"][1] == 2 * 3  # gate, up, silu, mul -> linear, swiglu
        assert lm.compile_report.nodes_after == len(lm.graph.nodes)


def test_selected_and_unknown_passes(tmp_path):
    path = write_tiny_llama(tmp_path / "t.gguf")
    with volvox.load(path, optimize=["fuse_swiglu"]) as lm:
        assert "swiglu" in [n.op for n in lm.graph.nodes]
        assert "linear_split" not in [n.op for n in lm.graph.nodes]
    with pytest.raises(volvox.UnsupportedError, match="unknown compiler passes"):
        volvox.load(path, optimize=["inline_everything"])


def test_swiglu_not_fused_when_gate_is_shared():
    w = {n: np.eye(4, dtype=np.float32) for n in ("wg", "wu")}
    g = Graph([TensorSpec("x", ("n", 4), "float32")], {n: TensorSpec(n, (4, 4), "float32") for n in w}, [
        Node("gate", "linear", {"x": "x", "weight": "wg"}, {"y": "g"}),
        Node("up", "linear", {"x": "x", "weight": "wu"}, {"y": "u"}),
        Node("act", "silu", {"x": "g"}, {"y": "s"}),
        Node("mul", "mul", {"a": "s", "b": "u"}, {"y": "m"}),
        Node("also", "add", {"a": "g", "b": "m"}, {"y": "out"}),  # g has a second reader: fusing would lose it
    ], ["out"])
    validate(g)
    fused, _, _ = compile_graph(g, w, ["fuse_swiglu"])
    assert [n.op for n in fused.nodes] == ["linear", "linear", "silu", "mul", "add"]


def test_trace_is_chrome_json(tmp_path):
    path = write_tiny_llama(tmp_path / "t.gguf")
    with volvox.load(path, profile=True) as lm:
        lm.generate("the", max_new_tokens=3)
        lm.profile.write_trace(tmp_path / "trace.json")
        n_nodes = len(lm.graph.nodes)
        node_ids = {n.id for n in lm.graph.nodes}
    trace = json.loads((tmp_path / "trace.json").read_text())["traceEvents"]
    assert {ev["name"] for ev in trace} == node_ids and len(trace) > 2 * n_nodes  # prefill, then decode steps
    ev = trace[0]
    assert ev["ph"] == "X" and ev["dur"] >= 0 and ev["args"]["backend"] == "cpu" and ev["args"]["shapes"]


def assert_passes_change_nothing(path, feeds_dims: dict, min_fused: int = 0) -> None:
    """``path`` loaded with every pass and with none: same outputs on random feeds."""
    with volvox.load(path) as on, volvox.load(path, optimize=False) as off:
        assert [name for name, _, _ in on.compile_report.steps] == list(PASSES)
        assert len(off.graph.nodes) - len(on.graph.nodes) >= min_fused
        feeds = random_feeds(on, feeds_dims)
        assert_same(on.run(feeds), off.run(feeds))


@pytest.mark.parametrize("name,fused", [("tiny.tflite", 0), ("tiny.onnx", 2)])
def test_tiny_vision_fixtures_same_with_passes_on_and_off(name, fused):
    assert_passes_change_nothing(DATA / name, {}, min_fused=fused)  # ONNX: conv+relu, MatMul+Add


@pytest.mark.parametrize("name", sorted(VISION_MODELS))
def test_every_vision_model_same_with_passes_on_and_off(name):
    """The real vision models (when cached): every pass on equals none (int8 bit-exact)."""
    cached(name)
    assert_passes_change_nothing(name, VISION_MODELS[name])


def test_smollm2_same_with_passes_on_and_off():
    """The real SmolLM2 (Q4_1, when cached): quantized rows are computed exactly as before."""
    path = cached("smollm2-135m-instruct")
    with volvox.load(path) as on, volvox.load(path, optimize=False) as off:
        ids = on.tokenizer.encode("The capital of France is")
        np.testing.assert_array_equal(on.logits(ids), off.logits(ids))


HF_DECODERS = {"gpt2-tanh": ("gpt2", {}), "gpt2-erf": ("gpt2", dict(activation_function="gelu", n_layer=3)),
               "llama-bias": ("llama", dict(attention_bias=True, mlp_bias=True))}


@pytest.mark.parametrize("case", sorted(HF_DECODERS))
def test_hf_decoders_same_with_passes_on_and_off(tmp_path, case):
    """GPT-2's MLP (linear -> gelu) and a biased LLaMA MLP (linear -> silu) become linear_act."""
    pytest.importorskip("transformers")
    from hf_models import build_causal_lm, train_bpe_tokenizer

    vocab = train_bpe_tokenizer(tmp_path / "tokenizer.json")
    kind, kw = HF_DECODERS[case]
    build_causal_lm(tmp_path / "model", kind, tmp_path / "tokenizer.json", vocab, **kw)
    with volvox.load(tmp_path / "model") as on, volvox.load(tmp_path / "model", optimize=False) as off:
        assert [n.op for n in on.graph.nodes].count("linear_act") == kw.get("n_layer", 2)
        ids = [5, 17, 99, 3, 250, 42]
        want = off.logits(ids)
        np.testing.assert_allclose(on.logits(ids), want, rtol=0, atol=1e-5 * np.abs(want).max())


def test_bert_same_with_passes_on_and_off(tmp_path):
    """BERT: the three embeddings' sum is one add_n; the FFN's linear -> gelu one linear_act."""
    pytest.importorskip("transformers")
    pytest.importorskip("torch")
    from hf_models import build_tiny_bert

    texts = ["the cat sat on the mat", "a dog ran to the sea"]
    build_tiny_bert(tmp_path, texts)
    with volvox.load(tmp_path) as on, volvox.load(tmp_path, optimize=False) as off:
        ops = [n.op for n in on.graph.nodes]
        assert ops.count("add_n") == 1 and ops.count("linear_act") == 2 and "gelu" not in ops
        want = off.embed(texts)
        np.testing.assert_allclose(on.embed(texts), want, rtol=0, atol=1e-5 * np.abs(want).max())


def test_conv_activation_fusion_and_noop_reshape(tmp_path):
    x = TensorSpec("x", (1, 6, 6, 2), "float32")
    w = {"w": np.random.default_rng(1).standard_normal((3, 3, 3, 2)).astype(np.float32)}
    g = Graph([x], {"w": TensorSpec("w", (3, 3, 3, 2), "float32")}, [
        Node("conv", "conv2d", {"x": "x", "weight": "w"}, {"y": "c"}, {"strides": [1, 1], "pads": [1, 1, 1, 1]}),
        Node("same", "reshape", {"x": "c"}, {"y": "r"}, {"shape": [1, 6, 6, 3]}),
        Node("act", "clip", {"x": "r"}, {"y": "out"}, {"min": 0, "max": 6}),
    ], ["out"])
    validate(g)
    compiled, weights, _ = compile_graph(g, w, ["elide_noop_reshapes", "fuse_conv_activation"])
    assert [(n.op, n.params.get("activation")) for n in compiled.nodes] == [("conv2d", "relu6")]


@pytest.mark.parametrize("family", ["gpt2", "bert"])
def test_gpu_backends_run_every_fusion(tmp_path, family):
    """linear_act / concat_act / add_n lower on every GPU backend, so a GPU model gets every pass
    (GPT-2's MLP as linear_act; BERT's too, and its embedding sum as add_n), runs whole on the
    device and matches transformers and the CPU."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from gpu_helpers import device_or_none
    from volvox._gpu.devices import GPU_BACKENDS
    from volvox.tasks.generate import Session

    backend = next((b for b in GPU_BACKENDS if device_or_none(b) is not None), None)
    if backend is None:
        pytest.skip("no GPU backend here")
    directory = tmp_path / "model"
    if family == "gpt2":
        from hf_models import build_causal_lm, torch_logits, train_bpe_tokenizer

        vocab = train_bpe_tokenizer(tmp_path / "tokenizer.json")
        model = build_causal_lm(directory, "gpt2", tmp_path / "tokenizer.json", vocab)
        ids = list(range(3, 40))  # (37,): a prefill, which runs on the GPU
        want = torch_logits(model, ids)  # (seq, vocab)
        forward = lambda lm: Session(lm).forward(np.array(ids, np.int32), all_logits=True)  # noqa: E731
        fused = {"linear_act"}
    else:
        from hf_models import build_tiny_bert

        model, tok = build_tiny_bert(directory, ["the cat sat on the mat", "a dog ran to the sea"])
        ids = tok.encode("the cat ran to the sea").ids
        with torch.no_grad():
            want = model(input_ids=torch.tensor([ids])).last_hidden_state[0].numpy()  # (seq, hidden)
        forward = lambda lm: lm.hidden_states(ids)  # noqa: E731
        fused = {"linear_act", "add_n"}
    with volvox.load(directory) as cpu, volvox.load(directory, backend=backend) as gpu:
        assert [name for name, _, _ in gpu.compile_report.steps] == [p for p in PASSES if p not in CPU_ONLY]
        assert fused <= {n.op for n in gpu.graph.nodes}
        assert set(gpu.executor.node_backends().values()) == {backend}, gpu.executor.describe()
        got, on_cpu = forward(gpu), forward(cpu)
        assert gpu.executor.last_backend == backend
    scale = np.abs(want).max()
    assert np.abs(got - want).max() < 1e-4 * scale, family  # transformers
    assert np.abs(got - on_cpu).max() < 1e-5 * scale, family
