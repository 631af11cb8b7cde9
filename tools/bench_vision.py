"""volvox vs the TFLite interpreter (XNNPACK), onnxruntime and PyTorch on the same vision models and inputs.

    python tools/bench_vision.py [--runs 50] [--threads 1 2] [--models mltk-person-detection ...]

Each thread count runs in a fresh process with OPENBLAS_NUM_THREADS / OMP_NUM_THREADS set
(numpy's BLAS reads them at import). Median wall time of --runs calls after 5 warm-up calls;
ratio = volvox / peer (lower is better for volvox). "per-op ms" is the per-op executor on
the same model (what Model.run does when the graph has no vision plan), "plan" whether
Model.run ran the native vision plan (runtime/vision_plan.py). Inputs: scikit-image's astronaut photo,
a rendered text line for the OCR model.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

MODELS = ("mltk-person-detection", "blazeface-short-range", "pp-ocrv4-rec", "efficientnet-lite0")


def median_ms(fn, runs: int) -> float:
    for _ in range(5):
        fn()
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


def bench_one(name: str, threads: int, runs: int) -> dict:
    """Time volvox and the model's native runtime on one input, in this process."""
    import numpy as np

    import volvox
    from volvox.hub import resolve_model_file
    from volvox.image import preprocess

    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
    from vision_helpers import sample_image, text_line

    model = volvox.load(name, threads=threads)
    image = text_line("The quick brown fox 2026") if name == "pp-ocrv4-rec" else sample_image("astronaut")
    x = preprocess(image, model.metadata["preprocess"]).tensor
    feeds = {model.graph.inputs[0].name: x}
    path = str(resolve_model_file(name))
    if path.endswith(".onnx"):
        import onnxruntime as ort

        opts = ort.SessionOptions()
        opts.intra_op_num_threads = threads
        sess = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
        peer_name, peer = "onnxruntime", lambda: sess.run(None, feeds)
    elif path.endswith(".pth"):
        import torch
        from efficientnet_lite_pytorch import EfficientNet

        torch.set_num_threads(threads)
        net = EfficientNet.from_name("efficientnet-lite0")
        net.load_state_dict(torch.load(path, weights_only=True))
        net.eval()
        xt = torch.from_numpy(np.ascontiguousarray(x.transpose(0, 3, 1, 2)))

        def peer():
            with torch.no_grad():
                net(xt)
        peer_name = "torch"
    else:
        from ai_edge_litert.interpreter import Interpreter

        it = Interpreter(model_path=path, num_threads=threads)
        it.allocate_tensors()
        idx = it.get_input_details()[0]["index"]

        def peer():
            it.set_tensor(idx, x)
            it.invoke()
        peer_name = "tflite-xnnpack"
    from volvox.runtime.executor import RunContext

    ours = median_ms(lambda: model.run(feeds), runs)
    per_op = median_ms(lambda: model.executor.run(RunContext(), feeds), runs)
    theirs = median_ms(peer, runs)
    return {"model": name, "threads": threads, "volvox_ms": round(ours, 3), "per_op_ms": round(per_op, 3),
            "plan": model._plan is not None and model._plan.plan is not None, "peer": peer_name,
            "peer_ms": round(theirs, 3), "ratio": round(ours / theirs, 2), "input": list(np.shape(x))}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=50)
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--models", nargs="+", default=list(MODELS))
    ap.add_argument("--child", nargs=2, metavar=("MODEL", "THREADS"), help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        print(json.dumps(bench_one(a.child[0], int(a.child[1]), a.runs)))
        return
    print(f"load average: {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs (numbers mean little when it is high)")
    print(f"{'model':<24}{'threads':>8}{'volvox ms':>11}{'plan':>6}{'per-op ms':>11}{'peer':>16}{'peer ms':>10}{'ratio':>8}")
    for name in a.models:
        for n in a.threads:
            env = dict(os.environ, OPENBLAS_NUM_THREADS=str(n), OMP_NUM_THREADS=str(n), MKL_NUM_THREADS=str(n))
            proc = subprocess.run([sys.executable, __file__, "--runs", str(a.runs), "--child", name, str(n)],
                                  env=env, capture_output=True, text=True)
            if proc.returncode != 0:
                print(f"{name:<24}{n:>8}  failed: {proc.stderr.strip().splitlines()[-1:]}")
                continue
            r = json.loads(proc.stdout.strip().splitlines()[-1])
            print(f"{name:<24}{n:>8}{r['volvox_ms']:>11.2f}{'yes' if r['plan'] else 'no':>6}{r['per_op_ms']:>11.2f}"
                  f"{r['peer']:>16}{r['peer_ms']:>10.3f}{r['ratio']:>8.1f}")


if __name__ == "__main__":
    main()
