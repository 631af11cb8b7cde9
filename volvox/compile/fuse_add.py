"""Adds absorbed: a constant bias into the linear before it, and chains of adds into one add_n.

Both keep every float32 sum as it was (the linear adds its bias to its output in place, in
the same order; add_n accumulates left to right, as the chain did), so results are bit-identical.
"""

from __future__ import annotations

import numpy as np

from volvox.ir.graph import Graph, Node, TensorSpec
from volvox.ops.fused import MAX_ADD_N
from volvox.compile.fuse_linear import GraphIndex, rebuild_graph


def _bias_vector(graph: Graph, name: str, out: TensorSpec) -> bool:
    """Whether weight ``name`` is a float32 bias of ``out``: shape (1, ..., 1, N), no more dims than out."""
    spec = graph.weights.get(name)
    return (spec is not None and spec.dtype == "float32" and 1 <= len(spec.shape) <= len(out.shape)
            and spec.shape[-1] == out.shape[-1] and all(d == 1 for d in spec.shape[:-1]))


def fold_linear_bias(graph: Graph, weights: dict) -> tuple[Graph, dict]:
    """linear (no bias) -> add of a constant (N,) vector becomes one linear with that bias
    (importers that split MatMul and Add, e.g. ONNX from Paddle, leave this pattern)."""
    idx, weights, new_specs = GraphIndex(graph), dict(weights), {}
    fused: dict[str, Node] = {}  # linear id -> the linear with the bias, writing the add's output
    dropped: set[str] = set()
    for add in graph.nodes:
        if add.op != "add":
            continue
        for lin_port, bias_port in (("a", "b"), ("b", "a")):
            lin, bias = idx.producer.get(add.inputs[lin_port]), add.inputs[bias_port]
            out = graph.specs[add.outputs["y"]]
            if (lin is None or lin.op != "linear" or "bias" in lin.inputs or lin.id in fused
                    or not idx.sole_consumer(add.inputs[lin_port], add)
                    or graph.specs[lin.outputs["y"]].shape != out.shape or not _bias_vector(graph, bias, out)):
                continue
            if graph.weights[bias].shape != out.shape[-1:]:  # (1, ..., N) -> an (N,) view
                vec = bias + ".vec"
                if vec in graph.specs:
                    continue
                weights[vec] = np.asarray(weights[bias]).reshape(-1)
                new_specs[vec] = TensorSpec(vec, out.shape[-1:], "float32")
                bias = vec
            fused[lin.id] = Node(lin.id, "linear", {**lin.inputs, "bias": bias}, {"y": add.outputs["y"]}, lin.params)
            dropped.add(add.id)
            break
    nodes = [fused.get(n.id, n) for n in graph.nodes if n.id not in dropped]
    return rebuild_graph(graph, weights, nodes, new_specs)


def fuse_add_chains(graph: Graph, weights: dict) -> tuple[Graph, dict]:
    """add(add(a, b), c) ... (each inner sum read only by the next add) -> add_n(a, b, c, ...).

    Only chains: an add absorbs at most one inner add, so add_n's left-to-right sum is the
    chain's own order ((a + b) + c; c + (a + b) is the same float sum)."""
    idx = GraphIndex(graph)
    operands: dict[str, list[str]] = {}  # add id -> the tensors its chain sums, in order
    absorbed: set[str] = set()
    for node in graph.nodes:
        if node.op != "add":
            continue
        a, b = node.inputs["a"], node.inputs["b"]
        operands[node.id] = [a, b]
        for inner_name, leaf in ((a, b), (b, a)):
            inner = idx.producer.get(inner_name)
            if (inner is not None and inner.id in operands and len(operands[inner.id]) < MAX_ADD_N
                    and idx.sole_consumer(inner_name, node)):
                operands[node.id] = operands[inner.id] + [leaf]
                absorbed.add(inner.id)
                break
    nodes = []
    for node in graph.nodes:
        if node.id in absorbed:
            continue
        if len(operands.get(node.id, ())) > 2:
            node = Node(node.id, "add_n", {f"x{i}": t for i, t in enumerate(operands[node.id])}, dict(node.outputs))
        nodes.append(node)
    return Graph(list(graph.inputs), dict(graph.weights), nodes, list(graph.outputs)), weights
