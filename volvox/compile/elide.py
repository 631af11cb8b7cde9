"""Alias elision: nodes that would only copy or re-describe a tensor disappear; readers use the original."""

from __future__ import annotations

import dataclasses

from volvox.ir.graph import Graph


def elide_noop_reshapes(graph: Graph, weights: dict) -> tuple[Graph, dict]:
    """Drop reshapes whose output spec equals their input's: readers use the input directly."""
    rename: dict[str, str] = {}
    nodes = []
    for node in graph.nodes:
        node = dataclasses.replace(node, inputs={p: rename.get(t, t) for p, t in node.inputs.items()})
        if node.op == "reshape" and node.outputs["y"] not in graph.outputs:
            src, out = graph.specs[node.inputs["x"]], graph.specs[node.outputs["y"]]
            if src.shape == out.shape and src.dtype == out.dtype:
                rename[node.outputs["y"]] = node.inputs["x"]
                continue
        nodes.append(node)
    return Graph(list(graph.inputs), dict(graph.weights), nodes, list(graph.outputs)), weights
