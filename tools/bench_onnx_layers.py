"""Per-layer times of an .onnx model in volvox's step plan and in onnxruntime, same file, same input.

    python tools/bench_onnx_layers.py /tmp/cnns/resnet18-opset17.onnx [--threads 1] [--runs 20]

volvox: each plan step's median wall time (``Plan.step_seconds``: thread 0 waits for every step,
so steps do not overlap), min over 3 rounds. onnxruntime: its profiler's per-node ``dur``
(``SessionOptions.enable_profiling``), median over --runs after 5 warm-ups, min over 3 sessions.
Conv rows are matched by the ONNX Conv node each engine's step or node starts from (onnxruntime
names a fused node by its last output: walked back to its Conv); everything else is summed per op.
A row: conv node, map (input H x W), C in -> out, kernel / stride, MACs, us and GMAC/s each.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

TOOLS = Path(__file__).resolve().parent


def conv_shapes(path: str) -> dict:
    """{conv node name: (H, W, C in, C out, kh, kw, stride, MACs)} from onnx shape inference."""
    import onnx

    model = onnx.shape_inference.infer_shapes(onnx.load(path))
    dims = {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim]
            for v in list(model.graph.value_info) + list(model.graph.input) + list(model.graph.output)}
    weights = {w.name: list(w.dims) for w in model.graph.initializer}
    shapes = {}
    for node in model.graph.node:
        if node.op_type != "Conv":
            continue
        _, cin, h, w = dims[node.input[0]]
        _, cout, oh, ow = dims[node.output[0]]
        _, cin_g, kh, kw = weights[node.input[1]]  # (C out, C in per group, kh, kw)
        stride = next((list(a.ints) for a in node.attribute if a.name == "strides"), [1, 1])[0]
        shapes[node.name] = (h, w, cin, cout, kh, kw, stride, oh * ow * cout * cin_g * kh * kw)
    return shapes


def conv_of_output(path: str) -> dict:
    """{tensor name: the Conv node its chain of Relu / Add / BatchNormalization nodes starts from}."""
    import onnx

    graph = onnx.load(path).graph
    producer = {out: node for node in graph.node for out in node.output}
    found = {}
    for tensor in producer:
        node = producer[tensor]
        while node.op_type != "Conv" and node.input and node.input[0] in producer:
            node = producer[node.input[0]]
        if node.op_type == "Conv":
            found[tensor] = node.name
    return found


def ort_node_us(path: str, feeds: dict, threads: int, runs: int) -> dict:
    """{node key: median us per run}: a Conv's key is its ONNX node name, another node's its op type."""
    import onnxruntime as ort

    convs = conv_of_output(path)
    best = {}
    for _ in range(3):
        with tempfile.TemporaryDirectory() as tmp:
            opts = ort.SessionOptions()
            opts.intra_op_num_threads = threads
            opts.enable_profiling = True
            opts.profile_file_prefix = str(Path(tmp) / "ort")
            sess = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
            for _ in range(5 + runs):
                sess.run(None, feeds)
            events = json.loads(Path(sess.end_profiling()).read_text())
        per_run = defaultdict(list)  # key -> [us of each event]
        for e in events:
            if e.get("cat") != "Node" or not e["name"].endswith("_kernel_time"):
                continue
            name = e["name"].removesuffix("_kernel_time").removesuffix("_nchwc")
            op = e["args"].get("op_name", "?")
            key = convs.get(name, name) if op in ("Conv", "FusedConv") else op
            per_run[key].append(e["dur"])
        for key, durs in per_run.items():
            calls = len(durs) // (5 + runs)  # a key's events per run (several for a non-Conv op)
            runs_us = [sum(durs[i * calls:(i + 1) * calls]) for i in range(5, 5 + runs)]
            best[key] = min(best.get(key, float("inf")), statistics.median(runs_us))
    return best


def volvox_step_us(path: str, feeds: dict, threads: int, runs: int) -> dict:
    """{key: us}: a conv step's key is its node id (an ONNX Conv's name), another step's its op."""
    import numpy as np

    import volvox
    from volvox import cpu

    cpu.set_num_threads(threads)
    model = volvox.load(path, threads=threads)
    model.run(feeds)
    plan = model._plan.plan
    if plan is None:
        sys.exit(f"{path}: no step plan ({model._plan.why})")
    plan.useful_threads = threads
    arrays = model.executor.check_feeds(feeds)
    seconds = np.min([plan.step_seconds(arrays, runs=runs) for _ in range(3)], axis=0)
    out = defaultdict(float)
    for (node, op), s in zip(plan.step_nodes, seconds):
        out[node if op == "conv2d" else op] += s * 1e6
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model", help="an .onnx file with static input shapes")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--runs", type=int, default=20)
    args = ap.parse_args()

    sys.path.insert(0, str(TOOLS))
    from bench_vision import random_feeds

    import volvox

    feeds = random_feeds(volvox.load(args.model).graph.inputs)
    shapes = conv_shapes(args.model)
    vv = volvox_step_us(args.model, feeds, args.threads, args.runs)
    ort_us = ort_node_us(args.model, feeds, args.threads, args.runs)
    print(f"{args.model}, {args.threads} thread(s): volvox steps {sum(vv.values()):.0f} us, "
          f"onnxruntime nodes {sum(ort_us.values()):.0f} us")
    print("| layer | map | C in -> out | kernel / stride | MMAC | ORT us | volvox us | ORT GMAC/s | volvox GMAC/s | ratio |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for name, (h, w, cin, cout, kh, kw, stride, macs) in shapes.items():
        a, b = ort_us.get(name, float("nan")), vv.get(name, float("nan"))
        print(f"| {name} | {h}x{w} | {cin} -> {cout} | {kh}x{kw} / {stride} | {macs / 1e6:.1f} | {a:.0f} | {b:.0f} "
              f"| {macs / a / 1e3:.1f} | {macs / b / 1e3:.1f} | {b / a:.2f} |")
    for key in sorted(set(ort_us) - set(shapes)):
        print(f"| onnxruntime {key} | | | | | {ort_us[key]:.0f} | | | | |")
    for key in sorted(set(vv) - set(shapes)):
        print(f"| volvox {key} | | | | | | {vv[key]:.0f} | | | |")


if __name__ == "__main__":
    main()
