"""LLM decode on every available GPU backend: greedy generation equal to the CPU token for token
(tiny random LLaMA, GPT-2 and Qwen2), one submit and a 4-byte download per decode token with the
KV cache staying on the device, the host cache downloaded only when read, and the device token
pickers (argmax.wgsl, sample.wgsl) against a numpy transcription of their documented algorithm."""

from __future__ import annotations

import functools
import os
import subprocess
import sys

import numpy as np
import pytest

from gpu_helpers import BACKENDS, GPU_BACKENDS, device_or_skip, nmse
from hf_models import build_causal_lm, torch_greedy, train_bpe_tokenizer
from tiny_gguf import write_tiny_llama
import volvox
from volvox.runtime.gpu_executor import TokenPick
from volvox.tasks.generate import Session, generate_batch
from volvox.tasks.sampling import Sampler, SamplingParams


# ------------------------------------------------------------------------------ models
@pytest.fixture(scope="module")
def tiny_llama(tmp_path_factory):
    path = tmp_path_factory.mktemp("decode") / "tiny.gguf"
    write_tiny_llama(path, n_layers=2, dim=64, n_heads=4, n_kv_heads=2, ffn=96, qtype="f32", context=96)
    return path


@pytest.fixture(scope="module")
def hf_models(tmp_path_factory):
    """family -> (folder, the transformers model) for tiny random GPT-2, Qwen2 and Mistral (a sliding
    window of 6 positions, so decoding passes it) checkpoints."""
    root = tmp_path_factory.mktemp("hf_decode")
    vocab = train_bpe_tokenizer(root / "tokenizer.json", vocab_size=300)
    out = {}
    for kind, kw in (("gpt2", {}), ("qwen2", {}), ("mistral", {"sliding_window": 6})):
        folder = root / kind
        folder.mkdir()
        out[kind] = folder, build_causal_lm(folder, kind, root / "tokenizer.json", vocab, seed=1, **kw)
    return out


def _pair(path, backend):
    """(CPU model, the same compiled graph on the session's shared ``backend`` device)."""
    device = device_or_skip(backend)
    cpu = volvox.load(path)
    weights = {name: w for (_, w), name in zip(cpu.executor.weight_slots, cpu.graph.weights)}
    gpu = type(cpu)(cpu.graph, weights, cpu.metadata, cpu.source, cpu.config, cpu.tokenizer, optimize=False,
                    device=device)
    gpu._closers.clear()  # the device is shared by the whole test session
    return cpu, gpu


def _tokens(lm, ids, n, **sampling) -> list[int]:
    """n tokens from a fresh session: ``ids`` prefilled, then one token per step (Session.next_token)."""
    sess, sampler = Session(lm), Sampler(SamplingParams(**sampling))
    out = [sess.next_token(ids, sampler)]
    while len(out) < n:
        out.append(sess.next_token([out[-1]], sampler))
    return out


# ------------------------------------------------------------------------------ greedy = CPU
@BACKENDS
def test_llama_greedy_decode_equals_cpu(tiny_llama, backend):
    cpu, gpu = _pair(tiny_llama, backend)
    assert set(gpu.executor.node_backends().values()) == {backend}, gpu.executor.placement
    ids = list(range(5, 19))
    want = _tokens(cpu, ids, 24)
    assert _tokens(gpu, ids, 24) == want
    assert gpu.executor.last_backend == backend  # the decode steps ran on the device
    ref = _tokens(volvox.load(tiny_llama, reference=True), ids, 24)  # the numpy oracle
    assert want == ref
    text = gpu.generate(ids, max_new_tokens=10)
    assert text == cpu.generate(ids, max_new_tokens=10)


@BACKENDS
@pytest.mark.parametrize("family", ["gpt2", "qwen2", "mistral"])
def test_hf_greedy_decode_equals_cpu_and_transformers(hf_models, family, backend):
    folder, torch_model = hf_models[family]
    cpu, gpu = _pair(folder, backend)
    assert set(gpu.executor.node_backends().values()) == {backend}, gpu.executor.placement
    ids = [11, 42, 7, 99, 150, 3, 64]
    got = _tokens(gpu, ids, 16)
    assert got == _tokens(cpu, ids, 16)
    assert got == torch_greedy(torch_model, ids, 16)


@BACKENDS
def test_chunked_prefill_then_decode_equals_cpu(tiny_llama, backend, monkeypatch):
    cpu, gpu = _pair(tiny_llama, backend)
    ids = list(range(7, 30))
    want = _tokens(cpu, ids, 8)
    monkeypatch.setattr("volvox.tasks.generate.PREFILL_CHUNK", 5)  # the prompt in 5 forwards, the pick after the last
    submits = gpu.executor.device.submits
    assert _tokens(gpu, ids, 8) == want
    assert gpu.executor.device.submits - submits == 5 + 7


# ------------------------------------------------------------------------------ traffic
@BACKENDS
def test_decode_is_one_submit_and_four_bytes_per_token(tiny_llama, backend):
    cpu, gpu = _pair(tiny_llama, backend)
    ex, dev = gpu.executor, gpu.executor.device
    ids = list(range(3, 15))
    sess, sampler = Session(gpu), Sampler(SamplingParams())
    tok = sess.next_token(ids, sampler)
    tok = sess.next_token([tok], sampler)  # the first decode step may record; the later ones replay
    recordings = ex.commands.recordings
    kv = sess.ctx.kv
    assert kv.pending_download is not None  # the device holds rows the host lacks
    untouched = kv.host_keys[0][:, :sess.ctx.pos].copy()
    replayed = ex.replayed_steps
    for _ in range(6):
        submits, up, down = dev.submits, dev.bytes_uploaded, dev.bytes_downloaded
        tok = sess.next_token([tok], sampler)
        assert dev.submits - submits == 1
        assert dev.bytes_downloaded - down == 4     # the token id; no logits, no keys or values
        assert dev.bytes_uploaded - up == 8         # the token and its position (int32 each)
    assert ex.commands.recordings == recordings     # every step replayed one recording
    assert ex.replayed_steps - replayed == 6         # ... as a kept step, without walking the graph
    np.testing.assert_array_equal(kv.host_keys[0][:, :untouched.shape[1]], untouched)  # no host KV writes
    # reading the cache downloads it once, and it equals the CPU's after the same tokens
    ref = Session(cpu)
    ref.forward(sess.tokens)
    down = dev.bytes_downloaded
    for layer in range(gpu.config.n_layers):
        np.testing.assert_allclose(kv.keys[layer][:, :sess.ctx.pos], ref.ctx.kv.keys[layer][:, :sess.ctx.pos],
                                   atol=1e-4)
        np.testing.assert_allclose(kv.values[layer][:, :sess.ctx.pos],
                                   ref.ctx.kv.values[layer][:, :sess.ctx.pos], atol=1e-4)
    assert dev.bytes_downloaded > down and kv.pending_download is None
    down = dev.bytes_downloaded
    kv.keys  # noqa: B018 -- current now: no second download
    assert dev.bytes_downloaded == down


@BACKENDS
def test_cpu_batch_steps_and_gpu_steps_share_the_cache(tiny_llama, backend):
    cpu, gpu = _pair(tiny_llama, backend)
    prompts = [list(range(4, 13)), list(range(20, 26))]
    params = SamplingParams()
    # GPU prefill, ragged CPU decode (downloads each session's device rows first)
    assert generate_batch(gpu, prompts, 6, params, []) == generate_batch(cpu, prompts, 6, params, [])
    # GPU decode, a CPU step in the middle, then GPU again (uploads the row the CPU wrote)
    a, b = Session(cpu), Session(gpu)
    np.testing.assert_allclose(b.forward(prompts[0]), a.forward(prompts[0]), atol=1e-4)
    for tok in (7, 9):
        np.testing.assert_allclose(b.forward([tok]), a.forward([tok]), atol=1e-4)
        assert gpu.executor.last_backend == backend
    gpu.executor.run(_batch(b), {"tokens": np.array([30], np.int32), "positions": np.array([b.ctx.pos], np.int32)})
    assert gpu.executor.last_backend == "cpu"
    a.forward([30])
    b.ctx.pos += 1
    for tok in (12, 14):
        np.testing.assert_allclose(b.forward([tok]), a.forward([tok]), atol=1e-4)
        assert gpu.executor.last_backend == backend


def _batch(session):
    from volvox.ops.context import BatchContext
    session.ctx.output_rows = "last"
    return BatchContext([(session.ctx, 1)])


@BACKENDS
def test_closing_the_model_downloads_the_session_cache(tiny_llama, backend):
    cpu, _ = _pair(tiny_llama, backend)
    gpu = volvox.load(tiny_llama, backend=backend)  # its own device, closed with it
    sess, ref = Session(gpu), Session(cpu)
    sess.forward(list(range(3, 12)))
    ref.forward(list(range(3, 12)))
    assert sess.kv.pending_download is not None
    gpu.close()
    assert sess.kv.pending_download is None
    np.testing.assert_allclose(sess.kv.keys[1][:, :9], ref.kv.keys[1][:, :9], atol=1e-4)


@BACKENDS
def test_sessions_take_turns_on_the_device_cache(tiny_llama, backend):
    cpu, gpu = _pair(tiny_llama, backend)
    first, second = Session(gpu), Session(gpu)
    ref_first, ref_second = Session(cpu), Session(cpu)
    np.testing.assert_allclose(first.forward([5, 6, 7]), ref_first.forward([5, 6, 7]), atol=1e-4)
    np.testing.assert_allclose(second.forward([40, 41]), ref_second.forward([40, 41]), atol=1e-4)
    # the first session's rows were downloaded before the second took the buffers; it continues right
    np.testing.assert_allclose(first.forward([8]), ref_first.forward([8]), atol=1e-4)
    np.testing.assert_allclose(second.forward([42]), ref_second.forward([42]), atol=1e-4)


# ------------------------------------------------------------------------------ device pickers
def _pcg(v: int) -> int:
    s = (v * 747796405 + 2891336453) & 0xFFFFFFFF
    w = (((s >> ((s >> 28) + 4)) ^ s) * 277803737) & 0xFFFFFFFF
    return ((w >> 22) ^ w) & 0xFFFFFFFF


def sample_ref(logits: np.ndarray, pick: TokenPick) -> int:
    """sample.wgsl's documented algorithm in numpy (float64): top-k then top-p (ties by lower id),
    u from the PCG hash of (seed, step), the first id whose running kept weight exceeds u * total."""
    x = logits.astype(np.float64)
    order = np.lexsort((np.arange(x.size), -x))  # best first, ties by lower id
    keep = np.zeros(x.size, bool)
    keep[order[:pick.top_k or x.size]] = True
    w = np.exp((x - x.max()) / pick.temperature)
    if pick.top_p < 1.0:
        kept = order[keep[order]]
        mass = np.cumsum(w[kept])
        n = int(np.searchsorted(mass, pick.top_p * mass[-1])) + 1
        keep[:] = False
        keep[kept[:n]] = True
    w = np.where(keep, w, 0.0)
    seed_lo, seed_hi = pick.seed & 0xFFFFFFFF, (pick.seed >> 32) & 0xFFFFFFFF
    h = _pcg((_pcg(_pcg(seed_hi) ^ seed_lo) + pick.step) & 0xFFFFFFFF)
    u = (h >> 8) / 2 ** 24
    return int(min(np.searchsorted(np.cumsum(w), u * w.sum(), side="right"), np.flatnonzero(keep)[-1]))


def _run_pick(device, logits: np.ndarray, pick: TokenPick) -> int:
    """The token ``pick`` chooses on ``device`` from one logits row."""
    buf = device.upload(logits.astype(np.float32))
    out = device.alloc(256)
    g = device.graph()
    g.begin()
    kernel, params = pick.dispatch(logits.size)
    g.record(kernel, [buf, out], (1, 1, 1), params)
    r = g.download(out, 4)
    g.end()
    device.free(buf)
    device.free(out)
    return int(r.array(np.int32, (1,))[0])


@BACKENDS
def test_argmax_takes_the_first_of_equals(backend):
    device = device_or_skip(backend)
    rng = np.random.default_rng(0)
    for n in (1, 7, 300, 1000):
        logits = rng.standard_normal(n).astype(np.float32)
        assert _run_pick(device, logits, TokenPick()) == int(np.argmax(logits))
        logits[[n // 3, n // 2, n - 1]] = logits.max() + 1.0  # a three-way tie for the top
        assert _run_pick(device, logits, TokenPick()) == int(np.argmax(logits)) == n // 3


@BACKENDS
@pytest.mark.parametrize("top_k, top_p", [(0, 1.0), (5, 1.0), (0, 0.6), (12, 0.8), (700, 0.95)])
def test_sample_equals_its_reference_and_stays_in_support(backend, top_k, top_p):
    device = device_or_skip(backend)
    rng = np.random.default_rng(top_k)
    logits = (rng.standard_normal(500) * 2.0).astype(np.float32)  # (vocab,)
    logits[[17, 230]] = logits.max()  # a tie at the top
    order = np.lexsort((np.arange(logits.size), -logits.astype(np.float64)))
    support = set(order[:top_k].tolist()) if top_k else set(range(logits.size))
    got = []
    for step in range(24):
        pick = TokenPick(0.9, top_k, top_p, seed=123456789012, step=step)
        tok = _run_pick(device, logits, pick)
        assert tok == sample_ref(logits, pick), step
        assert tok in support
        got.append(tok)
    assert len(set(got)) > 1  # a draw, not an argmax
    again = [_run_pick(device, logits, TokenPick(0.9, top_k, top_p, seed=123456789012, step=s)) for s in range(24)]
    assert again == got  # reproducible from (seed, step)


@BACKENDS
def test_sample_frequencies_follow_the_distribution(backend):
    device = device_or_skip(backend)
    logits = np.log(np.array([0.5, 0.25, 0.15, 0.07, 0.03], np.float32))
    draws = [_run_pick(device, logits, TokenPick(1.0, 0, 1.0, seed=7, step=s)) for s in range(400)]
    freq = np.bincount(draws, minlength=5) / len(draws)
    np.testing.assert_allclose(freq, [0.5, 0.25, 0.15, 0.07, 0.03], atol=0.06)
    nucleus = {_run_pick(device, logits, TokenPick(1.0, 0, 0.7, seed=7, step=s)) for s in range(60)}
    assert nucleus == {0, 1}  # 0.5 + 0.25 >= 0.7: the smallest nucleus is the two best


@BACKENDS
def test_seeded_generation_on_the_device_is_reproducible(tiny_llama, backend):
    cpu, gpu = _pair(tiny_llama, backend)
    ids = list(range(6, 16))
    kw = dict(temperature=0.9, top_k=4, seed=11)
    got = _tokens(gpu, ids, 12, **kw)
    assert _tokens(gpu, ids, 12, **kw) == got
    assert _tokens(gpu, ids, 12, temperature=0.9, top_k=4, seed=12) != got
    logits = Session(cpu).forward(ids + got, all_logits=True)[len(ids) - 1:-1]  # teacher-forced CPU logits
    for row, tok in zip(logits, got):
        assert tok in np.argsort(-row, kind="stable")[:4]  # inside the CPU's top 4
    assert gpu.generate(ids, max_new_tokens=5, **kw) == gpu.generate(ids, max_new_tokens=5, **kw)


def test_cli_generates_on_the_gpu_and_shows_the_placement(tiny_llama, tmp_path):
    device_or_skip("vulkan")
    prompt = "Once upon"
    r = subprocess.run([sys.executable, "-m", "volvox", "generate", str(tiny_llama), "--prompt", prompt,
                        "--backend", "vulkan", "--debug", "--max-new-tokens", "6"],
                       capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    placement = [ln for ln in r.stderr.splitlines() if ln.startswith("backend: vulkan")]
    assert placement and placement[0].endswith(" 0 on the CPU"), r.stderr
    want = volvox.load(tiny_llama).generate(prompt, max_new_tokens=6).strip()
    assert want and r.stdout.strip().endswith(want)


# ------------------------------------------------------------------------------ SmolLM2
@pytest.fixture(scope="module")
def smollm2_files(smollm2_gguf_path, tmp_path_factory):
    """{"q4_1": the cached SmolLM2-135M-Instruct Q4_1, "q8_0": llama.cpp's requantization of it to Q8_0}."""
    import ctypes

    llama_cpp = pytest.importorskip("llama_cpp")
    dst = tmp_path_factory.mktemp("smollm2") / "smollm2-135m-q8_0.gguf"
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = llama_cpp.LLAMA_FTYPE_MOSTLY_Q8_0
    params.allow_requantize = True
    params.nthread = 2
    assert llama_cpp.llama_model_quantize(str(smollm2_gguf_path).encode(), str(dst).encode(), ctypes.byref(params)) == 0
    return {"q4_1": smollm2_gguf_path, "q8_0": dst}


def _product_on_q8_rows(x: np.ndarray, weight) -> np.ndarray:
    """x (M, K) @ weight.T (N, K) as the CPU's 8-bit activation rows make it (ggml's q8_0 / q8_1), in
    float64: per 32 values d = amax / 127, q = round_half_even(x * (127 / amax)), the row q * fp16(d);
    for q4_1 weights (q8_1 rows) each block's minimum m multiplies s = fp16(d * sum(q)), not fp16(d) * sum(q)."""
    from volvox.ops.linear import dense_weight

    b = np.asarray(x, np.float32).reshape(x.shape[0], -1, 32)      # (M, K/32, 32)
    amax = np.abs(b).max(-1, keepdims=True)                        # (M, K/32, 1)
    q = np.rint(b * np.divide(np.float32(127), amax, out=np.zeros_like(amax), where=amax > 0))
    d = amax / np.float32(127)                                     # (M, K/32, 1) float32
    d16 = d.astype(np.float16).astype(np.float64)
    y = (q * d16).reshape(x.shape).astype(np.float64) @ dense_weight(weight).astype(np.float64).T  # (M, N)
    if weight.qtype == "q4_1":  # blocks (d: f16, m: f16, 16 bytes of nibbles)
        m = weight.data.reshape(weight.shape[0], -1, 20)[..., 2:4].copy().view(np.float16)[..., 0]  # (N, K/32)
        qsum = q.sum(-1)                                           # (M, K/32)
        s = (d[..., 0] * qsum.astype(np.float32)).astype(np.float16).astype(np.float64)
        y += (s - d16[..., 0] * qsum) @ m.astype(np.float64).T
    return y


def _teacher_forced(lm, seq) -> tuple[np.ndarray, np.ndarray]:
    """(argmax per position (len(seq) - 1,), the logits (len(seq) - 1, vocab)) of ``seq`` fed in one forward."""
    logits = Session(lm).forward(seq, all_logits=True)[:-1]
    return logits.argmax(-1), logits


def _relative_margin(row: np.ndarray, a: int, b: int) -> float:
    """How far apart tokens a and b are in one float logits row, relative to b's logit."""
    return float(abs(row[a] - row[b]) / abs(row[b]))


@pytest.fixture(scope="module")
def smollm2_cpu_runs(smollm2_files):
    """Per qtype, what the GPU runs are compared with (computed once): the prompt, the 32 greedy tokens
    of the reference executor (float32 activations) and of the fast CPU (8-bit activations), and the
    256-position teacher-forced sequence with both executors' argmax and the reference's logits."""
    out = {}
    for qtype, path in smollm2_files.items():
        ref = volvox.load(path, reference=True)  # kept: the GPU tests read its logits at a divergence
        with volvox.load(path) as cpu:
            ids = cpu.tokenizer.encode("Once upon a time, there")  # <= 8 tokens: the prefill takes the GEMV too
            text = cpu.tokenizer.encode(" ".join(["The little robot read books about the sea and the stars."] * 24))
            seq = (ids + text)[:257]
            want, fast = _tokens(ref, ids, 32), _tokens(cpu, ids, 32)
            on_ref, ref_logits = _teacher_forced(ref, seq)
            on_fast, _ = _teacher_forced(cpu, seq)
            out[qtype] = dict(path=path, ids=ids, want=want, fast=fast, seq=seq, on_ref=on_ref, on_fast=on_fast,
                              ref_logits=ref_logits, ref=ref)
    return out


@pytest.mark.slow
@pytest.mark.parametrize("qtype", ["q4_1", "q8_0"])
def test_smollm2_fast_cpu_differs_from_float_only_by_its_8bit_activations(smollm2_files, qtype):
    """Where the fast CPU's tokens part from the float ones: each linear of SmolLM2, on the activations
    the model itself produces, equals the float product of its 8-bit activation rows (q8_0 / q8_1
    rounded back to floats) to NMSE 1e-11 (measured <= 7e-13), while it is 3e-7..2e-4 (median 6e-5)
    from the float product of the activations themselves; with its linears swapped for the float
    reference ones, the fast run's logits equal the reference executor's."""
    from volvox.ir.quant_blocks import QuantTensor

    with volvox.load(smollm2_files[qtype], profile=True) as lm:  # the per-node path, whose steps can be wrapped
        seen = []

        def check(fast, ctx, p, x, weight, bias=None):
            from volvox.ops.linear import dense_weight

            assert isinstance(weight, QuantTensor) and weight.qtype in ("q4_1", "q8_0") and bias is None, weight
            y = fast(ctx, p, x, weight)
            rows = np.concatenate(y, -1) if isinstance(y, (list, tuple)) else y  # (M, N)
            on_f32 = x.astype(np.float64) @ dense_weight(weight).astype(np.float64).T
            seen.append((nmse(rows, _product_on_q8_rows(x, weight)), nmse(rows, on_f32)))
            return y

        for st in lm.executor.steps:
            if st.op in ("linear", "linear_act", "linear_split"):
                assert st.op != "linear_act", st.node_id  # SmolLM2's graph has none (swiglu is its own op)
                st.fn = functools.partial(check, st.fn)
        lm.executor._arena_buffers = lambda arrays: lm.executor._no_buffers  # every step returns its result
        Session(lm).forward(lm.tokenizer.encode("Once upon a time, there"), all_logits=True)
    assert len(seen) == 30 * 4 + 1  # qkv, o, gate+up, down per layer, and the tied output head
    to_q8, to_f32 = np.array(seen).T
    assert to_q8.max() < 1e-11
    assert np.median(to_f32) > 1e-6 and to_f32.min() > 1e3 * to_q8.max()
    from volvox.ops.registry import get_op

    ids = list(range(100, 112))
    path = smollm2_files[qtype]
    with volvox.load(path, profile=True) as lm, volvox.load(path, reference=True) as ref:
        for st in lm.executor.steps:
            if st.op in ("linear", "linear_split"):
                st.fn = get_op(st.op, st.node_id).ref
        lm.executor._arena_buffers = lambda arrays: lm.executor._no_buffers
        assert nmse(Session(lm).forward(ids, all_logits=True), Session(ref).forward(ids, all_logits=True)) < 1e-10


# The SmolLM2 proof takes about 3 minutes per backend and type on Mesa's software drivers: CI runs it
# on Vulkan; VOLVOX_GPU_PROOF_BACKENDS=all (or a comma list) runs it on the others too.
PROOF_BACKENDS = os.environ.get("VOLVOX_GPU_PROOF_BACKENDS", "vulkan")
PROOF_PARAMS = [pytest.param(b, marks=pytest.mark.skipif(
    PROOF_BACKENDS != "all" and b not in PROOF_BACKENDS.split(","),
    reason=f"{b}: set VOLVOX_GPU_PROOF_BACKENDS=all to run the SmolLM2 proof on it")) for b in GPU_BACKENDS]


@pytest.mark.slow
@pytest.mark.parametrize("backend", PROOF_PARAMS)
@pytest.mark.parametrize("qtype", ["q4_1", "q8_0"])
def test_smollm2_greedy_32_tokens_on_the_gpu(smollm2_cpu_runs, qtype, backend):
    """The GPU multiplies packed weights by float32 activations, as the ops' numpy references do. Against
    the reference executor (the same arithmetic) the issue's bounds hold: 32 greedy tokens equal, or
    a flip only at a near tie (< 1e-3 relative), and top-1 agreement >= 99% over 256 teacher-forced
    positions. The fast CPU quantizes activations to 8 bits (as llama.cpp's CPU backend; the test
    above shows that is its whole difference), which moves logits by more than that: measured, it
    agrees with the float run at 100% (Q4_1) and 98.0% (Q8_0) of those positions, its disagreements
    pairs within 1% in the float logits. So the GPU is held to the same, stated, bounds against it."""
    device_or_skip(backend)  # Mesa's software drivers here: the rasterizer is the slowest part of this test
    run = smollm2_cpu_runs[qtype]
    ids, want, seq = run["ids"], run["want"], run["seq"]
    with volvox.load(run["path"], backend=backend) as gpu:
        assert set(gpu.executor.node_backends().values()) == {backend}, gpu.executor.describe()
        got = _tokens(gpu, ids, 32)
        on_gpu, _ = _teacher_forced(gpu, seq)
    if got != want:  # float order may flip a near tie: show it is one
        i = next(j for j, (a, b) in enumerate(zip(got, want)) if a != b)
        row = Session(run["ref"]).forward(ids + want[:i])[-1]  # (vocab,) the float logits at the divergence
        assert _relative_margin(row, got[i], want[i]) < 1e-3, (i, got, want)
    assert (on_gpu == run["on_ref"]).mean() >= 0.99
    # the fast CPU (8-bit activations): agreement per position, every disagreement a pair within 1%
    assert (on_gpu == run["on_fast"]).mean() >= 0.97
    for j in np.flatnonzero(on_gpu != run["on_fast"]):
        assert _relative_margin(run["ref_logits"][j], int(on_gpu[j]), int(run["on_fast"][j])) < 1e-2, j
    if run["fast"] != got:
        i = next(j for j, (a, b) in enumerate(zip(got, run["fast"])) if a != b)
        row = Session(run["ref"]).forward(ids + got[:i])[-1]  # (vocab,)
        assert _relative_margin(row, run["fast"][i], got[i]) < 1e-2, (i, got, run["fast"])
