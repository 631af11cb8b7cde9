"""Activation memory of a compiled graph: peak bytes when each tensor is freed after its last reader.

The executor releases every intermediate right after its last reader, so the
peak here is what a run holds at once; ``naive`` is the sum of every
intermediate (what keeping all of them would cost).
"""

from __future__ import annotations

import numpy as np

from ..graph import Graph, TensorSpec

VIEW_OPS = ("output_rows",)  # outputs are views of their input: no new bytes


def tensor_bytes(spec: TensorSpec, dims: dict[str, int]) -> int:
    """Bytes of ``spec`` with its symbolic dims bound by ``dims`` (unbound symbols count as 1)."""
    n = 1
    for d in spec.shape:
        n *= d if isinstance(d, int) else dims.get(d, 1)
    return n * np.dtype(spec.dtype).itemsize


def activation_bytes(graph: Graph, dims: dict[str, int]) -> tuple[int, int]:
    """(peak, naive) bytes of the intermediates of a validated graph for one run."""
    base: dict[str, str] = {}
    for node in graph.nodes:
        if node.op in VIEW_OPS:
            src = node.inputs["x"]
            base[node.outputs["y"]] = base.get(src, src)
    last: dict[str, int] = {}
    for i, node in enumerate(graph.nodes):
        for name in node.inputs.values():
            last[base.get(name, name)] = i
    for name in graph.outputs:
        last[base.get(name, name)] = len(graph.nodes)
    live = peak = naive = 0
    freed_at: dict[int, int] = {}
    for i, node in enumerate(graph.nodes):
        for name in node.outputs.values():
            if name in base:
                continue
            size = tensor_bytes(graph.specs[name], dims)
            naive += size
            live += size
            end = last.get(name, i)
            freed_at[end] = freed_at.get(end, 0) + size
        peak = max(peak, live)
        live -= freed_at.pop(i, 0)
    return peak, naive
