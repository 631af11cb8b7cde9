"""What profiling costs: the per-op executor's time per forward with profiling off and on.

    python tools/bench_profiler.py [--runs 200] [--threads 1] [--models mltk-person-detection ...]

Each model is loaded once; its per-op executor (what ``profile=True`` times node by node;
unprofiled runs may take a native plan instead, see runtime/plan.py) runs with ``profile``
None and with a Profile attached, in alternating blocks so that machine load hits both alike. Prints the median ms per forward of each, their ratio, and the profiler's cost per node
((on - off) / nodes). ``smollm2-decode`` is one SmolLM2 decode step at position 32 through the
per-op executor (the path ``profile=True`` times node by node).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np

MODELS = ("mltk-person-detection", "blazeface-short-range", "pp-ocrv4-rec", "smollm2-decode")
BLOCK = 10  # forwards per block; blocks alternate off / on


def forward_fn(name: str):
    """(model, one forward as a zero-argument function) for a model name or 'smollm2-decode'."""
    import volvox
    from volvox.ops.context import RunContext

    if name == "smollm2-decode":
        lm = volvox.load("smollm2-135m-instruct")
        session = lm.new_session()
        session.forward(list(range(1, 33)))  # a 32-token context
        ctx, feeds = session.ctx, {"tokens": np.array([42], np.int32), "positions": np.array([32], np.int32)}
        ctx.kv.reserve(33)
        ctx.output_rows = "last"

        def step():
            ctx.pos = 32  # rewrite the same cache row each time: constant attention length
            lm.executor.run(ctx, feeds)
        return lm, step
    model = volvox.load(name)
    rng = np.random.default_rng(0)
    dims = {"?": 48, "p2o.DynamicDimension.1": 320}  # PP-OCR: one 48x320 text line
    feeds = {s.name: rng.uniform(-1, 1, [d if isinstance(d, int) else dims[d] for d in s.shape]).astype(s.dtype)
             for s in model.graph.inputs}
    return model, lambda: model.executor.run(RunContext(), feeds)  # the per-op executor, not a native plan


def bench(name: str, runs: int) -> dict:
    """Median seconds per forward with profiling off and on, interleaved in blocks."""
    from volvox.runtime.executor import Profile

    model, fn = forward_fn(name)
    ex = model.executor
    for _ in range(BLOCK):
        fn()
    times = {"off": [], "on": []}
    for _ in range(max(1, runs // BLOCK)):
        for mode in ("off", "on"):
            ex.profile = Profile() if mode == "on" else None
            for _ in range(BLOCK):
                t0 = time.perf_counter()
                fn()
                times[mode].append(time.perf_counter() - t0)
    ex.profile = None
    off, on = (statistics.median(times[m]) for m in ("off", "on"))
    return {"nodes": len(ex.steps), "off": off, "on": on}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=200, help="forwards per mode and model")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--models", nargs="+", default=list(MODELS))
    a = ap.parse_args()
    import volvox.cpu

    volvox.cpu.set_num_threads(a.threads)
    print(f"load average: {os.getloadavg()[0]:.2f} (numbers mean little when it is high)   threads: {a.threads}")
    print(f"{'model':<24}{'nodes':>6}{'off ms':>10}{'on ms':>10}{'on/off':>8}{'us/node':>9}")
    for name in a.models:
        r = bench(name, a.runs)
        print(f"{name:<24}{r['nodes']:>6}{r['off'] * 1e3:>10.3f}{r['on'] * 1e3:>10.3f}{r['on'] / r['off']:>8.3f}"
              f"{(r['on'] - r['off']) / r['nodes'] * 1e6:>9.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
