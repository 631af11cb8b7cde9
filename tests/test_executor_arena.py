"""The per-op executor's activation arena: outputs bit-identical to the allocating path (every
model family, 1 and 2 threads), views of arena buffers keep them alive, graph outputs never live
in it, a second thread runs without it, and a run no longer allocates the placed intermediates."""

import threading
import tracemalloc

import numpy as np
import pytest

import volvox
from volvox import kernels
from volvox.graph import Graph, Node, TensorSpec
from volvox.runtime.executor import Executor, RunContext
from volvox.tasks import generate
from test_compile import DATA, VISION_MODELS, cached, random_feeds
from tiny_gguf import write_tiny_llama


@pytest.fixture(params=[1, 2], ids=["1thread", "2threads"])
def threads(request):
    """Run the test at 1 and at 2 kernel threads."""
    before = kernels.get_num_threads()
    kernels.set_num_threads(request.param)
    yield request.param
    kernels.set_num_threads(before)


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


def test_smollm2_prefill_same_bits(smollm2_gguf_path, threads):
    """The real SmolLM2 (Q4_1): a 300-token prompt (chunks of 256 and 44), as generate runs it."""
    with volvox.load(smollm2_gguf_path) as lm:
        ids = lm.tokenizer.encode("The history of the city begins with a small settlement on the river. " * 30)[:300]
        assert len(ids) == 300
        on, off = with_and_without_arena(lm.executor, lambda: prefill_and_decode(lm, ids, all_logits=False))
        assert_bits_equal(on, off)


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


def test_bert_same_bits(tmp_path, threads):
    pytest.importorskip("transformers")
    torch = pytest.importorskip("torch")
    import transformers as tf
    from tokenizers import BertWordPieceTokenizer
    from test_wordpiece import with_specials

    texts = ["the cat sat on the mat", "a dog ran to the sea and the cat sat"]
    tok = BertWordPieceTokenizer(lowercase=True)
    tok.train_from_iterator(texts * 5, vocab_size=120, show_progress=False)
    with_specials(tok, template=True)
    tok.save(str(tmp_path / "tokenizer.json"))
    torch.manual_seed(2)
    cfg = tf.BertConfig(vocab_size=tok.get_vocab_size(), hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=64, max_position_embeddings=32)
    tf.BertModel(cfg).eval().save_pretrained(tmp_path)
    with volvox.load(tmp_path) as m:
        assert "add_n" in [n.op for n in m.graph.nodes]
        on, off = with_and_without_arena(m.executor, lambda: [m.embed(t) for t in texts])
        assert_bits_equal(on, off)


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
    g.validate()
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
    g.validate()
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
    rows_out = 4 * (lm.config.vocab_size + lm.config.dim)  # output_norm and lm_head: one row (set at run time)
    data = sum(b for b in plan.allocating.values() if b > 0) + rows_out  # what ops without a slot allocate
    slack = 1024 * len(ex.steps)  # array objects, views and shape tuples (tracemalloc sees them too)
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
    assert run["allocating_ops"]["rope"] == 4 and run["allocating_ops"]["attention"] == 2
    assert 0 < run["arena_bytes"] < run["placed_bytes"]
