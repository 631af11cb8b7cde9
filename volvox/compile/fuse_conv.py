"""Depthwise -> pointwise fusion: a depthwise conv (channel multiplier 1) whose output only a 1x1,
stride-1, unpadded conv of the same kind reads becomes one ``dwpw_conv2d`` / ``qdwpw_conv2d``
node (ops/dwpw.py); then a float32 1x1 conv feeding such a pair alone (an inverted bottleneck's
expand conv) joins it as one ``expand_dwpw_conv2d``. The native vision plans run each as one
step that never stores the middle tensors; everywhere else it computes the convs in turn, bit
for bit what they did.

CPU-only (compile_graph leaves them out for a GPU backend, whose lowering has no such nodes).
An int8 pair needs its channels a multiple of 4: the 1x1 GEMM reads the depthwise rows as its
own, 4 bytes per vpdpbusd lane group.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from volvox.ir.graph import Graph, Node
from volvox.ops.conv import window_params
from volvox.ops.dwpw import EXPANDED, PAIRED
from volvox.compile.fuse_linear import GraphIndex

FUSED_OF = {conv: fused for fused, (conv, _) in PAIRED.items()}  # conv op -> its fused pair op
_DTYPE = {"conv2d": np.float32, "qconv2d": np.int8}


def _weight(node: Node, graph: Graph, weights: dict[str, Any]) -> np.ndarray | None:
    """The node's 4-D weight array of its conv's dtype, else None (not a weight, or packed)."""
    w = weights.get(node.inputs["weight"]) if node.inputs["weight"] in graph.weights else None
    return w if isinstance(w, np.ndarray) and w.ndim == 4 and w.dtype == _DTYPE[node.op] else None


def _pair(dw: Node, pw: Node, graph: Graph, weights: dict[str, Any]) -> bool:
    """Whether ``dw`` -> ``pw`` fuses (``pw`` the only reader of ``dw``'s output: checked by the caller)."""
    dw_w, pw_w = _weight(dw, graph, weights), _weight(pw, graph, weights)
    if dw_w is None or pw_w is None:
        return False
    channels = graph.specs[dw.inputs["x"]].shape[3]
    strides, _, pads = window_params(pw.params)
    # a 1x1 depthwise conv (a per-channel affine: DenseNet-121's pre-activation BatchNorms) pairs
    # when it maps pixels to pixels (float32, stride 1, unpadded): the DWPW step then runs on blocks
    # of pixels, not rows (ops/dwpw.py)
    dw_strides, _, dw_pads = window_params(dw.params)
    pixelwise = dw_w.shape[1:3] == (1, 1) and dw_strides == (1, 1) and dw_pads == (0, 0, 0, 0)
    depthwise = (int(dw.params.get("groups", 1)) == channels == dw_w.shape[0] and dw_w.shape[3] == 1
                 and (dw_w.shape[1:3] != (1, 1) or pixelwise and pw.op == "conv2d"))
    pointwise = (int(pw.params.get("groups", 1)) == 1 and pw_w.shape[1:] == (1, 1, channels)
                 and strides == (1, 1) and pads == (0, 0, 0, 0))
    return isinstance(channels, int) and channels > 1 and depthwise and pointwise and \
        (pw.op == "conv2d" or channels % 4 == 0)


def fuse_depthwise_pointwise(graph: Graph, weights: dict[str, Any]) -> tuple[Graph, dict[str, Any]]:
    """Each fusable depthwise -> 1x1 conv pair becomes one node (keeping the 1x1 conv's id and output)."""
    idx = GraphIndex(graph)
    fused: dict[str, Node] = {}  # 1x1 conv id -> the fused node
    dropped: set[str] = set()
    for pw in graph.nodes:
        dw = idx.producer.get(pw.inputs.get("x", ""))
        if (pw.op not in FUSED_OF or dw is None or dw.op != pw.op or not idx.sole_consumer(pw.inputs["x"], pw)
                or not _pair(dw, pw, graph, weights)):
            continue
        op = FUSED_OF[pw.op]
        inputs = {"x": dw.inputs["x"], **{"dw_" + p: n for p, n in dw.inputs.items() if p != "x"},
                  **{p: n for p, n in pw.inputs.items() if p != "x"}}
        fused[pw.id] = Node(pw.id, op, inputs, dict(pw.outputs), {**pw.params, "depthwise": dict(dw.params)})
        dropped.add(dw.id)
    nodes = [fused.get(n.id, n) for n in graph.nodes if n.id not in dropped]
    return Graph(list(graph.inputs), dict(graph.weights), nodes, list(graph.outputs)), weights


# An expand conv's output of fewer bytes than this stays in memory: each band of rows the fused
# step runs recomputes the expanded rows it shares with the band before, which costs more than a
# smaller tensor's round trip saves (EfficientNet-Lite0 at 224: its 112x112x96 output, 4.8 MB,
# fuses; its 56x56x144 ones, 1.8 MB, measured 3-15% slower fused).
EXPAND_FUSE_BYTES = 2 << 20


def fuse_expand_dwpw(graph: Graph, weights: dict[str, Any]) -> tuple[Graph, dict[str, Any]]:
    """Each float32 1x1, stride-1, unpadded conv whose output only a ``dwpw_conv2d`` reads (and
    is at least EXPAND_FUSE_BYTES) joins it: one ``expand_dwpw_conv2d`` node (ops/dwpw.py)."""
    idx = GraphIndex(graph)
    fused: dict[str, Node] = {}  # dwpw node id -> the fused node
    dropped: set[str] = set()
    for pair in graph.nodes:
        ex = idx.producer.get(pair.inputs.get("x", "")) if pair.op == "dwpw_conv2d" else None
        if ex is None or ex.op != "conv2d" or not idx.sole_consumer(pair.inputs["x"], pair):
            continue
        w, spec = _weight(ex, graph, weights), graph.specs[ex.outputs["y"]]
        strides, _, pads = window_params(ex.params)
        if (w is None or w.shape[1:3] != (1, 1) or int(ex.params.get("groups", 1)) != 1 or strides != (1, 1)
                or pads != (0, 0, 0, 0) or not all(isinstance(d, int) for d in spec.shape)
                or int(np.prod(spec.shape)) * 4 < EXPAND_FUSE_BYTES):
            continue
        inputs = {"x": ex.inputs["x"], **{"ex_" + p: n for p, n in ex.inputs.items() if p != "x"},
                  **{p: n for p, n in pair.inputs.items() if p != "x"}}
        fused[pair.id] = Node(pair.id, EXPANDED, inputs, dict(pair.outputs), {**pair.params, "expand": dict(ex.params)})
        dropped.add(ex.id)
    nodes = [fused.get(n.id, n) for n in graph.nodes if n.id not in dropped]
    return Graph(list(graph.inputs), dict(graph.weights), nodes, list(graph.outputs)), weights
