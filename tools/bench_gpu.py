"""GPU backends beside the CPU: LLM prefill and CNN latency, first forward vs steady state, in one run.

    python tools/bench_gpu.py                          # a random f32 LLaMA + a random CNN
    python tools/bench_gpu.py --model model.gguf --prompt 128 --backends cpu vulkan webgpu
    python tools/bench_gpu.py --prompt 16 --image 32   # small shapes: recording overhead shows

The default LLaMA (dim 256, 4 layers, written with tests/support/tiny_gguf.py) and CNN (a MobileNet-style
stack on a square image) are random: only speed is measured. Per backend: the first forward after
load (it records the command graph and fills the buffer pool), then the median of ``--runs``
forwards with new input values and the same shapes (each a fresh prefill session), which replay
that recording, and the median of ``--runs`` such forwards that drop the recording first and so
record again (what every forward cost before replay); ``rec`` counts the recordings the replayed
runs left (1 when every forward after the first replayed).
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
    ap.add_argument("--backends", nargs="+", default=["cpu", *GPU_BACKENDS])
    a = ap.parse_args()
    model = a.model
    if model is None:
        sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "support"))
        from tiny_gguf import write_tiny_llama

        model = os.path.join(tempfile.mkdtemp(prefix="volvox-bench-"), "llama.gguf")
        write_tiny_llama(model, n_layers=4, dim=256, n_heads=8, n_kv_heads=4, ffn=704, context=512, qtype="f32")
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
