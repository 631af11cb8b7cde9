"""GPU backends beside the CPU: LLM prefill tok/s and CNN latency, per backend, in one run.

    python tools/bench_gpu.py                          # a random f32 LLaMA + a random CNN
    python tools/bench_gpu.py --model model.gguf --prompt 128 --backends cpu vulkan webgpu

The default LLaMA (dim 256, 4 layers, written with tests/tiny_gguf.py) and CNN (a MobileNet-style
stack on a 96x96 image) are random: only speed is measured. Unavailable backends print their
fallback reason and are skipped. Software drivers (lavapipe, llvmpipe) are far slower than a real
GPU; numbers are only meaningful on an idle machine (the load average is printed).
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
from volvox.graph import Graph, Node, TensorSpec
from volvox.model import Model
from volvox.tasks.generate import Session


def median_s(fn, runs: int) -> float:
    """Median wall seconds of ``runs`` calls after one warm-up."""
    fn()
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


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
    graph.validate()
    return graph, weights


def bench_backend(backend: str, model_path: str, n_prompt: int, runs: int) -> dict:
    """Prefill tok/s and CNN ms on one backend ("cpu" or a GPU backend)."""
    device = None if backend == "cpu" else open_device(backend)
    lm = volvox.load(model_path)
    if device is not None:  # the same compiled graph on the device
        weights = {name: w for (_, w), name in zip(lm.executor.weight_slots, lm.graph.weights)}
        lm = type(lm)(lm.graph, weights, lm.metadata, lm.source, lm.config, lm.tokenizer, optimize=False, device=device)
    ids = np.arange(3, 3 + n_prompt, dtype=np.int32) % lm.config.vocab_size  # (n_prompt,)
    prefill = median_s(lambda: Session(lm).forward(ids), runs)
    graph, weights = random_cnn()
    cnn = Model(graph, weights, {}, "cnn", device=device)
    image = np.random.default_rng(1).uniform(0, 1, (1, 96, 96, 3)).astype(np.float32)
    cnn_s = median_s(lambda: cnn.run({"image": image}), runs)
    label = "cpu" if device is None else f"{backend} ({device.description})"
    return {"backend": label, "prefill_tok_s": n_prompt / prefill, "cnn_ms": cnn_s * 1e3}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", help="a GGUF LLaMA (default: a random f32 one, dim 256, 4 layers)")
    ap.add_argument("--prompt", type=int, default=64, help="prompt tokens per prefill")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--backends", nargs="+", default=["cpu", *GPU_BACKENDS])
    a = ap.parse_args()
    model = a.model
    if model is None:
        sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
        from tiny_gguf import write_tiny_llama

        model = os.path.join(tempfile.mkdtemp(prefix="volvox-bench-"), "llama.gguf")
        write_tiny_llama(model, n_layers=4, dim=256, n_heads=8, n_kv_heads=4, ffn=704, context=512, qtype="f32")
    print(f"load average: {os.getloadavg()[0]:.2f}   prompt: {a.prompt} tokens   model: {model}")
    print(f"{'backend':<52}{'prefill tok/s':>15}{'CNN ms':>10}")
    for backend in a.backends:
        try:
            r = bench_backend(backend, model, a.prompt, a.runs)
        except BackendUnavailable as e:
            print(f"{backend:<52}unavailable: {' '.join(str(e).split())[:80]}")
            continue
        print(f"{r['backend'][:51]:<52}{r['prefill_tok_s']:>15.1f}{r['cnn_ms']:>10.2f}")


if __name__ == "__main__":
    main()
