"""Compiled CPU kernels (typed Cython: the engine and one module per ISA tier). Use them through :mod:`volvox.cpu`.

libgomp's idle team threads spin GOMP_SPINCOUNT times (300,000 by default) before they sleep.
When another busy process shares the cores, a spinning thread holds the core its descheduled
teammate needs, so every parallel region waits for a scheduler slice: a 2-thread SmolLM2 32-token
prefill (about 300 regions) took 3.6 s instead of 0.05 s beside another OpenMP process. With
10,000 spins the waiting thread soon sleeps and the scheduler can run the teammate on its core:
0.23 s there (0.10 s with 1,000 spins, which costs 10-20% of prefill on a quiet machine;
10,000 costs nothing measurable; docs/benchmarks.md). libgomp reads the variable when it loads,
which is when the extension does, so it is set before that unless the user set it (or another
library loaded libgomp first).
"""

import os

os.environ.setdefault("GOMP_SPINCOUNT", "10000")
