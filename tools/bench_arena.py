"""Prefill speed of the per-op executor with its activation arena on and off, interleaved in one process.

    python tools/bench_arena.py [--model smollm2-135m-instruct] [--threads 1 2] [--reps 5]

For each thread count: the median prefill tok/s of a 512-token prompt (two 256-token chunks,
as generate runs it) and of a 32-token prompt, arena on vs off (``Executor.use_arena``), the
runs alternating so that load on the machine hits both alike.
"""

from __future__ import annotations

import argparse
import statistics
import time

import volvox
from volvox.hub import resolve_model_file

TEXT = ("The history of the city begins with a small settlement on the river, where traders from the north "
        "met farmers from the valleys to exchange grain, wool, salt and tools. ") * 40


def prefill_tok_s(lm, ids: list[int], arena: bool) -> float:
    """Prompt tokens per second of one fresh session's forward over ``ids``."""
    lm.executor.use_arena = arena
    s = lm.new_session()
    t0 = time.perf_counter()
    s.forward(ids)
    return len(ids) / (time.perf_counter() - t0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args()
    path = resolve_model_file(args.model)
    for threads in args.threads:
        with volvox.load(path, threads=threads) as lm:
            ids = lm.tokenizer.encode(TEXT)
            for n in (512, 32):
                prompt = ids[:n]
                for arena in (True, False):  # warm-up: plans, arena, page faults
                    prefill_tok_s(lm, prompt, arena)
                runs = {True: [], False: []}
                for _ in range(args.reps):
                    for arena in (True, False):
                        runs[arena].append(prefill_tok_s(lm, prompt, arena))
                on, off = statistics.median(runs[True]), statistics.median(runs[False])
                print(f"threads={threads} prefill {n:>3} tokens: arena {on:8.1f} tok/s   no arena {off:8.1f} tok/s"
                      f"   ratio {on / off:.3f}   (runs on {[round(r) for r in runs[True]]}, off {[round(r) for r in runs[False]]})")


if __name__ == "__main__":
    main()
