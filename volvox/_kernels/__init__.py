"""Compiled CPU kernels (typed Cython: the engine and one module per ISA tier). Use them through :mod:`volvox.cpu`.

libgomp's idle team threads spin GOMP_SPINCOUNT times (300,000 by default) before they sleep;
beside another busy process a spinning thread holds the core its descheduled teammate needs, so
the extension sets 10,000 unless the user set it (docs/internals.md, "Threads", has the
measurements). libgomp reads the variable when it loads, which is when the extension does, so it
is set before that (unless another library loaded libgomp first).
"""

import os

os.environ.setdefault("GOMP_SPINCOUNT", "10000")
