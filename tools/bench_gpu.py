"""GPU backends beside the CPU: LLM prefill and CNN latency, first forward vs steady state, in one run;
with --generate, generation: prefill and decode tok/s per backend and where the time goes.

    python tools/bench_gpu.py                          # a random f32 LLaMA + a random CNN
    python tools/bench_gpu.py --model model.gguf --prompt 128 --backends cpu vulkan webgpu
    python tools/bench_gpu.py --prompt 16 --image 32   # small shapes: recording overhead shows
    python tools/bench_gpu.py --generate --model model.gguf --prompt 128 --new 64 --llama-cpp
    python tools/bench_gpu.py --generate --model model.gguf --backends cpu auto vulkan --llama-cpp

The default LLaMA (dim 256, 4 layers, written with tests/support/tiny_gguf.py) and CNN (a MobileNet-style
stack on a square image) are random: only speed is measured. Per backend: the first forward after
load (it records the command graph and fills the buffer pool), then the median of ``--runs``
forwards with new input values and the same shapes (each a fresh prefill session), which replay
that recording, and the median of ``--runs`` such forwards that drop the recording first and so
record again (what every forward cost before replay); ``rec`` counts the recordings the replayed
runs left (1 when every forward after the first replayed).
``--generate`` loads the model with ``volvox.load(model, backend=...)`` (what a user gets) and, after a
warm-up generation that records the prefill and decode command graphs, times a ``--prompt``-token
prefill and ``--new`` greedy decode tokens (``Session.next_token``: on a GPU the token is picked on the
device), each split into host time (the executor's walk, recording, binding: total minus submit and
wait), submit time (handing the work to the driver) and wait time (the device computing and the
4-byte download); it prints submits per decode token too. ``--llama-cpp`` adds llama-cpp-python on the
same GGUF with every layer offloaded (``n_gpu_layers=-1``), timed the same way; it uses a GPU only
when the wheel was built with one (docs/backends.md: ``CMAKE_ARGS="-DGGML_VULKAN=ON"``), which the
row says. On software drivers (lavapipe, llvmpipe) the compute runs inside the submit or the wait,
so only the host column means what it would on a real GPU.
Unavailable backends print their fallback reason and are skipped. Software drivers (lavapipe,
llvmpipe) are far slower than a real GPU; numbers are only meaningful on an idle machine (the load
average is printed before and after).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import volvox
from volvox._gpu.backend import BackendUnavailable
from volvox._gpu.devices import GPU_BACKENDS, open_device
from volvox.ir.graph import Graph, Node, TensorSpec
from volvox.model import Model
from volvox.tasks.generate import Session
from volvox.tasks.sampling import Sampler, SamplingParams
from volvox.ops import validate


def timings_ms(fn, runs: int, commands=None) -> dict:
    """(total ms, host ms) of ``fn(i)``: the ``first`` call, the median of ``runs`` more (``replay``)
    and, given the executor's CommandGraph ``commands``, of ``runs`` calls that each drop its
    recordings first (``rerecord``). Host ms = total minus the time spent submitting and waiting
    (None on the CPU)."""
    def once(i, rerecord=False):
        if rerecord:
            commands.invalidate()
        waited = commands.submit_seconds if commands else 0.0
        t0 = time.perf_counter()
        fn(i)
        total = time.perf_counter() - t0
        return total * 1e3, (total - (commands.submit_seconds - waited)) * 1e3 if commands else None

    out = {"first": once(0)}
    steady = [once(i) for i in range(1, runs + 1)]
    out["replay"] = (statistics.median(t[0] for t in steady),
                     None if commands is None else statistics.median(t[1] for t in steady))
    if commands is not None:
        out["recordings"] = commands.recordings
        again = [once(i, True) for i in range(1, runs + 1)]
        out["rerecord"] = tuple(statistics.median(t[k] for t in again) for k in (0, 1))
    return out


def random_cnn(size: int = 96) -> tuple[Graph, dict]:
    """A MobileNet-style stack: stem conv, 3 depthwise-separable blocks, pooling, classifier."""
    r = np.random.default_rng(0)
    weights, nodes = {}, []

    def w(name, *shape):
        weights[name] = r.uniform(-0.3, 0.3, shape).astype(np.float32)
        return name

    x, c = "image", 3
    nodes.append(Node("stem", "conv2d", {"x": x, "weight": w("stem.w", 16, 3, 3, 3), "bias": w("stem.b", 16)}, {"y": "s"},
                      {"strides": [2, 2], "pads": [0, 0, 1, 1], "activation": "relu6"}))
    x, c = "s", 16
    for i, out in enumerate((32, 64, 64)):
        nodes.append(Node(f"dw{i}", "conv2d", {"x": x, "weight": w(f"dw{i}.w", c, 3, 3, 1)}, {"y": f"d{i}"},
                          {"groups": c, "strides": [2, 2] if i < 2 else [1, 1], "pads": [1, 1, 1, 1], "activation": "relu6"}))
        nodes.append(Node(f"pw{i}", "conv2d", {"x": f"d{i}", "weight": w(f"pw{i}.w", out, 1, 1, c), "bias": w(f"pw{i}.b", out)},
                          {"y": f"p{i}"}, {"activation": "relu6"}))
        x, c = f"p{i}", out
    nodes += [Node("gap", "global_avg_pool", {"x": x}, {"y": "g"}),
              Node("flat", "reshape", {"x": "g"}, {"y": "f"}, {"shape": [0, -1]}),
              Node("fc", "linear", {"x": "f", "weight": w("fc.w", 10, c), "bias": w("fc.b", 10)}, {"y": "logits"}),
              Node("prob", "softmax", {"x": "logits"}, {"y": "probs"})]
    specs = {n: TensorSpec(n, a.shape, "float32") for n, a in weights.items()}
    graph = Graph([TensorSpec("image", (1, size, size, 3), "float32")], specs, nodes, ["probs"])
    validate(graph)
    return graph, weights


def bench_backend(backend: str, model_path: str, n_prompt: int, size: int, runs: int) -> dict:
    """First and steady-state prefill and CNN milliseconds on one backend ("cpu" or a GPU backend)."""
    device = None if backend == "cpu" else open_device(backend)
    lm = volvox.load(model_path)
    if device is not None:  # the same compiled graph on the device
        weights = {name: w for (_, w), name in zip(lm.executor.weight_slots, lm.graph.weights)}
        lm = type(lm)(lm.graph, weights, lm.metadata, lm.source, lm.config, lm.tokenizer, optimize=False, device=device)
    r = np.random.default_rng(0)
    prompts = r.integers(0, lm.config.vocab_size, (runs + 1, n_prompt)).astype(np.int32)  # (runs + 1, n_prompt)
    llm = timings_ms(lambda i: Session(lm).forward(prompts[i]), runs, getattr(lm.executor, "commands", None))
    graph, weights = random_cnn(size)
    cnn = Model(graph, weights, {}, "cnn", device=device)
    images = r.uniform(0, 1, (runs + 1, 1, size, size, 3)).astype(np.float32)  # (runs + 1, 1, size, size, 3)
    cnn_ms = timings_ms(lambda i: cnn.run({"image": images[i]}), runs, getattr(cnn.executor, "commands", None))
    label = "cpu" if device is None else f"{backend} ({device.description.split(' (')[0]})"
    llm["tok/s"] = n_prompt / llm["replay"][0] * 1e3
    lm.close()
    cnn.close()  # (and the device)
    return {"backend": label, f"prefill {n_prompt}": llm, f"CNN {size}x{size}": cnn_ms}


def bench_generate(backend: str, model_path: str, n_prompt: int, n_new: int) -> dict:
    """Prefill and decode tok/s on one backend, with host / submit / wait milliseconds per token."""
    if backend not in ("cpu", "auto"):
        open_device(backend).close()  # BackendUnavailable (with its reason) instead of a quiet CPU run
    lm = volvox.load(model_path, backend=backend)  # "auto": a hardware GPU if there is one, else the CPU
    ex = lm.executor
    dev, commands = getattr(ex, "device", None), getattr(ex, "commands", None)
    r = np.random.default_rng(0)
    prompt = r.integers(0, lm.config.vocab_size, n_prompt).tolist()

    def run(ids: list[int], n: int) -> tuple[list[float], dict]:
        """Prefill ``ids`` then decode ``n`` greedy tokens; (seconds, split) per phase."""
        sess, sampler = Session(lm), Sampler(SamplingParams())
        phases = []
        for work in [lambda: sess.next_token(ids, sampler)] + [None] * n:
            before = (commands.submit_seconds, dev.wait_seconds, dev.submits) if dev else (0.0, 0.0, 0)
            t0 = time.perf_counter()
            tok = work() if work else sess.next_token([tok], sampler)
            total = time.perf_counter() - t0
            after = (commands.submit_seconds, dev.wait_seconds, dev.submits) if dev else (0.0, 0.0, 0)
            submit, wait, submits = (b - a for a, b in zip(before, after))
            phases.append((total, total - submit, submit - wait, wait, submits))
        return phases

    run(prompt[: max(1, n_prompt // 2)], 2)  # warm-up: the pool, the device KV cache, the decode recording
    run(prompt, 2)                           # the full prompt's prefill recording
    phases = run(prompt, n_new)
    prefill, decode = phases[0], phases[1:]

    def per_token(rows) -> tuple:
        return tuple(statistics.median(row[k] for row in rows) * 1e3 for k in range(1, 4))

    label = "cpu" if dev is None else f"{dev.name} ({dev.description.split(' (')[0]})"
    label = f"auto: {label}" if backend == "auto" else label
    out = {"backend": label, "prefill tok/s": n_prompt / prefill[0], "prefill ms": (prefill[0] * 1e3, *prefill[1:4]),
           "decode tok/s": len(decode) / sum(row[0] for row in decode) if decode else 0.0,
           "decode ms": (statistics.median(row[0] for row in decode) * 1e3, *per_token(decode)) if decode else None,
           "submits/token": statistics.median(row[4] for row in decode) if decode and dev else None}
    lm.close()
    return out


def bench_llama_cpp(model_path: str, n_prompt: int, n_new: int) -> dict:
    """llama-cpp-python on the same GGUF, every layer offloaded: prefill and greedy decode tok/s."""
    import llama_cpp
    import llama_peer

    llama_peer.use_plain_cpu_buffers()

    llm = llama_cpp.Llama(model_path=model_path, n_ctx=n_prompt + n_new + 16, n_batch=512, n_gpu_layers=-1,
                          verbose=False)
    prompt = np.random.default_rng(0).integers(0, llm.n_vocab(), n_prompt).tolist()
    llm.eval(prompt[:8])  # warm-up: a prefill and a decode step
    llm.eval(prompt[8:9])
    llm.reset()
    t0 = time.perf_counter()
    llm.eval(prompt)
    prefill = time.perf_counter() - t0
    t0 = time.perf_counter()
    for _ in range(n_new):
        logits = np.ctypeslib.as_array(llm._ctx.get_logits(), shape=(llm.n_vocab(),))  # the last token's
        llm.eval([int(np.argmax(logits))])
    decode = time.perf_counter() - t0
    llm.close()
    gpu = "GPU offload" if llama_cpp.llama_supports_gpu_offload() else "CPU build"
    return {"backend": f"llama.cpp ({gpu})", "prefill tok/s": n_prompt / prefill, "decode tok/s": n_new / decode}


def main_generate(a) -> None:
    """The --generate table."""
    print(f"load average: {os.getloadavg()[0]:.2f}   prompt: {a.prompt} tokens   new: {a.new}   model: {a.model}")
    print(f"{'backend':<26}{'prefill tok/s':>14}{'decode tok/s':>13}   "
          f"{'decode ms/token: total  host  submit  wait':<44}{'submits/token':>14}")
    rows = []
    for backend in a.backends:
        try:
            rows.append(bench_generate(backend, a.model, a.prompt, a.new))
        except BackendUnavailable as e:
            print(f"{backend:<26}unavailable: {' '.join(str(e).split())[:80]}")
    if a.llama_cpp:
        rows.append(bench_llama_cpp(a.model, a.prompt, a.new))
    for r in rows:
        ms = r.get("decode ms")
        split = "" if ms is None else f"{ms[0]:>8.2f} {ms[1]:>7.2f} {ms[2]:>7.2f} {ms[3]:>6.2f}"
        sub = r.get("submits/token")
        print(f"{r['backend'][:25]:<26}{r['prefill tok/s']:>14.1f}{r['decode tok/s']:>13.1f}   "
              f"{'':>15}{split:<29}{'-' if sub is None else f'{sub:g}':>14}")
    print(f"load average after: {os.getloadavg()[0]:.2f}")


def fmt_ms(t) -> str:
    """``total (host)`` milliseconds, ``total`` alone, or a dash."""
    if t is None:
        return f"{'-':>18}"
    return f"{t[0]:>9.2f}" + (f"{'':>9}" if t[1] is None else f" ({t[1]:>6.2f})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", help="a GGUF LLaMA (default: a random f32 one, dim 256, 4 layers)")
    ap.add_argument("--prompt", type=int, default=64, help="prompt tokens per prefill")
    ap.add_argument("--image", type=int, default=96, help="CNN input height and width")
    ap.add_argument("--runs", type=int, default=10, help="steady-state forwards (median)")
    ap.add_argument("--backends", nargs="+", default=["cpu", *GPU_BACKENDS],
                    help='cpu and GPU backends; with --generate also "auto" (what backend="auto" picks)')
    ap.add_argument("--generate", action="store_true", help="time generation (prefill, decode) instead")
    ap.add_argument("--new", type=int, default=32, help="--generate: greedy tokens decoded")
    ap.add_argument("--llama-cpp", action="store_true", help="--generate: add llama-cpp-python, layers offloaded")
    a = ap.parse_args()
    model = a.model
    if model is None:
        sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "support"))
        from tiny_gguf import write_tiny_llama

        model = a.model = os.path.join(tempfile.mkdtemp(prefix="volvox-bench-"), "llama.gguf")
        write_tiny_llama(model, n_layers=4, dim=256, n_heads=8, n_kv_heads=4, ffn=704, context=512, qtype="f32")
    if a.generate:
        main_generate(a)
        return
    print(f"load average: {os.getloadavg()[0]:.2f}   prompt: {a.prompt} tokens   image: {a.image}x{a.image}   "
          f"runs: {a.runs}   model: {model}")
    print(f"{'backend':<18}{'workload':<12}{'first ms (host)':>18}{'replay ms (host)':>18}"
          f"{'re-record ms (host)':>21}{'rec':>5}{'tok/s':>8}")
    for backend in a.backends:
        try:
            r = bench_backend(backend, model, a.prompt, a.image, a.runs)
        except BackendUnavailable as e:
            print(f"{backend:<18}unavailable: {' '.join(str(e).split())[:80]}")
            continue
        for work, t in r.items():
            if work != "backend":
                print(f"{r['backend'][:17]:<18}{work:<12}{fmt_ms(t['first'])}{fmt_ms(t['replay'])}"
                      f"   {fmt_ms(t.get('rerecord'))}{t.get('recordings', '-'):>5}"
                      + (f"{t['tok/s']:>8.0f}" if "tok/s" in t else ""))
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
