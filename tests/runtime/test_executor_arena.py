"""The per-op executor's activation arena: outputs bit-identical to the allocating path (every
model family, 1 and 2 threads), views of arena buffers keep them alive, graph outputs never live
in it, a second thread runs without it, and a run no longer allocates the placed intermediates.
Also the kernels' ``out=`` buffers the ops' ``into`` write through: the allocating call's bits,
and a clear volvox error for a buffer they cannot take."""

import math
import threading
import tracemalloc

import numpy as np
import pytest

import volvox
from volvox import cpu
from volvox.errors import KernelError, ShapeError, VolvoxError
from volvox.ir.graph import Graph, Node, TensorSpec
from volvox.ir.quant_blocks import quantize_ref
from volvox.ops.context import RunContext
from volvox.runtime.executor import Executor
from volvox.tasks import generate
from volvox.tasks.generate import decode_step
from real_models import DATA, VISION_MODELS, cached, random_feeds
from tiny_gguf import write_tiny_llama
from volvox.ops import validate




def with_and_without_arena(executor, run):
    """``run()`` with the arena, then with every op allocating: both results."""
    executor.use_arena = True
    on = run()
    executor.use_arena = False
    try:
        return on, run()
    finally:
        executor.use_arena = True


def assert_bits_equal(on, off):
    """Equal bit for bit, through dicts / tuples / lists of arrays."""
    if isinstance(on, dict):
        assert on.keys() == off.keys()
        for k in on:
            assert_bits_equal(on[k], off[k])
    elif isinstance(on, (tuple, list)):
        assert len(on) == len(off)
        for a, b in zip(on, off):
            assert_bits_equal(a, b)
    else:
        assert on.dtype == off.dtype and on.shape == off.shape
        np.testing.assert_array_equal(on.view(np.uint8), off.view(np.uint8))


def placed_ops(executor) -> set[str]:
    """The ops of the nodes that write into the arena under any of the executor's plans."""
    ops = {n.id: n.op for n in executor.graph.nodes}
    return {ops[n] for sig in executor._plans.values() if sig.plan for n in sig.plan.slots}


def prefill_and_decode(lm, ids, all_logits: bool = True):
    """Logits of the prompt (every position, chunked prefill; or the last, as generate asks), then
    of two decode steps; and of the last position from a fresh session."""
    s = lm.new_session()
    out = [s.forward(ids, all_logits=all_logits)]
    out += [s.forward([int(np.argmax(out[-1][-1]))]) for _ in range(2)]
    return out + [lm.new_session().forward(ids)] if all_logits else out


@pytest.mark.parametrize("qtype", ["f32", "q8_0", "q4_1"])
def test_tiny_llama_prefill_chunks_same_bits(tmp_path, monkeypatch, threads, qtype):
    monkeypatch.setattr(generate, "PREFILL_CHUNK", 16)  # 40 tokens: chunks of 16, 16, 8
    path = write_tiny_llama(tmp_path / "t.gguf", qtype=qtype, embed_qtype="q8_0" if qtype != "f32" else "f32")
    ids = [int(i) for i in np.random.default_rng(3).integers(0, 200, 40)]
    with volvox.load(path) as lm:
        on, off = with_and_without_arena(lm.executor, lambda: prefill_and_decode(lm, ids))
        assert_bits_equal(on, off)
        plans = lm.executor._plans
        assert {k[0] for k in plans} >= {(16,), (8,)}  # one plan per chunk shape
        assert all(sig.plan.slots for sig in plans.values())
        assert {"embedding", "rope", "attention", "swiglu", "rms_norm", "linear_split"} <= placed_ops(lm.executor)


def test_smollm2_prefill_same_bits(smollm2_gguf_path, threads):
    """The real SmolLM2 (Q4_1): a 300-token prompt (chunks of 256 and 44), as generate runs it."""
    with volvox.load(smollm2_gguf_path) as lm:
        ids = lm.tokenizer.encode("The history of the city begins with a small settlement on the river. " * 30)[:300]
        assert len(ids) == 300
        on, off = with_and_without_arena(lm.executor, lambda: prefill_and_decode(lm, ids, all_logits=False))
        assert_bits_equal(on, off)
        assert {"embedding", "rope", "attention", "swiglu"} <= placed_ops(lm.executor)


def test_gpt2_same_bits(tmp_path, threads):
    pytest.importorskip("transformers")
    from hf_models import build_causal_lm, train_bpe_tokenizer

    vocab = train_bpe_tokenizer(tmp_path / "tokenizer.json")
    build_causal_lm(tmp_path / "model", "gpt2", tmp_path / "tokenizer.json", vocab)
    with volvox.load(tmp_path / "model") as lm:
        assert "linear_act" in [n.op for n in lm.graph.nodes]
        ids = [5, 17, 99, 3, 250, 42, 7, 1, 300, 12]
        on, off = with_and_without_arena(lm.executor, lambda: prefill_and_decode(lm, ids))
        assert_bits_equal(on, off)
        assert {"embedding", "layer_norm", "attention", "linear_act"} <= placed_ops(lm.executor)


def test_bert_same_bits(tmp_path, threads):
    pytest.importorskip("transformers")
    pytest.importorskip("torch")
    from hf_models import build_tiny_bert

    texts = ["the cat sat on the mat", "a dog ran to the sea and the cat sat"]
    build_tiny_bert(tmp_path, texts)
    with volvox.load(tmp_path) as m:
        assert "add_n" in [n.op for n in m.graph.nodes]
        on, off = with_and_without_arena(m.executor, lambda: [m.embed(t) for t in texts])
        assert_bits_equal(on, off)
        assert {"embedding", "layer_norm", "attention"} <= placed_ops(m.executor)  # non-causal attention: copied in


@pytest.mark.parametrize("name", ["tiny.tflite", "tiny.onnx"] + sorted(VISION_MODELS))
def test_vision_per_op_path_same_bits(name, threads):
    """Vision graphs through the per-op executor (what profiling, reference-free debugging and
    graphs without a native plan run): same bits with the arena."""
    if not name.startswith("tiny."):
        cached(name)  # skips unless installed or cached
    with volvox.load(DATA / name if name.startswith("tiny.") else name) as m:
        feeds = random_feeds(m, VISION_MODELS.get(name, {}))
        on, off = with_and_without_arena(m.executor, lambda: m.executor.run(RunContext(), feeds))
        assert_bits_equal(on, off)
        if any(n.op == "conv2d" for n in m.executor.graph.nodes):
            assert "conv2d" in placed_ops(m.executor)


def test_batched_decode_same_bits(tmp_path, threads):
    """A packed decode step of three sequences (attention runs per sequence, copied into its slot)."""
    path = write_tiny_llama(tmp_path / "t.gguf", qtype="q8_0")
    prompts = [[3, 1, 4, 1, 5], [9, 2, 6, 5, 3, 5, 8, 9], [7, 9]]

    def run():
        sessions = [lm.new_session() for _ in prompts]
        for s, ids in zip(sessions, prompts):
            s.forward(ids)
        return [decode_step(lm, sessions, [11, 22, 33]), decode_step(lm, sessions, [44, 55, 66])]

    with volvox.load(path) as lm:
        on, off = with_and_without_arena(lm.executor, run)
        assert_bits_equal(on, off)
        assert "attention" in placed_ops(lm.executor)


def mixed_graph():
    """rope with LLaMA-3.1 scaling (through its reference) -> silu -> layer_norm -> attention with
    no KV cache -> add: the writers' other paths."""
    x, pos = TensorSpec("x", ("n", 8), "float32"), TensorSpec("pos", ("n",), "int32")
    w, b = TensorSpec("w", (8,), "float32"), TensorSpec("b", (8,), "float32")
    llama3 = {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_context": 16}
    nodes = [Node("r", "rope", {"x": "x", "positions": "pos"}, {"y": "r"}, {"head_dim": 4, "llama3": llama3}),
             Node("s", "silu", {"x": "r"}, {"y": "s"}),
             Node("ln", "layer_norm", {"x": "s", "weight": "w", "bias": "b"}, {"y": "ln"}),
             Node("a", "attention", {"q": "ln", "k": "s", "v": "r"}, {"y": "a"},
                  {"n_heads": 2, "n_kv_heads": 2, "head_dim": 4}),
             Node("out", "add", {"a": "a", "b": "r"}, {"y": "out"})]
    g = Graph([x, pos], {w.name: w, b.name: b}, nodes, ["out"])
    validate(g)
    return g


def test_rope_silu_layer_norm_attention_into_same_bits(threads):
    rng = np.random.default_rng(4)
    weights = {"w": rng.standard_normal(8).astype(np.float32), "b": rng.standard_normal(8).astype(np.float32)}
    ex = Executor(mixed_graph(), weights)
    feeds = {"x": rng.standard_normal((11, 8)).astype(np.float32), "pos": np.arange(3, 14, dtype=np.int32)}
    on, off = with_and_without_arena(ex, lambda: ex.run(RunContext(), feeds))
    assert_bits_equal(on, off)
    assert set(ex.arena_plan(ex.check_feeds(feeds)).slots) == {"r", "s", "ln", "a"}
    want = Executor(mixed_graph(), weights, reference=True).run(RunContext(), feeds)["out"]
    np.testing.assert_allclose(on["out"], want, rtol=1e-4, atol=1e-5)  # and still the numpy oracle's result


def view_graph():
    """a = relu(x) is read through v = slice(a) (a view, from an op without ``into``) after
    b = sigmoid(x) is written: b must not take a's bytes."""
    x = TensorSpec("x", ("n", 8), "float32")
    nodes = [Node("a", "relu", {"x": "x"}, {"y": "a"}),
             Node("v", "slice", {"x": "a"}, {"y": "v"}, {"axes": [0], "starts": [0], "ends": [1 << 30]}),
             Node("b", "sigmoid", {"x": "x"}, {"y": "b"}),
             Node("c", "relu", {"x": "b"}, {"y": "c"}),
             Node("out", "add", {"a": "v", "b": "c"}, {"y": "out"})]
    g = Graph([x], {}, nodes, ["out"])
    validate(g)
    return g


def test_views_of_arena_buffers_keep_them_alive():
    ex = Executor(view_graph(), {})
    x = np.random.default_rng(0).standard_normal((4, 8)).astype(np.float32)
    want = np.maximum(x, 0) + np.maximum(ex.steps[2].fn(None, {}, x), 0)
    assert np.shares_memory(ex.steps[1].fn(None, ex.steps[1].params, x), x)  # slice returns a view here
    np.testing.assert_array_equal(ex.run(RunContext(), {"x": x})["out"], want)
    plan = ex.arena_plan([x])
    assert set(plan.slots) == {"a", "b", "c"}  # out is the graph output: allocated
    life = {b.name: (b.first, b.last) for b in plan.buffers}
    assert life["a"] == (0, 4)  # read through v by the last node
    offsets = {node: slot[0] for node, slot in plan.slots.items()}
    assert offsets["a"] not in (offsets["b"], offsets["c"])


def test_graph_outputs_are_never_arena_views():
    # out1 is a view (reshape) of r, out2 an add: neither may live in the arena
    x = TensorSpec("x", ("n", 4), "float32")
    nodes = [Node("r", "relu", {"x": "x"}, {"y": "r"}),
             Node("s", "sigmoid", {"x": "r"}, {"y": "s"}),
             Node("out1", "reshape", {"x": "r"}, {"y": "out1"}, {"shape": [-1]}),
             Node("out2", "add", {"a": "s", "b": "r"}, {"y": "out2"})]
    g = Graph([x], {}, nodes, ["out1", "out2"])
    validate(g)
    ex = Executor(g, {})
    x1, x2 = np.random.default_rng(1).standard_normal((2, 3, 4)).astype(np.float32)
    first = ex.run(RunContext(), {"x": x1})
    kept = {k: v.copy() for k, v in first.items()}
    second = ex.run(RunContext(), {"x": x2})
    assert_bits_equal(first, kept)  # the second run changed nothing the caller holds
    for out in list(first.values()) + list(second.values()):
        assert not np.shares_memory(out, ex._arena)
    assert set(ex.arena_plan([x1]).slots) == {"s"}


def test_arena_grows_and_views_follow(tmp_path):
    path = write_tiny_llama(tmp_path / "t.gguf")
    with volvox.load(path) as lm:
        small = lm.logits([1, 2, 3])
        arena = lm.executor._arena
        big = lm.logits(list(range(1, 60)))
        assert lm.executor._arena.nbytes > arena.nbytes  # grown for the longer prompt
        assert_bits_equal(lm.logits([1, 2, 3]), small)  # the short plan's views were cut again
        lm.executor.use_arena = False
        assert_bits_equal(lm.logits(list(range(1, 60))), big)


def test_busy_arena_runs_without_it(tmp_path):
    path = write_tiny_llama(tmp_path / "t.gguf")
    with volvox.load(path) as lm:
        ids = [4, 8, 15, 16, 23, 42]
        want = lm.logits(ids)
        ex = lm.executor
        before = {k: sig.arena for k, sig in ex._plans.items()}
        with ex._arena_lock:  # another thread holds the arena
            ex._plans.clear()
            got = lm.logits(ids)
            assert not ex._plans  # planned nothing, used nothing
        assert_bits_equal(got, want)
        assert before


def test_two_threads_share_one_model(tmp_path):
    path = write_tiny_llama(tmp_path / "t.gguf", n_layers=3)
    rng = np.random.default_rng(5)
    prompts = [[int(i) for i in rng.integers(0, 200, n)] for n in (9, 23, 9, 31, 17, 23)]
    with volvox.load(path) as lm:
        lm.executor.use_arena = False
        want = [lm.logits(p) for p in prompts]
        lm.executor.use_arena = True
        got: dict[int, list] = {0: [], 1: []}
        errors = []

        def worker(k):
            try:
                for _ in range(4):
                    got[k].append([lm.logits(p) for p in prompts])
            except Exception as e:  # pragma: no cover - reported below
                errors.append(e)

        workers = [threading.Thread(target=worker, args=(k,)) for k in (0, 1)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        assert not errors
        for rounds in got.values():
            for outs in rounds:
                assert_bits_equal(outs, want)


def test_profile_and_reference_modes(tmp_path):
    path = write_tiny_llama(tmp_path / "t.gguf")
    ids = [3, 1, 4, 1, 5, 9, 2, 6]
    with volvox.load(path) as plain, volvox.load(path, profile=True) as prof, volvox.load(path, reference=True) as ref:
        assert_bits_equal(prof.logits(ids), plain.logits(ids))
        assert prof.executor._plans and prof.profile.runs == 1  # profiling times the arena run
        assert not ref.executor.writers  # the oracle allocates every output
        ref.logits(ids)
        assert not ref.executor._plans


def bytes_left_per_step(executor, run):
    """Bytes that each step leaves allocated (its outputs; traced by tracemalloc, which numpy
    reports its data allocations to), summed over one ``run()``."""
    total = [0]
    steps = executor.steps
    originals = [(st.fn, st.into) for st in steps]

    def traced(f):
        def call(*args):
            before = tracemalloc.get_traced_memory()[0]
            out = f(*args)
            total[0] += max(0, tracemalloc.get_traced_memory()[0] - before)
            return out
        return call

    for st in steps:
        st.fn, st.into = traced(st.fn), st.into and traced(st.into)
    tracemalloc.start()
    try:
        run()
    finally:
        tracemalloc.stop()
        for st, (fn, into) in zip(steps, originals):
            st.fn, st.into = fn, into
    return total[0]


def test_a_run_allocates_only_what_the_arena_does_not_hold(tmp_path):
    path = write_tiny_llama(tmp_path / "t.gguf", n_layers=4, qtype="q8_0", embed_qtype="q8_0")
    ids = [int(i) for i in np.random.default_rng(7).integers(0, 200, 64)]
    with volvox.load(path) as lm:
        ex = lm.executor
        lm.new_session().forward(ids)  # plans and sizes the arena
        plan = ex.arena_plan(ex.check_feeds({"tokens": np.array(ids, np.int32), "positions": np.arange(64, dtype=np.int32)}))
        left = bytes_left_per_step(ex, lambda: lm.new_session().forward(ids))
        ex.use_arena = False
        left_without = bytes_left_per_step(ex, lambda: lm.new_session().forward(ids))
    rows_out = 4 * (lm.config.vocab_size + lm.graph.weights["output_norm.weight"].shape[0])  # output_norm and lm_head: one row
    assert all(b < 0 for b in plan.allocating.values())  # nothing else allocates: every shape-fixed node is placed
    data = rows_out  # what ops without a slot allocate
    slack = 256 * len(ex.steps)  # array objects, views and shape tuples (tracemalloc sees them too; ~90 B a step)
    assert plan.placed_bytes > data + slack  # the arena holds most of a run's bytes
    assert left <= data + slack
    assert left_without >= data + plan.placed_bytes  # the allocating path fails the bound above


def test_info_plan_counts_placed_and_allocating_nodes(tmp_path, capsys):
    import json

    from volvox.cli import main

    path = write_tiny_llama(tmp_path / "t.gguf", n_layers=2)
    assert main(["info", str(path), "--plan", "--dims", "seq=16"]) == 0
    run = json.loads(capsys.readouterr().out)["model"]["plan"]["executor"]
    assert run["placed_nodes"] > run["allocating_nodes"] > 0 and run["placed_bytes"] > run["allocated_bytes"]
    assert run["allocating_ops"] == {"rms_norm": 1, "linear": 1}  # only the last row's norm and the head
    assert 0 < run["arena_bytes"] < run["placed_bytes"]


# ------------------------------------------------------------------ the kernels' out= buffers
def _conv_case(rng, depthwise: bool, k: int):
    c = 8
    x = rng.standard_normal((1, 9, 7, c)).astype(np.float32)  # (N, H, W, C)
    w = rng.standard_normal((c, k, k, 1 if depthwise else c)).astype(np.float32)  # OHWI
    kw = dict(bias=rng.standard_normal(c).astype(np.float32), strides=(2, 1), pads=(k // 2,) * 4,
              groups=c if depthwise else 1, activation="relu6")
    return (lambda out=None: cpu.conv2d(x, w, out=out, **kw)), x


def _kernel_cases():
    """name -> (call(out=None), a C-contiguous float32 input the kernel reads as it is, at least as
    large as the result, or None): every kernel whose op writes through ``out=``."""
    rng = np.random.default_rng(11)
    x = rng.standard_normal((6, 32)).astype(np.float32)  # (rows, 32)
    wide = rng.standard_normal((6, 64)).astype(np.float32)  # (rows, 2 * 32) = [gate | up]
    pos = np.arange(5, 11)
    table = rng.standard_normal((50, 64)).astype(np.float32)
    ids = np.array([3, 0, 49, 7, 7], np.int64)
    qtable = quantize_ref(table, "q4_1")
    w, b = rng.standard_normal(32).astype(np.float32), rng.standard_normal(32).astype(np.float32)
    kc = rng.standard_normal((2, 16, 8)).astype(np.float32)  # (n_kv_heads, capacity, head_dim)
    vc = rng.standard_normal((2, 16, 8)).astype(np.float32)
    cases = {
        "rope": (lambda out=None: cpu.rope(x, pos, 8, 6, 10000.0, 2.0, False, out=out), x),
        "rope_interleaved_strided": (lambda out=None: cpu.rope(wide[:, ::2], pos, 8, interleaved=True, out=out), None),
        "swiglu": (lambda out=None: cpu.swiglu(wide, out=out), wide),
        "silu": (lambda out=None: cpu.silu(x, out=out), None),  # may write over x: test_silu_out_may_be_x
        "silu_3d": (lambda out=None: cpu.silu(wide.reshape(3, 2, 64), out=out), None),
        "attention": (lambda out=None: cpu.attention(x, kc, vc, 4, 4, 0.35, out=out), x),
        "attention_window": (lambda out=None: cpu.attention(x, kc, vc, 4, 4, 0.35, window=3, out=out), x),
        "embedding": (lambda out=None: cpu.embedding(table, ids, out=out), table),
        "embedding_q4_1": (lambda out=None: cpu.embedding(qtable, ids.astype(np.int32), out=out), None),
        "layer_norm": (lambda out=None: cpu.layer_norm(x, w, b, 1e-5, out=out), x),
        "layer_norm_vector": (lambda out=None: cpu.layer_norm(x[2], w, None, 1e-6, out=out), x[2]),
    }
    for name, depthwise, k in (("conv2d", False, 3), ("conv2d_1x1", False, 1), ("conv2d_depthwise", True, 3)):
        cases[name] = _conv_case(rng, depthwise, k)
    return cases


KERNEL_CASES = sorted(_kernel_cases())


@pytest.mark.parametrize("name", KERNEL_CASES)
def test_kernel_out_is_the_allocating_result(name):
    call, _ = _kernel_cases()[name]
    want = call()
    out = np.full(want.shape, np.nan, np.float32)  # a slot never written would stay NaN
    got = call(out=out)
    assert got is out
    assert_bits_equal(out, want)


@pytest.mark.parametrize("name", KERNEL_CASES)
def test_kernel_out_refuses_a_bad_buffer(name):
    call, source = _kernel_cases()[name]
    want = call()
    wrong_shape = np.empty(want.shape[:-1] + (want.shape[-1] + 1,), np.float32)
    strided = np.empty(want.shape[:-1] + (2 * want.shape[-1],), np.float32)[..., ::2]
    read_only = np.empty(want.shape, np.float32)
    read_only.flags.writeable = False
    for bad, error in ((wrong_shape, ShapeError), (np.empty(want.shape, np.float64), KernelError),
                       (strided, KernelError), (read_only, KernelError), (want.tolist(), KernelError)):
        with pytest.raises(error, match="out"):
            call(out=bad)
    if source is not None:  # a buffer over the last bytes of the input the kernel reads
        with pytest.raises(KernelError, match="overlap"):
            call(out=source.reshape(-1)[source.size - want.size:].reshape(want.shape))


def test_silu_out_may_be_x():
    buf = np.random.default_rng(2).standard_normal(208).astype(np.float32)
    x = buf[:200].reshape(5, 40)
    want = cpu.silu(x)
    with pytest.raises(KernelError, match="overlap"):  # x shifted by two values: not elementwise in place
        cpu.silu(x, out=buf[8:].reshape(5, 40))
    assert cpu.silu(x, out=x) is x
    assert_bits_equal(x, want)


def test_embedding_out_untouched_on_a_bad_id():
    table = np.ones((4, 8), np.float32)
    out = np.zeros((2, 8), np.float32)
    with pytest.raises(KernelError, match="id 9"):
        cpu.embedding(table, np.array([1, 9]), out=out)
    assert not out.any()
    assert issubclass(KernelError, VolvoxError)


def test_lora_step_logits_and_dlogits_live_in_the_arena(tmp_path):
    # The joint graph's loss and weight gradients (graph outputs) read the logits and the adapters'
    # inputs; their ops are fresh (no view of an input), so those buffers are still placed: a second
    # step allocates no logits, and the arena leaves every result bit for bit as the allocating path.
    from volvox.architectures.lora import LoraConfig, add_lora, find_sites
    from volvox.train.finetune import Trainer
    from volvox.train.graph import trainable_graph, training_graph
    from volvox.train.lora import init_adapters
    from volvox.train.optim import Parameters

    path = write_tiny_llama(tmp_path / "t.gguf", n_layers=2, qtype="q4_1", embed_qtype="q8_0")
    tg = training_graph(path)
    try:
        config = LoraConfig(r=4, alpha=8.0, targets=("q", "v", "down"))
        sites = find_sites(tg.graph, config)
        adapters = {n: a + 0.01 for n, a in init_adapters(sites, config).items()}  # B != 0: every gradient flows
        graph, weights = add_lora(tg.graph, tg.weights, sites, adapters, config.scale)
        graph, frozen = trainable_graph(graph, weights, list(adapters))
        params = Parameters(adapters)
        trainer = Trainer(graph, frozen, params)
        rng = np.random.default_rng(3)
        vocab = graph.weights["token_embd.weight"].shape[0]
        tokens, labels = (rng.integers(0, vocab, (2, 32)).astype(np.int32) for _ in range(2))
        feeds = {"tokens": tokens, "labels": labels}
        ex = trainer.backward
        plan = ex.arena_plan(ex.check_feeds({**feeds, **params.views}))
        ops = {n.id: n.op for n in trainer.joint.nodes}
        logits_bytes = 2 * 32 * vocab * 4
        assert {"linear", "cross_entropy_grad"} <= {ops[n] for n, s in plan.slots.items() if math.prod(s[1]) * 4 == logits_bytes}
        assert max(plan.allocating.values()) < logits_bytes  # nothing outside the arena is as large as the logits
        run = lambda: trainer.loss_and_grads(feeds)  # noqa: E731
        first = run()
        left = bytes_left_per_step(ex, run)
        ex.use_arena = False
        left_without = bytes_left_per_step(ex, run)
        on, off = with_and_without_arena(ex, run)
    finally:
        tg.close()
    slack = 256 * len(ex.steps)  # array objects, views and shape tuples (tracemalloc sees them too)
    assert left <= sum(b for b in plan.allocating.values() if b > 0) + slack  # only what the arena does not hold
    assert left_without >= left + 2 * logits_bytes  # the allocating path: the logits and dlogits afresh
    loss_and_grads = lambda r: (np.array([r[0]]), r[1])  # noqa: E731
    assert_bits_equal(loss_and_grads(first), loss_and_grads(on))  # a second step over the same arena
    assert_bits_equal(loss_and_grads(on), loss_and_grads(off))
