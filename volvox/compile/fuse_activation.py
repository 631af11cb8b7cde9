"""Activation folding: an activation whose input has no other reader is applied by the node
that produces that input, in its own output buffer.

conv2d keeps its op and takes ReLU / ReLU6 as its ``activation`` param (the same clamp on the
same float32 values: bit-identical); a linear becomes ``linear_act`` and a concat ``concat_act``
(ops/fused.py), which apply any of ``FUSED_ACTIVATIONS`` (ops/activation.py).
"""

from __future__ import annotations

import dataclasses
from typing import Callable

from volvox.ir.graph import Graph, Node
from volvox.ops.activation import activation_name
from volvox.compile.fuse_linear import GraphIndex

CONV_ACTIVATIONS = ("relu", "relu6")  # what the conv kernels clamp in their write


def fold_activations(graph: Graph, fold: Callable[[Node, str, Graph], Node | None]) -> Graph:
    """Each activation node whose input's only reader it is, offered to that input's producer:
    ``fold(producer, activation name, graph)`` returns the producer computing the activation too
    (writing the activation's output), or None to leave both nodes as they are."""
    idx = GraphIndex(graph)
    fused: dict[str, Node] = {}  # producer id -> the producer with the activation folded in
    dropped: set[str] = set()
    for act in graph.nodes:
        kind = activation_name(act.op, act.params)
        src = idx.producer.get(act.inputs.get("x", ""))
        if kind is None or src is None or list(src.outputs.values()) != [act.inputs["x"]] \
                or not idx.sole_consumer(act.inputs["x"], act):
            continue
        node = fold(src, kind, graph)
        if node is not None:
            fused[src.id] = dataclasses.replace(node, outputs={"y": act.outputs["y"]})
            dropped.add(act.id)
    nodes = [fused.get(n.id, n) for n in graph.nodes if n.id not in dropped]
    return Graph(list(graph.inputs), dict(graph.weights), nodes, list(graph.outputs))


def fuse_conv_activation(graph: Graph, weights: dict) -> tuple[Graph, dict]:
    """conv2d (no activation) -> relu / relu6 becomes one conv2d with ``activation`` set."""
    def fold(conv: Node, kind: str, g: Graph) -> Node | None:
        if conv.op != "conv2d" or conv.params.get("activation", "none") != "none" or kind not in CONV_ACTIVATIONS:
            return None
        return dataclasses.replace(conv, params={**conv.params, "activation": kind})
    return fold_activations(graph, fold), weights


def fuse_linear_activation(graph: Graph, weights: dict) -> tuple[Graph, dict]:
    """linear -> activation (relu, relu6, sigmoid, silu, gelu, hard_swish) becomes one linear_act."""
    def fold(lin: Node, kind: str, g: Graph) -> Node | None:
        if lin.op != "linear":
            return None
        return Node(lin.id, "linear_act", dict(lin.inputs), dict(lin.outputs), {**lin.params, "activation": kind})
    return fold_activations(graph, fold), weights


def fuse_add_activation(graph: Graph, weights: dict) -> tuple[Graph, dict]:
    """add / add_n (float32) -> activation (a residual block's ReLU) becomes one add_n with
    ``activation`` set, applied to the sum in its own buffer."""
    def fold(add: Node, kind: str, g: Graph) -> Node | None:
        if add.op not in ("add", "add_n") or "activation" in add.params or \
                g.specs[add.outputs["y"]].dtype != "float32":
            return None
        inputs = {"x0": add.inputs["a"], "x1": add.inputs["b"]} if add.op == "add" else dict(add.inputs)
        return Node(add.id, "add_n", inputs, dict(add.outputs), {**add.params, "activation": kind})
    return fold_activations(graph, fold), weights


def fuse_concat_activation(graph: Graph, weights: dict) -> tuple[Graph, dict]:
    """concat -> activation (e.g. a detection head's sigmoid) becomes one concat_act, which writes
    each input's activation straight into its slice of the output."""
    def fold(cat: Node, kind: str, g: Graph) -> Node | None:
        if cat.op != "concat" or g.specs[cat.outputs["y"]].dtype != "float32":
            return None
        return Node(cat.id, "concat_act", dict(cat.inputs), dict(cat.outputs), {**cat.params, "activation": kind})
    return fold_activations(graph, fold), weights
