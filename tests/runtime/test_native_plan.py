"""The token step plan (runtime/plan.py): the same logits as the per-op executor,
bit for bit, and a clean fallback to it whenever the plan cannot run."""

import contextlib

import numpy as np
import pytest

import volvox
from hf_models import build_causal_lm, train_bpe_tokenizer
from tiny_gguf import write_tiny_llama
from volvox import cpu

PROMPT, DECODE = [5, 17, 99, 3], [42, 7, 200, 11, 250, 64]


@contextlib.contextmanager
def per_op_executor(lm):
    """Run ``lm`` without its decode plan inside the block."""
    plan, lm._decode_plan = lm._decode_plan, False
    try:
        yield
    finally:
        lm._decode_plan = plan


def decode_both_ways(lm, prompt=PROMPT, tokens=DECODE):
    """(native logits, per-op logits, native session, per-op session) for the same tokens; the
    plan runs every token on all of cpu.get_num_threads() (no one-thread start or back-off)."""
    native, per_op = lm.new_session(), lm.new_session()
    native.forward(prompt)
    plan = lm._native_decode_plan()
    if plan is not None:
        plan.pacer.solo_runs, plan.pacer.pace, plan.pacer.restart = 0, lambda threads, seconds: None, lambda: None
    with per_op_executor(lm):
        per_op.forward(prompt)
    got, want = [], []
    for t in tokens:
        got.append(native.forward([t]))
        with per_op_executor(lm):
            want.append(per_op.forward([t]))
    return np.concatenate(got), np.concatenate(want), native, per_op


@pytest.mark.parametrize("qtype, embed_qtype, tied", [
    ("f32", "f32", True), ("f16", "f16", False), ("q8_0", "q8_0", True), ("q4_0", "q8_0", False),
    ("q4_1", "q8_0", True), ("q4_k", "q6_k", False), ("q6_k", "q4_k", True),
])
@pytest.mark.parametrize("threads", [1, 2])
def test_plan_equals_per_op_executor_bit_for_bit(tmp_path, qtype, embed_qtype, tied, threads):
    dim, ffn = (256, 512) if "k" in qtype + embed_qtype else (64, 96)
    path = write_tiny_llama(tmp_path / "m.gguf", dim=dim, ffn=ffn, qtype=qtype, embed_qtype=embed_qtype, tied=tied)
    with volvox.load(path, threads=threads) as lm:
        got, want, native, per_op = decode_both_ways(lm)
        assert lm._decode_plan.runs == len(DECODE)
        assert np.array_equal(got, want)
        end = len(PROMPT) + len(DECODE)
        for layer in range(lm.config.n_layers):  # the plan wrote the same keys and values into the cache
            assert np.array_equal(native.ctx.kv.keys[layer][:, :end], per_op.ctx.kv.keys[layer][:, :end])
            assert np.array_equal(native.ctx.kv.values[layer][:, :end], per_op.ctx.kv.values[layer][:, :end])


def test_plan_gqa_shapes_and_arena(tmp_path):
    for n_heads, n_kv in ((4, 4), (4, 1), (8, 2)):
        path = write_tiny_llama(tmp_path / f"h{n_heads}-{n_kv}.gguf", n_heads=n_heads, n_kv_heads=n_kv, n_layers=3)
        with volvox.load(path) as lm:
            got, want, _, _ = decode_both_ways(lm)
            assert np.array_equal(got, want)
            plan = lm._decode_plan
            naive = sum(4 * int(np.prod([d if isinstance(d, int) else 1 for d in lm.graph.specs[o].shape]))
                        for n in lm.graph.nodes for o in n.outputs.values())
            assert plan.arena_bytes < naive / 4  # slots are reused once their last reader ran


def hf_model(tmp_path, kind, **kw):
    """A tiny random transformers checkpoint folder (no download)."""
    tokenizer = tmp_path / "tokenizer.json"
    vocab = train_bpe_tokenizer(tokenizer)
    directory = tmp_path / kind
    build_causal_lm(directory, kind, tokenizer, vocab, **kw)
    return directory


@pytest.mark.parametrize("kind, kw", [("mistral", dict(sliding_window=3)), ("qwen2", {}),
                                      ("llama", dict(attention_bias=True, mlp_bias=True))])
def test_hf_decoders_with_windows_and_biases_use_the_plan(tmp_path, kind, kw):
    with volvox.load(hf_model(tmp_path, kind, **kw)) as lm:
        got, want, _, _ = decode_both_ways(lm, prompt=[1, 2, 3], tokens=[4, 5, 6, 7, 8])
        assert lm._decode_plan and lm._decode_plan.runs == 5
        assert np.array_equal(got, want)


@pytest.mark.parametrize("activation", ["gelu_new", "gelu"])
def test_gpt2_uses_the_plan(tmp_path, activation):
    """LayerNorm, learned positions, biases, fused linear + GELU (tanh or exact)."""
    with volvox.load(hf_model(tmp_path, "gpt2", activation_function=activation)) as lm:
        got, want, _, _ = decode_both_ways(lm, prompt=[1, 2, 3], tokens=[4, 5, 6, 7])
        assert lm._decode_plan and lm._decode_plan.runs == 4
        assert np.array_equal(got, want)
        near_end = lm.new_session()  # positions past the learned table: the per-op path raises its error
        near_end.ctx.pos = lm._decode_plan.max_positions
        with pytest.raises(volvox.errors.VolvoxError):
            near_end.forward([1])


def test_gpt_neo_local_attention_uses_the_plan(tmp_path):
    with volvox.load(hf_model(tmp_path, "gpt_neo", window_size=3)) as lm:
        got, want, _, _ = decode_both_ways(lm, prompt=[1, 2, 3], tokens=[4, 5, 6, 7])
        assert lm._decode_plan and lm._decode_plan.runs == 4
        assert np.array_equal(got, want)


def test_graphs_the_plan_does_not_lower_keep_the_per_op_executor(tmp_path):
    llama3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
              "original_max_position_embeddings": 16}
    with volvox.load(hf_model(tmp_path, "llama", rope_scaling=llama3)) as lm:  # llama3 RoPE: not lowered
        assert lm._native_decode_plan() is None
        assert len(lm.generate([1, 2, 3], max_new_tokens=3)) > 0
    path = write_tiny_llama(tmp_path / "m.gguf")
    with volvox.load(path, reference=True) as lm:  # the oracle path never takes native shortcuts
        assert lm._native_decode_plan() is None


def test_busy_plan_or_more_threads_fall_back_with_the_same_logits(tmp_path):
    path = write_tiny_llama(tmp_path / "m.gguf")
    with volvox.load(path) as lm:
        a, b = lm.new_session(), lm.new_session()
        a.forward(PROMPT)
        b.forward(PROMPT)
        plan = lm._native_decode_plan()
        want = a.forward([9])
        with plan._lock:  # another thread is inside the plan: this call runs per op
            got = b.forward([9])
        assert plan.runs == 1 and np.array_equal(got, want)
        before = cpu.get_num_threads()
        try:
            cpu.set_num_threads(plan.threads + 1)  # more threads than the plan has scratch for
            got = b.forward([10])
        finally:
            cpu.set_num_threads(before)
        assert plan.runs == 1 and np.array_equal(got, a.forward([10]))


def test_a_stalled_team_sends_the_next_tokens_to_one_thread(tmp_path):
    """The decode plan paces its team as the vision plans do (runtime/pacing.py): the first
    tokens run on one thread, and a team token slower than JITTER x those sends the next ones
    to one thread; logits stay the per-op executor's throughout."""
    from volvox.runtime.pacing import BACKOFF_RUNS, SOLO_FIRST
    path = write_tiny_llama(tmp_path / "m.gguf")
    with volvox.load(path, threads=2) as lm:
        native, per_op = lm.new_session(), lm.new_session()
        native.forward(PROMPT)
        with per_op_executor(lm):
            per_op.forward(PROMPT)
        pacer = lm._native_decode_plan().pacer
        tokens = list(range(20, 20 + SOLO_FIRST + 3))
        for i, t in enumerate(tokens):
            if i == SOLO_FIRST:
                assert pacer.solo_runs == 0
                pacer._fastest = [1e-9, 1e-9]  # any team token is now a stall
            got = native.forward([t])
            with per_op_executor(lm):
                assert np.array_equal(got, per_op.forward([t]))
        # token SOLO_FIRST woke the team (not judged), the next stalled, the last ran on one thread
        assert pacer.solo_runs == BACKOFF_RUNS[0] - 1


def test_a_new_context_restarts_the_pacer(tmp_path):
    """A token step that does not follow the last one (a new prompt) is timed afresh on one thread
    first: its step time differs from the old context's, which must not read as a stall."""
    from volvox.runtime.pacing import SOLO_FIRST

    path = write_tiny_llama(tmp_path / "m.gguf")
    with volvox.load(path, threads=2) as lm:
        s = lm.new_session()
        s.forward(PROMPT)
        pacer = lm._native_decode_plan().pacer
        s.forward([20])
        assert pacer.solo_runs == SOLO_FIRST - 1  # the first token step: measured on one thread
        pacer.solo_runs, pacer._fastest = 0, [1e-3, 1e-3]  # as after a period of team runs
        s2 = lm.new_session()
        s2.forward(PROMPT * 20)
        s2.forward([7])  # far from the last token step's position: measured afresh
        assert pacer.solo_runs == SOLO_FIRST - 1
        s2.forward([8])  # the next position: the same period goes on
        assert pacer.solo_runs == SOLO_FIRST - 2
        pacer.solo_runs = 0
        s3 = lm.new_session()
        s3.forward(PROMPT * 20 + [1, 2, 3])
        s3.forward([9])  # another session at a similar position (a server's turns): the same period still
        assert pacer.solo_runs == 0


def test_profiled_decode_reports_every_node(tmp_path):
    path = write_tiny_llama(tmp_path / "m.gguf")
    with volvox.load(path, profile=True) as lm:
        lm.generate([5, 6, 7], max_new_tokens=4)
        assert lm._decode_plan.runs == 3
        prof = lm.profile
        assert prof.runs == 4  # prefill (per op) + 3 decode steps (native)
        assert {"linear", "attention", "rms_norm", "embedding"} <= set(prof.by_op)
        ops = {n.id: n.op for n in lm.graph.nodes}
        assert all(calls == (1 if ops[node] == "output_rows" else 4)  # a view, not a step, in the plan
                   for node, (calls, _) in prof.by_node.items())


def test_closing_the_model_drops_the_plan(tmp_path):
    path = write_tiny_llama(tmp_path / "m.gguf")
    lm = volvox.load(path)
    s = lm.new_session()
    s.forward(PROMPT)
    s.forward([1])
    assert lm._decode_plan
    lm.close()
    assert lm._decode_plan is False
    with pytest.raises(volvox.errors.ClosedError):
        s.forward([2])


def test_split_outputs_listed_in_any_order(tmp_path):
    """linear_split's column blocks are placed in the op's port order, not the node's dict order."""
    with volvox.load(write_tiny_llama(tmp_path / "m.gguf")) as lm:
        splits = [n for n in lm.graph.nodes if n.op == "linear_split"]
        assert splits
        for node in splits:
            node.outputs = dict(reversed(list(node.outputs.items())))
        got, want, _, _ = decode_both_ways(lm)
        assert lm._decode_plan.runs == len(DECODE)
        assert np.array_equal(got, want)
