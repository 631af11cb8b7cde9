"""Constant per-channel affines folded into a float conv's weights: y * s + t after a conv (on
its output side), and x * s + t before an unpadded conv (on its input side); one left between
other nodes (DenseNet's pre-activation BatchNorm after a concat) becomes a 1x1 depthwise conv,
one pass over x instead of one per mul and add, which then takes the ReLU after it too.

Paddle's LearnableAffineBlock (PP-OCRv4's backbone) exports as a Mul and an Add of scalar
weights around every activation; the ONNX importer folds BatchNorm, not these. Folding
computes the new weights in float64 once at load; the conv then rounds differently from
the separate ops (float32 rounding, as BatchNorm folding does).
"""

from __future__ import annotations

import numpy as np

from volvox.ir.graph import Graph, Node, TensorSpec
from volvox.compile.fuse_linear import GraphIndex, rebuild_graph

AFFINE_OPS = ("mul", "add")


def channel_constant(graph: Graph, weights: dict, name: str, channels: int) -> np.ndarray | None:
    """Weight ``name`` as a float64 (channels,) vector if it is a float32 constant that varies at
    most along the last (NHWC channel) axis: shape (1, .., 1, 1 or channels); else None."""
    spec = graph.weights.get(name)
    if spec is None or spec.dtype != "float32" or not spec.shape or spec.shape[-1] not in (1, channels) \
            or any(d != 1 for d in spec.shape[:-1]) or len(spec.shape) > 4:
        return None
    return np.broadcast_to(np.asarray(weights[name], np.float64).reshape(-1), (channels,))


def _affine_step(graph: Graph, weights: dict, node: Node, x: str, channels: int) -> np.ndarray | None:
    """The constant that ``node`` (a mul or add of ``x`` and a per-channel constant) applies, else None."""
    if node.op not in AFFINE_OPS or list(node.inputs.values()).count(x) != 1:
        return None
    other = node.inputs["b"] if node.inputs["a"] == x else node.inputs["a"]
    return channel_constant(graph, weights, other, channels)


def _compose(steps: list[tuple[str, np.ndarray]], channels: int) -> tuple[np.ndarray, np.ndarray]:
    """(scale, shift) of a sequence of (op, constant) steps: x -> x * scale + shift."""
    scale, shift = np.ones(channels), np.zeros(channels)
    for op, c in steps:
        if op == "mul":
            scale, shift = scale * c, shift * c
        else:
            shift = shift + c
    return scale, shift


def _new_weight(graph: Graph, weights: dict, specs: dict, base: str, value: np.ndarray) -> str:
    """Add float32 ``value`` as a new weight named after ``base``; returns its name."""
    name, i = base + ".folded", 1
    while name in graph.specs or name in specs:
        name, i = f"{base}.folded{i}", i + 1
    weights[name] = value.astype(np.float32)
    specs[name] = TensorSpec(name, value.shape, "float32")
    return name


def _foldable(node: Node, graph: Graph) -> bool:
    return (node.op == "conv2d" and node.params.get("activation", "none") == "none"
            and node.inputs["weight"] in graph.weights and node.inputs.get("bias", node.inputs["weight"]) in graph.weights)


def fold_conv_output_affine(graph: Graph, weights: dict) -> tuple[Graph, dict]:
    """conv2d -> mul / add by per-channel constants (each the only reader of the one before)
    -> one conv2d with W' = W * s (per output channel), b' = b * s + t."""
    idx, weights, specs = GraphIndex(graph), dict(weights), {}
    replaced: dict[str, Node] = {}
    dropped: set[str] = set()
    for conv in graph.nodes:
        if not _foldable(conv, graph):
            continue
        cout = graph.weights[conv.inputs["weight"]].shape[0]
        out, chain, steps = conv.outputs["y"], [], []
        while out not in idx.outputs and len(idx.consumers[out]) == 1:
            node = idx.consumers[out][0]
            c = _affine_step(graph, weights, node, out, cout)
            if c is None:
                break
            chain.append(node)
            steps.append((node.op, c))
            out = node.outputs["y"]
        if not chain:
            continue
        scale, shift = _compose(steps, cout)
        w = np.asarray(weights[conv.inputs["weight"]], np.float64) * scale[:, None, None, None]  # (cout, kh, kw, cin/g)
        b = (np.asarray(weights[conv.inputs["bias"]], np.float64) if "bias" in conv.inputs else 0.0) * scale + shift
        inputs = {**conv.inputs, "weight": _new_weight(graph, weights, specs, conv.inputs["weight"], w),
                  "bias": _new_weight(graph, weights, specs, conv.inputs.get("bias", conv.id + ".bias"), b)}
        replaced[conv.id] = Node(conv.id, "conv2d", inputs, {"y": out}, dict(conv.params))
        dropped |= {n.id for n in chain}
    nodes = [replaced.get(n.id, n) for n in graph.nodes if n.id not in dropped]
    return rebuild_graph(graph, weights, nodes, specs)


def fold_conv_input_affine(graph: Graph, weights: dict) -> tuple[Graph, dict]:
    """mul / add by per-channel constants (each read only by the next) -> an unpadded conv2d
    -> one conv2d with W'[o, .., i] = W[o, .., i] * s[i], b'[o] = b[o] + sum W[o, .., i] * t[i].
    (With padding the border taps would read zeros, not t: those convs are left alone.)"""
    idx, weights, specs = GraphIndex(graph), dict(weights), {}
    replaced: dict[str, Node] = {}
    dropped: set[str] = set()
    for conv in graph.nodes:
        if not _foldable(conv, graph) or any(int(p) for p in conv.params.get("pads", (0, 0, 0, 0))):
            continue
        cout, kh, kw, cin_g = graph.weights[conv.inputs["weight"]].shape
        groups = int(conv.params.get("groups", 1))
        cin = cin_g * groups
        x, reader, chain, steps = conv.inputs["x"], conv, [], []
        while x not in idx.outputs and idx.consumers[x] == [reader] and idx.producer.get(x) is not None:
            node = idx.producer[x]
            src = next((t for t in node.inputs.values() if t not in graph.weights), None)
            c = None if src is None else _affine_step(graph, weights, node, src, cin)
            if c is None:
                break
            chain.append(node)
            steps.insert(0, (node.op, c))
            x, reader = src, node
        if not chain:
            continue
        scale, shift = _compose(steps, cin)
        channel = (np.arange(cout)[:, None] // (cout // groups)) * cin_g + np.arange(cin_g)  # (cout, cin/g) input channel
        w0 = np.asarray(weights[conv.inputs["weight"]], np.float64)  # (cout, kh, kw, cin/g)
        w = w0 * scale[channel][:, None, None, :]
        b = (np.asarray(weights[conv.inputs["bias"]], np.float64) if "bias" in conv.inputs else 0.0) \
            + np.einsum("ohwi,oi->o", w0, shift[channel])
        inputs = {**conv.inputs, "x": x, "weight": _new_weight(graph, weights, specs, conv.inputs["weight"], w),
                  "bias": _new_weight(graph, weights, specs, conv.inputs.get("bias", conv.id + ".bias"), b)}
        replaced[conv.id] = Node(conv.id, "conv2d", inputs, dict(conv.outputs), dict(conv.params))
        dropped |= {n.id for n in chain}
    nodes = [replaced.get(n.id, n) for n in graph.nodes if n.id not in dropped]
    return rebuild_graph(graph, weights, nodes, specs)


def channel_affine_to_depthwise(graph: Graph, weights: dict) -> tuple[Graph, dict]:
    """A mul and add chain by per-channel constants (each read only by the next, at least a mul and
    an add) on a 4-D float32 NHWC tensor -> one 1x1 depthwise conv2d, weight s, bias t."""
    idx, weights, specs = GraphIndex(graph), dict(weights), {}
    replaced: dict[str, Node] = {}
    dropped: set[str] = set()
    for head in graph.nodes:
        if head.op not in AFFINE_OPS or head.id in dropped:
            continue
        src = next((t for t in head.inputs.values() if t not in graph.weights), None)
        spec = graph.specs.get(src) if src is not None else None
        if spec is None or spec.dtype != "float32" or len(spec.shape) != 4 or not isinstance(spec.shape[3], int):
            continue
        channels, out, chain, steps = spec.shape[3], src, [], []
        node = head
        while True:
            c = _affine_step(graph, weights, node, out, channels)
            if c is None or graph.specs[node.outputs["y"]].shape != spec.shape:
                break
            chain.append(node)
            steps.append((node.op, c))
            out = node.outputs["y"]
            if out in idx.outputs or len(idx.consumers[out]) != 1:
                break
            node = idx.consumers[out][0]
        if len(chain) < 2 or {op for op, _ in steps} != set(AFFINE_OPS):
            continue
        scale, shift = _compose(steps, channels)
        inputs = {"x": src, "weight": _new_weight(graph, weights, specs, head.id + ".scale", scale.reshape(channels, 1, 1, 1)),
                  "bias": _new_weight(graph, weights, specs, head.id + ".shift", shift)}
        replaced[head.id] = Node(head.id, "conv2d", inputs, {"y": out}, {"groups": channels})
        dropped |= {n.id for n in chain[1:]}
    nodes = [replaced.get(n.id, n) for n in graph.nodes if n.id not in dropped]
    return rebuild_graph(graph, weights, nodes, specs)
