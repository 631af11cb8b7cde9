"""volvox vs the TFLite interpreter (XNNPACK), onnxruntime and PyTorch on the same vision models and inputs.

    python tools/bench_vision.py [--runs 50] [--threads 1 2] [--models mltk-person-detection ...]
    python tools/bench_vision.py --models path/to/resnet.onnx other.onnx   # any .onnx file vs onnxruntime

Each thread count runs in a fresh process with OPENBLAS_NUM_THREADS / OMP_NUM_THREADS set
(numpy's BLAS reads them at import). Median wall time of --runs calls after 5 warm-up calls;
ratio = volvox / peer (lower is better for volvox); --cpu-time (one thread) times the calling thread's
CPU time instead, which a loaded machine disturbs far less. "per-op ms" is the per-op executor on
the same model (what Model.run does when the graph has no vision plan), "plan" whether
Model.run ran a native step plan (runtime/plan.py). Inputs: scikit-image's astronaut photo,
a rendered text line for the OCR model; an .onnx path without a preprocessing recipe gets seeded
random inputs of its graph inputs' shapes and dtypes (symbolic dims as 1: pass a static model).
"solo" (more than one thread): how many of volvox's timed runs its pacer sent to one thread
(runtime/pacing.py: after a multi-thread run that stalled, as a loaded machine makes them); a
median over runs of both kinds is neither's time.

Peers that do not ship as .tflite are exported from the graph volvox loads (tools/export_tflite.py):
EfficientNet-Lite0 is timed against torch and against TFLite (XNNPACK) on that file, the same
weights. "mltk-person-detection-fp32" is the float twin of the int8 person detector
(tools/float_twin.py), in volvox as a blueprint and in TFLite (XNNPACK) as its export; with both
rows run, "int8 vs fp32 on the same network" prints int8 ms / fp32 ms per runtime. Exported files
are built once into the volvox cache (~/.cache/volvox/<model>/exports/), keyed by the source
file's sha256 and the code of the tools and volvox's format readers (older builds are deleted).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

MODELS = ("mltk-person-detection", "mltk-person-detection-fp32", "blazeface-short-range", "pp-ocrv4-rec",
          "efficientnet-lite0")
TWIN = "-fp32"  # "<int8 model>-fp32": that model's float twin
TOOLS = Path(__file__).resolve().parent


CLOCK = time.perf_counter  # --cpu-time: time.thread_time


def median_ms(fn, runs: int) -> float:
    for _ in range(5):
        fn()
    times = []
    for _ in range(runs):
        t0 = CLOCK()
        fn()
        times.append(CLOCK() - t0)
    return statistics.median(times) * 1e3


def export_key(source: Path) -> str:
    """12 hex digits naming an export of ``source``: its sha256 and the code that imports and exports it."""
    import volvox.formats
    from volvox.hub import sha256_file

    h = hashlib.sha256(sha256_file(source).encode())
    code = [TOOLS / t for t in ("tflite_writer.py", "export_tflite.py", "float_twin.py")]
    for path in code + sorted(Path(volvox.formats.__file__).parent.glob("*.py")):
        h.update(path.read_bytes())
    return h.hexdigest()[:12]


def exported(name: str) -> tuple[str, str]:
    """(what volvox loads, the .tflite file the TFLite peer runs) of a row with an exported peer,
    built into the volvox cache on first use."""
    from volvox.hub import cache_dir, resolve_model_file

    sys.path.insert(0, str(TOOLS))
    source = name.removesuffix(TWIN)
    folder = cache_dir() / source / "exports"
    key = export_key(resolve_model_file(source))
    if name.endswith(TWIN):
        from float_twin import build_float_twin

        blueprint, tflite = folder / f"float-twin-{key}", folder / f"float-twin-{key}.tflite"
        if not (blueprint.is_dir() and tflite.is_file()):
            build_float_twin(source, blueprint, tflite)
            prune(folder, "float-twin-", key)
        return str(blueprint), str(tflite)
    from export_tflite import export_model

    tflite = folder / f"{name}-{key}.tflite"
    if not tflite.is_file():
        export_model(name, tflite)
        prune(folder, f"{name}-", key)
    return name, str(tflite)


def prune(folder: Path, prefix: str, key: str) -> None:
    """Delete the exports in ``folder`` named ``prefix``<another key>: builds of older code or sources."""
    import shutil

    for old in folder.glob(prefix + "*"):
        if old.name.removeprefix(prefix).split(".")[0] != key:
            if old.is_dir():
                shutil.rmtree(old)
            else:
                old.unlink()


def random_feeds(inputs) -> dict:
    """Seeded random arrays for graph inputs (symbolic dims as 1): floats in [-1, 1), integers in [0, 4)."""
    import numpy as np

    rng = np.random.default_rng(0)
    feeds = {}
    for spec in inputs:
        shape = [d if isinstance(d, int) else 1 for d in spec.shape]
        dtype = np.dtype(spec.dtype)
        feeds[spec.name] = (rng.uniform(-1, 1, shape).astype(dtype) if dtype.kind == "f"
                            else rng.integers(0, 4, shape).astype(dtype))
    return feeds


def tflite_peer(path: str, threads: int, x):
    """A call running the TFLite interpreter (default resolver: XNNPACK) on ``x``."""
    from ai_edge_litert.interpreter import Interpreter

    it = Interpreter(model_path=path, num_threads=threads)
    it.allocate_tensors()
    idx = it.get_input_details()[0]["index"]

    def peer():
        it.set_tensor(idx, x)
        it.invoke()
    return peer


def bench_one(name: str, threads: int, runs: int) -> dict:
    """Time volvox and the model's peers on one input, in this process."""
    import numpy as np

    import volvox
    from volvox.hub import resolve_model_file
    from volvox.tasks.image import preprocess

    sys.path.insert(0, str(TOOLS.parent / "tests" / "support"))
    from vision_helpers import sample_image, text_line

    path = name if name.endswith(".onnx") and Path(name).is_file() else str(resolve_model_file(name.removesuffix(TWIN)))
    target, export = exported(name) if name.endswith(TWIN) or path.endswith(".pth") else (name, None)
    model = volvox.load(target, threads=threads)
    if "preprocess" in model.metadata:
        image = text_line("The quick brown fox 2026") if name == "pp-ocrv4-rec" else sample_image("astronaut")
        x = preprocess(image, model.metadata["preprocess"]).tensor
        feeds = {model.graph.inputs[0].name: x}
    else:
        feeds = random_feeds(model.graph.inputs)
        x = next(iter(feeds.values()))
    peers = []
    if path.endswith(".onnx"):
        import onnxruntime as ort

        opts = ort.SessionOptions()
        opts.intra_op_num_threads = threads
        sess = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
        peers.append(("onnxruntime", lambda: sess.run(None, feeds)))
    elif path.endswith(".pth"):
        import torch
        from efficientnet_lite_pytorch import EfficientNet

        torch.set_num_threads(threads)
        net = EfficientNet.from_name("efficientnet-lite0")
        net.load_state_dict(torch.load(path, weights_only=True))
        net.eval()
        xt = torch.from_numpy(np.ascontiguousarray(x.transpose(0, 3, 1, 2)))

        def torch_peer():
            with torch.no_grad():
                net(xt)
        peers.append(("torch", torch_peer))
    if export is not None or path.endswith(".tflite"):
        peers.append(("tflite-xnnpack", tflite_peer(export or path, threads, x)))
    from volvox.ops.context import RunContext

    solo = []  # (warm-ups + runs,) whether the pacer sent that volvox run to one thread

    def run_ours():
        plan = model._plan.plan if model._plan is not None else None  # (lowered by the first run)
        solo.append(threads > 1 and plan is not None and plan.pacer.solo_runs > 0)
        model.run(feeds)
    ours = median_ms(run_ours, runs)
    per_op = median_ms(lambda: model.executor.run(RunContext(), feeds), runs)
    timed = [(peer_name, median_ms(peer, runs)) for peer_name, peer in peers]
    return {"model": name, "threads": threads, "volvox_ms": round(ours, 3), "per_op_ms": round(per_op, 3),
            "plan": model._plan is not None and model._plan.plan is not None, "solo_runs": sum(solo[-runs:]),
            "input": list(np.shape(x)),
            "peers": [{"peer": p, "peer_ms": round(t, 3), "ratio": round(ours / t, 2)} for p, t in timed]}


def print_int8_vs_fp32(results: dict) -> None:
    """int8 ms / fp32 ms in volvox and in XNNPACK for every (model, threads) whose float twin also ran."""
    pairs = [(key, results[(key[0] + TWIN, key[1])]) for key in results if (key[0] + TWIN, key[1]) in results]
    if not pairs:
        return
    print("\nint8 vs fp32 on the same network: int8 ms / fp32 ms (below 1.0: the int8 path is faster)")
    print(f"{'model':<28}{'threads':>8}{'volvox int8':>13}{'fp32':>8}{'ratio':>7}"
          f"{'xnnpack int8':>14}{'fp32':>8}{'ratio':>7}")
    for (name, n), r32 in pairs:
        r8 = results[(name, n)]
        x8, x32 = (next(p["peer_ms"] for p in r["peers"] if p["peer"] == "tflite-xnnpack") for r in (r8, r32))
        v8, v32 = r8["volvox_ms"], r32["volvox_ms"]
        print(f"{name:<28}{n:>8}{v8:>13.3f}{v32:>8.3f}{v8 / v32:>7.2f}{x8:>14.3f}{x32:>8.3f}{x8 / x32:>7.2f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=50)
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--models", nargs="+", default=list(MODELS))
    ap.add_argument("--cpu-time", action="store_true",
                    help="time the calling thread's CPU time, not wall time (--threads 1 only: every runtime then "
                         "computes on that thread; on a loaded machine the time other processes take drops out)")
    ap.add_argument("--child", nargs=2, metavar=("MODEL", "THREADS"), help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.cpu_time:
        if not a.child and a.threads != [1]:
            ap.error("--cpu-time times one thread: use it with --threads 1")
        global CLOCK
        CLOCK = time.thread_time
    if a.child:
        print(json.dumps(bench_one(a.child[0], int(a.child[1]), a.runs)))
        return
    print(f"load average: {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs (numbers mean little when it is high)")
    print(f"{'model':<28}{'threads':>8}{'volvox ms':>11}{'plan':>6}{'per-op ms':>11}"
          f"{'peer':>16}{'peer ms':>10}{'ratio':>8}{'solo':>8}")
    results = {}
    for name in a.models:
        for n in a.threads:
            env = dict(os.environ, OPENBLAS_NUM_THREADS=str(n), OMP_NUM_THREADS=str(n), MKL_NUM_THREADS=str(n))
            proc = subprocess.run([sys.executable, __file__, "--runs", str(a.runs), "--child", name, str(n)]
                                  + ["--cpu-time"] * a.cpu_time, env=env, capture_output=True, text=True)
            if proc.returncode != 0:
                print(f"{name:<28}{n:>8}  failed: {proc.stderr.strip().splitlines()[-1:]}")
                continue
            r = results[(name, n)] = json.loads(proc.stdout.strip().splitlines()[-1])
            solo = f"{r['solo_runs']}/{a.runs}" if n > 1 else "-"
            for p in r["peers"]:
                print(f"{name:<28}{n:>8}{r['volvox_ms']:>11.2f}{'yes' if r['plan'] else 'no':>6}{r['per_op_ms']:>11.2f}"
                      f"{p['peer']:>16}{p['peer_ms']:>10.3f}{p['ratio']:>8.2f}{solo:>8}")
    print_int8_vs_fp32(results)


if __name__ == "__main__":
    main()
