"""Decomposed activations recognised as the op they spell, as exporters leave them:
``x * relu6(x + 3) / 6`` (Paddle's hardswish through ONNX) -> hard_swish, whose fast path is
the same four float32 steps (bit-identical) in one node with one temporary, not four nodes
and four buffers; ``x * sigmoid(x)`` (torch.onnx's SiLU) -> silu, one pass over x with no
sigmoid buffer (silu's kernel rounds differently from the two ops: within a few ulp).
"""

from __future__ import annotations

import numpy as np

from volvox.ir.graph import Graph, Node
from volvox.compile.fuse_linear import GraphIndex, rebuild_graph


def _scalar(graph: Graph, weights: dict, name: str) -> float | None:
    """The value of a one-element float32 weight, else None."""
    spec = graph.weights.get(name)
    if spec is None or spec.dtype != "float32" or any(d != 1 for d in spec.shape):
        return None
    return float(np.asarray(weights[name]).reshape(-1)[0])


def _hard_swish(graph: Graph, weights: dict, idx: GraphIndex, div: Node) -> tuple[str, list[Node]] | None:
    """(x, the nodes it replaces) if ``div`` computes mul(x, clip(add(x, 3), 0, 6)) / 6, each
    intermediate read only by the next node."""
    def only(tensor: str, reader: Node, op: str) -> Node | None:
        node = idx.producer.get(tensor)
        return node if node is not None and node.op == op and idx.sole_consumer(tensor, reader) else None

    if div.op != "div" or _scalar(graph, weights, div.inputs["b"]) != 6.0:
        return None
    mul = only(div.inputs["a"], div, "mul")
    if mul is None:
        return None
    for x, c in (mul.inputs["a"], mul.inputs["b"]), (mul.inputs["b"], mul.inputs["a"]):
        clip = only(c, mul, "clip")
        if clip is None or clip.params.get("min") != 0 or clip.params.get("max") != 6:
            continue
        add = only(clip.inputs["x"], clip, "add")
        ins = [] if add is None else list(add.inputs.values())  # [x, 3] or [3, x]
        if ins.count(x) == 1 and _scalar(graph, weights, ins[1 - ins.index(x)]) == 3.0:
            return x, [add, clip, mul, div]
    return None


def recognize_hard_swish(graph: Graph, weights: dict) -> tuple[Graph, dict]:
    """x * relu6(x + 3) / 6 spelled out in four elementwise nodes becomes one hard_swish (float32)."""
    idx = GraphIndex(graph)
    replaced: dict[str, Node] = {}
    dropped: set[str] = set()
    for node in graph.nodes:
        found = _hard_swish(graph, weights, idx, node)
        if found and graph.specs[found[0]].dtype == "float32" \
                and graph.specs[found[0]].shape == graph.specs[node.outputs["y"]].shape:
            x, nodes = found
            replaced[node.id] = Node(node.id, "hard_swish", {"x": x}, dict(node.outputs))
            dropped |= {n.id for n in nodes if n.id != node.id}
    nodes = [replaced.get(n.id, n) for n in graph.nodes if n.id not in dropped]
    return rebuild_graph(graph, weights, nodes, {})


def recognize_silu(graph: Graph, weights: dict) -> tuple[Graph, dict]:
    """mul(x, sigmoid(x)) (either order, the sigmoid read by the mul alone) becomes one silu (float32)."""
    idx = GraphIndex(graph)
    replaced: dict[str, Node] = {}
    dropped: set[str] = set()
    for mul in graph.nodes:
        if mul.op != "mul" or graph.specs[mul.outputs["y"]].dtype != "float32":
            continue
        for x, s in (mul.inputs["a"], mul.inputs["b"]), (mul.inputs["b"], mul.inputs["a"]):
            sig = idx.producer.get(s)
            if sig is not None and sig.op == "sigmoid" and sig.inputs["x"] == x and idx.sole_consumer(s, mul) \
                    and graph.specs[x].shape == graph.specs[mul.outputs["y"]].shape:
                replaced[mul.id] = Node(mul.id, "silu", {"x": x}, dict(mul.outputs))
                dropped.add(sig.id)
                break
    nodes = [replaced.get(n.id, n) for n in graph.nodes if n.id not in dropped]
    return rebuild_graph(graph, weights, nodes, {})
