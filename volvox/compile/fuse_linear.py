"""Linear fusions: SwiGLU gate/up into one matmul, and sibling linears (Q/K/V) into one.

Merged weights are the originals' rows stacked (block-quantized rows are
independent, so packed bytes stack too); each output row of the merged matmul
is computed exactly as before, so the results are bit-identical.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import numpy as np

from volvox.ir.graph import Graph, Node, TensorSpec
from volvox.ops.fused import MAX_SPLIT
from volvox.ir.quant_blocks import QuantTensor, StackedQuantTensor


def stack_rows(ws: list) -> Any:
    """Weights (N_i, K) of one dtype stacked into (sum N_i, K) (quantized ones: stacked when first read)."""
    if isinstance(ws[0], QuantTensor):
        return StackedQuantTensor(ws)
    return np.concatenate([np.asarray(w) for w in ws])


class GraphIndex:
    """Producer and consumers of every tensor of a graph."""

    def __init__(self, graph: Graph):
        self.producer: dict[str, Node] = {}
        self.consumers: dict[str, list[Node]] = defaultdict(list)
        for node in graph.nodes:
            for name in node.outputs.values():
                self.producer[name] = node
            for name in node.inputs.values():
                self.consumers[name].append(node)
        self.outputs = set(graph.outputs)

    def sole_consumer(self, tensor: str, node: Node) -> bool:
        """True if ``node`` is the only reader of ``tensor`` and it is not a graph output."""
        return tensor not in self.outputs and self.consumers[tensor] == [node]


def _plain_linear(node: Node | None, graph: Graph) -> bool:
    return (node is not None and node.op == "linear" and "bias" not in node.inputs
            and node.inputs["weight"] in graph.weights)


def _merge(graph: Graph, weights: dict, group: list[Node], new_id: str, out: str) -> tuple[Node, TensorSpec]:
    """One linear node computing ``group``'s outputs side by side; adds the stacked weight."""
    names = [n.inputs["weight"] for n in group]
    merged = "+".join(names)
    weights[merged] = stack_rows([weights[n] for n in names])
    rows = sum(graph.weights[n].shape[0] for n in names)
    spec = TensorSpec(merged, (rows, graph.weights[names[0]].shape[1]), graph.weights[names[0]].dtype)
    return Node(new_id, "linear", {"x": group[0].inputs["x"], "weight": merged}, {"y": out}), spec


def rebuild_graph(graph: Graph, weights: dict, nodes: list[Node], new_specs: dict[str, TensorSpec]) -> tuple[Graph, dict]:
    """A graph over ``nodes`` keeping only the weights they read."""
    specs = {**graph.weights, **new_specs}
    used = {n for node in nodes for n in node.inputs.values()}
    kept = {n: s for n, s in specs.items() if n in used}
    return Graph(list(graph.inputs), kept, nodes, list(graph.outputs)), {n: weights[n] for n in kept}


def fuse_swiglu(graph: Graph, weights: dict) -> tuple[Graph, dict]:
    """mul(silu(x Wg^T), x Wu^T) -> swiglu(x [Wg; Wu]^T): one matmul and one elementwise op."""
    idx, weights, new_specs = GraphIndex(graph), dict(weights), {}
    replaced: dict[str, list[Node]] = {}  # id of the mul node -> its replacement
    dropped: set[str] = set()
    for m in graph.nodes:
        if m.op != "mul":
            continue
        act, up = idx.producer.get(m.inputs["a"]), idx.producer.get(m.inputs["b"])
        if act is None or act.op != "silu" or not idx.sole_consumer(m.inputs["a"], m):
            act, up = idx.producer.get(m.inputs["b"]), idx.producer.get(m.inputs["a"])
        if act is None or act.op != "silu" or not idx.sole_consumer(act.outputs["y"], m):
            continue
        gate = idx.producer.get(act.inputs["x"])
        if not (_plain_linear(gate, graph) and _plain_linear(up, graph)
                and idx.sole_consumer(gate.outputs["y"], act) and idx.sole_consumer(up.outputs["y"], m)
                and gate.inputs["x"] == up.inputs["x"]
                and graph.weights[gate.inputs["weight"]].dtype == graph.weights[up.inputs["weight"]].dtype
                and graph.weights[gate.inputs["weight"]].shape == graph.weights[up.inputs["weight"]].shape):
            continue
        both = m.outputs["y"] + ".gate_up"
        lin, spec = _merge(graph, weights, [gate, up], f"{gate.id}+{up.id}", both)
        new_specs[spec.name] = spec
        replaced[m.id] = [lin, Node(m.id, "swiglu", {"x": both}, {"y": m.outputs["y"]})]
        dropped |= {gate.id, up.id, act.id}
    nodes = [r for n in graph.nodes if n.id not in dropped for r in replaced.get(n.id, [n])]
    return rebuild_graph(graph, weights, nodes, new_specs)


def merge_sibling_linears(graph: Graph, weights: dict) -> tuple[Graph, dict]:
    """Linears reading the same input with weights of one dtype -> one linear_split (one matmul, views out)."""
    weights, new_specs = dict(weights), {}
    groups: dict[tuple, list[Node]] = defaultdict(list)
    for node in graph.nodes:
        if _plain_linear(node, graph):
            w = graph.weights[node.inputs["weight"]]
            groups[(node.inputs["x"], w.dtype, w.shape[1])].append(node)
    replaced: dict[str, list[Node]] = {}
    dropped: set[str] = set()
    for siblings in groups.values():
        for i in range(0, len(siblings) - 1, MAX_SPLIT):
            group = siblings[i:i + MAX_SPLIT]
            if len(group) < 2:
                continue
            lin, spec = _merge(graph, weights, group, "+".join(n.id for n in group), "")
            new_specs[spec.name] = spec
            sizes = [graph.weights[n.inputs["weight"]].shape[0] for n in group]
            outputs = {f"y{j}": n.outputs["y"] for j, n in enumerate(group)}
            replaced[group[0].id] = [Node(lin.id, "linear_split", lin.inputs, outputs, {"sizes": sizes})]
            dropped |= {n.id for n in group[1:]}
    merged = [r for n in graph.nodes if n.id not in dropped for r in replaced.get(n.id, [n])]
    return rebuild_graph(graph, weights, merged, new_specs)
