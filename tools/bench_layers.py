"""Per-layer times of a .tflite model in volvox's vision plan and in TFLite (XNNPACK), same input.

    python tools/bench_layers.py [mltk-person-detection] [--threads 1] [--runs 400]
    python tools/bench_layers.py efficientnet-lite0      # no .tflite source: bench_vision's export of it

volvox: each plan step's median wall time (``Plan.step_seconds``: thread 0 waits for every
step, so steps do not overlap), named by its node (a fused depthwise -> pointwise step carries the
pointwise conv's name: conv_2d_3 is depthwise_conv_2d_2 and conv_2d_3 below). TFLite: the model
cut after each operator (a copy of the file whose subgraph outputs that operator's output and
whose operator list ends there), timed, less the cut before; rows are named as volvox's importer
names the nodes. The first row also holds the interpreter's call overhead, and a difference of
cuts moves by a microsecond or so between runs.
"""

from __future__ import annotations

import argparse
import struct
import sys
import tempfile
from pathlib import Path

from bench_vision import TWIN, exported, median_ms

TOOLS = Path(__file__).resolve().parent


def tflite_cuts(path: str, threads: int, x, runs: int) -> list[tuple[str, float]]:
    """(operator named as volvox's importer names its node, ms of the model cut after it minus the
    cut before) per operator."""
    from ai_edge_litert.interpreter import Interpreter

    from volvox.formats.flatbuffers import root
    from volvox.formats.tflite import BUILTIN_NAMES

    data = Path(path).read_bytes()
    model = root(data, path, ValueError)
    codes = [max(c.scalar(0, "<b"), c.scalar(3, "<i")) for c in model.tables(1, "operator_codes")]
    graph = model.tables(2, "subgraphs")[0]
    outputs_at, _ = graph._vector(2, 4)    # SubGraph.outputs: int32 tensor indices
    operators_at, n = graph._vector(3, 4)  # SubGraph.operators: offsets; its length just before
    rows, before = [], 0.0
    with tempfile.TemporaryDirectory() as tmp:
        for k, op in enumerate(graph.tables(3, "operators")):
            out = int(op.array(2, "<i4")[0])
            cut = bytearray(data)
            struct.pack_into("<i", cut, outputs_at, out)
            struct.pack_into("<I", cut, operators_at - 4, k + 1)
            file = Path(tmp) / f"cut{k}.tflite"
            file.write_bytes(cut)
            it = Interpreter(model_path=str(file), num_threads=threads)
            it.allocate_tensors()
            index = it.get_input_details()[0]["index"]

            def call():
                it.set_tensor(index, x)
                it.invoke()
            ms = min(median_ms(call, runs) for _ in range(3))
            name = BUILTIN_NAMES.get(codes[op.scalar(0, "<I")], "op").lower()
            rows.append((f"{name}_{k}", ms - before))
            before = ms
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model", nargs="?", default="mltk-person-detection",
                    help="a model name (its .tflite source, or the export bench_vision.py times)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--runs", type=int, default=400)
    args = ap.parse_args()

    import numpy as np

    import volvox
    from volvox import cpu
    from volvox.hub import resolve_model_file
    from volvox.tasks.image import preprocess

    sys.path.insert(0, str(TOOLS.parent / "tests" / "support"))
    from vision_helpers import sample_image

    cpu.set_num_threads(args.threads)
    path = str(resolve_model_file(args.model.removesuffix(TWIN)))
    target, path = exported(args.model) if args.model.endswith(TWIN) or not path.endswith(".tflite") else (args.model, path)
    model = volvox.load(target, threads=args.threads)
    x = preprocess(sample_image("astronaut"), model.metadata["preprocess"]).tensor
    feeds = {model.graph.inputs[0].name: x}
    model.run(feeds)
    plan = model._plan.plan
    if plan is None:
        sys.exit(f"{args.model}: no step plan ({model._plan.why})")
    plan.useful_threads = args.threads
    seconds = np.min([plan.step_seconds(model.executor.check_feeds(feeds), runs=args.runs) for _ in range(3)], axis=0)
    print(f"volvox plan steps, {args.threads} thread(s): {seconds.sum() * 1e3:.4f} ms")
    for (node, _), s in zip(plan.step_nodes, seconds):
        print(f"  {node:40s} {s * 1e3:8.4f}")
    rows = tflite_cuts(path, args.threads, x, args.runs)
    print(f"TFLite (XNNPACK) cuts, {args.threads} thread(s): {sum(ms for _, ms in rows):.4f} ms")
    for name, ms in rows:
        print(f"  {name:40s} {ms:8.4f}")


if __name__ == "__main__":
    main()
