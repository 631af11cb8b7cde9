"""What the graph compiler buys: each model with every pass off and on, in one run.

    python tools/bench_compile.py [--runs 50] [--threads 1] [--models blazeface-short-range ...]

Per model: node count, the first forward after load (packing included when it happens then),
and the median of ``--runs`` forwards after it, for ``optimize=False`` and ``optimize=True``,
interleaved in blocks so that machine load hits both alike.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np

MODELS = ("mltk-person-detection", "blazeface-short-range", "efficientnet-lite0", "pp-ocrv4-rec")
DIMS = {"?": 48, "p2o.DynamicDimension.1": 320}  # PP-OCR: one 48x320 text line
BLOCK = 5


def timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def bench(name: str, runs: int) -> dict:
    """{mode: (nodes, first forward s, median forward s)} for optimize off and on."""
    import volvox

    models = {"off": volvox.load(name, optimize=False), "on": volvox.load(name)}
    rng = np.random.default_rng(0)
    feeds = {s.name: rng.uniform(-1, 1, [d if isinstance(d, int) else DIMS[d] for d in s.shape]).astype(s.dtype)
             for s in models["on"].graph.inputs}
    first = {m: timed(lambda: model.run(feeds)) for m, model in models.items()}
    times = {m: [] for m in models}
    for _ in range(max(1, runs // BLOCK)):
        for m, model in models.items():
            times[m] += [timed(lambda: model.run(feeds)) for _ in range(BLOCK)]
    return {m: (len(models[m].graph.nodes), first[m], statistics.median(times[m])) for m in models}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=50)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--models", nargs="+", default=list(MODELS))
    a = ap.parse_args()
    import volvox.cpu

    volvox.cpu.set_num_threads(a.threads)
    print(f"load average: {os.getloadavg()[0]:.2f} (numbers mean little when it is high)   threads: {a.threads}")
    print(f"{'model':<24}{'nodes off/on':>14}{'first off':>11}{'first on':>10}{'off ms':>9}{'on ms':>8}{'on/off':>8}")
    for name in a.models:
        r = bench(name, a.runs)
        (n0, f0, t0), (n1, f1, t1) = r["off"], r["on"]
        print(f"{name:<24}{f'{n0}/{n1}':>14}{f0 * 1e3:>11.2f}{f1 * 1e3:>10.2f}{t0 * 1e3:>9.2f}{t1 * 1e3:>8.2f}{t1 / t0:>8.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
