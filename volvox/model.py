"""Model: a compiled graph with its weights, ready to run; the base of every task class."""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from volvox.compile import compile_graph
from volvox.errors import ClosedError, VolvoxError
from volvox.ir.graph import Graph
from volvox.ops.norm import check_norm_weights
from volvox.ops.context import RunContext
from volvox.runtime.executor import Executor
from volvox.runtime.plan import PlanHook


class Model:
    """A loaded blueprint: ``run({name: array}) -> {name: array}``; close() releases the weights' mmaps."""

    def __init__(self, graph: Graph, weights: dict[str, Any], metadata: dict, source: str,
                 closers: list[Callable[[], None]] = (), reference: bool = False, profile: bool = False,
                 optimize: bool | list[str] = True, device=None):
        self.source_graph = graph  # as loaded, before compiler passes
        check_norm_weights(graph, weights, source)
        passes = None if optimize is True else (optimize or [])
        self.graph, weights, self.compile_report = compile_graph(graph, weights, passes, cpu=device is None)
        self.metadata = metadata
        self.source = source
        self._closers = list(closers)
        self._plan = None  # a PlanHook when the whole graph may run natively (CPU, no profiling)
        if device is None:
            self.executor = Executor(self.graph, weights, reference=reference, profile=profile)
            if not (reference or profile):
                self._plan = PlanHook(self.executor)
        else:  # a GPU backend (volvox/_gpu): same run(ctx, feeds), nodes placed on the device or the CPU
            from volvox.runtime.gpu_executor import GpuExecutor
            self.executor = GpuExecutor(self.graph, weights, device, reference=reference, profile=profile)
            self._closers.insert(0, device.close)
        self._closed = False
        self.load_seconds = 0.0  # set by volvox.load

    @classmethod
    def from_imported(cls, imported, **kw) -> "Model":
        """This task's model of an import (formats.imported.Imported), taking over what it must close."""
        return cls(imported.graph, imported.weights, imported.metadata, imported.source, closers=imported.closers, **kw)

    @property
    def profile(self):
        """Per-op timings accumulated so far (None unless loaded with profile=True)."""
        return self.executor.profile

    def _check_open(self) -> None:
        if self._closed:
            raise ClosedError(f"model {self.source!r} was closed")

    def run(self, feeds: dict[str, Any]) -> dict[str, np.ndarray]:
        """Run the graph once on ``feeds`` (graph input name -> array); returns every graph output."""
        self._check_open()
        try:
            out = None if self._plan is None else self._plan.run(feeds)
            return self.executor.run(RunContext(), feeds) if out is None else out
        except VolvoxError as e:
            raise type(e)(f"{self.source}: {e}") from None

    def weight_bytes(self) -> dict[str, int]:
        """Bytes of weights per dtype / quantization type."""
        out: dict[str, int] = {}
        for (slot, w), spec in zip(self.executor.weight_slots, self.graph.weights.values()):
            out[spec.dtype] = out.get(spec.dtype, 0) + int(w.nbytes)
        return out

    def close(self) -> None:
        """Release the weights (mmaps) and every resource; later calls raise ClosedError."""
        if self._closed:
            return
        self._closed = True
        self.executor = self._plan = None
        for close in self._closers:
            close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
