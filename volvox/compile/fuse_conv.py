"""Conv fusions: a ReLU / ReLU6 after a float conv is applied in the conv's write.

The activation is the same elementwise max/min on the same float32 values,
so the result is bit-identical to running the two nodes.
"""

from __future__ import annotations

import dataclasses

from ..graph import Graph, Node
from .fuse_linear import GraphIndex


def _activation_of(node: Node) -> str | None:
    """'relu' or 'relu6' if ``node`` is one of them (relu, or clip to [0, inf) / [0, 6]), else None."""
    if node.op == "relu":
        return "relu"
    if node.op == "clip" and node.params.get("min") == 0:
        hi = node.params.get("max")
        return "relu" if hi is None else "relu6" if hi == 6 else None
    return None


def fuse_conv_activation(graph: Graph, weights: dict) -> tuple[Graph, dict]:
    """conv2d (no activation) -> relu/relu6 becomes one conv2d with ``activation`` set."""
    idx = GraphIndex(graph)
    fused: dict[str, Node] = {}  # conv id -> conv with the activation, writing the activation's output
    dropped: set[str] = set()
    for act in graph.nodes:
        kind = _activation_of(act)
        conv = idx.producer.get(act.inputs.get("x", ""))
        if (kind is None or conv is None or conv.op != "conv2d" or conv.params.get("activation", "none") != "none"
                or not idx.sole_consumer(conv.outputs["y"], act)):
            continue
        fused[conv.id] = dataclasses.replace(conv, outputs={"y": act.outputs["y"]},
                                             params={**conv.params, "activation": kind})
        dropped.add(act.id)
    nodes = [fused.get(n.id, n) for n in graph.nodes if n.id not in dropped]
    return Graph(list(graph.inputs), dict(graph.weights), nodes, list(graph.outputs)), weights


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
