"""Weight prepacking: weights sealed read-only, conv weights packed into their kernels' panel
layout once, at load, so that no run (the first included) packs anything.

``volvox.cpu.conv_weights`` packs a conv weight and caches the packing for as long as a
read-only weight lives (a writeable one could change, so it is repacked on every call). This
pass hands the executor read-only views of the weights (the arrays it was given are left as
they are) and asks for each conv weight's packing once, through that same cache: the layout
stays the kernels' alone, and every later run (the per-op kernels and the native plans) finds it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from volvox import cpu
from volvox.ir.graph import Graph, Node

PACKED_OPS = ("conv2d", "qconv2d", "dwpw_conv2d", "qdwpw_conv2d")  # the fused pairs: their 1x1 weight


def sealed(w: Any) -> Any:
    """A read-only view of numpy array ``w`` (``w`` itself if already read-only or not an array)."""
    if not isinstance(w, np.ndarray) or not w.flags.writeable:
        return w
    view = w.view()
    view.flags.writeable = False
    return view


def _kernel_layout(node: Node, graph: Graph) -> bool | None:
    """Whether the conv kernels run ``node`` as depthwise (True) or dense (False); None: neither."""
    cout, _, _, cin_g = graph.weights[node.inputs["weight"]].shape
    groups = int(node.params.get("groups", 1))
    if groups == 1:
        return False
    channels = graph.specs[node.inputs["x"]].shape[3]
    return True if groups == cout == channels and cin_g == 1 else None


def prepack_weights(graph: Graph, weights: dict) -> tuple[Graph, dict]:
    """Seal every weight read-only and pack each conv weight once (runs last: earlier passes make new weights)."""
    weights = {name: sealed(w) for name, w in weights.items()}
    for node in graph.nodes:
        if node.op in PACKED_OPS[2:] and node.inputs["dw_weight"] in graph.weights:
            cpu.conv_weights(weights[node.inputs["dw_weight"]], True)  # a fused pair's depthwise conv
        if node.op in PACKED_OPS and node.inputs["weight"] in graph.weights:
            depthwise = _kernel_layout(node, graph)
            if depthwise is not None:
                cpu.conv_weights(weights[node.inputs["weight"]], depthwise)
    return Graph(list(graph.inputs), dict(graph.weights), list(graph.nodes), list(graph.outputs)), weights
