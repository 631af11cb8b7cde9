"""The float32 twin of an int8 TFLite model: the same network, its weights dequantized.

    python tools/float_twin.py MODEL OUT_DIR [--tflite OUT.tflite]    # e.g. mltk-person-detection

No float version of the MLTK person detector ships, so "is int8 faster than fp32 on the same
network" needs one made from the int8 file. ``float_twin`` rewrites the int8 volvox graph (as
``volvox.load(..., optimize=False)`` builds it) node by node:

    quantize / dequantize       dropped (float activations flow straight through)
    qconv2d -> conv2d           W = w_q * s_w (per output channel), b = b_q * s_in * s_w
    qlinear -> linear           same
    qavg_pool2d -> avg_pool2d   same window
    qsoftmax -> softmax         same beta
    float nodes (reshape ...)   kept

where a float activation is s * (q - zero_point) for its tensor's (scale, zero point) from the
.tflite file, and s_w = M * s_out / s_in comes from each channel's requantization multiplier
M = multiplier * 2**(shift - 31) = s_in * s_w / s_out (exact to the 31-bit multiplier). An int8
clamp becomes the float activation it encodes: a lower bound at the zero point is a ReLU (the
int8 tensor cannot hold a negative value either way), an upper bound at 6.0 (within half a step)
a ReLU6; clamps at the int8 limits are saturation, not activations, and are dropped. Any other
clamp or op raises UnsupportedError naming the node. (An int8 average pool keeps its input's scale
and zero point, so its clamp to the int8 range cannot bite: no activation.) The twin is written as a blueprint
(``volvox.load(OUT_DIR)``) and, with --tflite, as a .tflite file through tools/export_tflite.py.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np
from volvox.ops import validate

sys.path.insert(0, str(Path(__file__).resolve().parent))
from export_tflite import export_tflite, write_atomically  # noqa: E402

from volvox.errors import UnsupportedError  # noqa: E402
from volvox.ir.graph import Graph, Node, TensorSpec  # noqa: E402
from volvox.formats.flatbuffers import root  # noqa: E402
from volvox.formats.tflite import TFLiteError, _Importer, _Tensor  # noqa: E402
from volvox.ops.int8 import INT8_MAX, INT8_MIN  # noqa: E402


def tflite_quantization(path: str | os.PathLike) -> dict[str, tuple[float, int]]:
    """(scale, zero point) of every per-tensor quantized activation of a .tflite file, by volvox tensor name."""
    path = str(path)
    file = Path(path).read_bytes()
    model = root(file, path, TFLiteError)
    buffers = model.tables(4, "buffers")
    tensors = [_Tensor(t, i, buffers, file, path)
               for i, t in enumerate(model.tables(2, "subgraphs")[0].tables(0, "subgraphs[0].tensors"))]
    names = _Importer(path, tensors).names  # the names read_tflite gives the graph's tensors
    return {names[t.index]: t.qparams() for t in tensors if t.data is None and t.scale.size == 1}


def _activation(node: Node, scale: float, zero_point: int) -> str:
    """The float activation an int8 node's [act_min, act_max] clamp encodes."""
    lo_q, hi_q = int(node.params.get("act_min", INT8_MIN)), int(node.params.get("act_max", INT8_MAX))
    lo, hi = scale * (lo_q - zero_point), scale * (hi_q - zero_point)
    relu = lo == 0
    relu6 = relu and abs(hi - 6.0) <= scale / 2
    if not (relu or (lo < 0 and lo_q == INT8_MIN)) or not (relu6 or hi_q == INT8_MAX):
        raise UnsupportedError(f"node {node.id!r} ({node.op}): the clamp [{lo:g}, {hi:g}] is no float activation "
                               "(ReLU, ReLU6 or none)")
    return "relu6" if relu6 else "relu" if relu else "none"


def float_twin(graph: Graph, weights: dict[str, Any],
               quant: dict[str, tuple[float, int]]) -> tuple[Graph, dict[str, np.ndarray]]:
    """The validated float32 graph and weights of int8 ``graph``; ``quant``: tensor name -> (scale, zero point)."""
    alias: dict[str, str] = {}  # a dropped (de)quantize node's output -> the float tensor it stands for
    for node in graph.nodes:
        if node.op in ("quantize", "dequantize"):
            alias[node.outputs["y"]] = alias.get(node.inputs["x"], node.inputs["x"])
    keep = {alias[o]: o for o in graph.outputs if o in alias}  # graph outputs keep their names

    def name(t: str) -> str:
        t = alias.get(t, t)
        return keep.get(t, t)

    def qparams(node: Node, t: str) -> tuple[float, int]:
        if t not in quant:
            raise UnsupportedError(f"node {node.id!r} ({node.op}): no per-tensor scale for its tensor {t!r}")
        return quant[t]

    for spec in graph.inputs:
        if spec.dtype != "float32":
            raise UnsupportedError(f"graph input {spec.describe()}: the float twin needs float32 inputs")
    nodes: list[Node] = []
    out_w: dict[str, np.ndarray] = {}
    for node in graph.nodes:
        p, x, y = node.params, node.inputs.get("x"), node.outputs.get("y")
        if node.op in ("quantize", "dequantize"):
            continue
        if node.op in ("qconv2d", "qlinear"):
            (s_in, _), (s_out, zp_out) = qparams(node, x), qparams(node, y)
            w_q = weights[node.inputs["weight"]]                                          # (out, ...) int8
            m = (weights[node.inputs["multiplier"]].astype(np.float64)
                 * 2.0 ** (weights[node.inputs["shift"]].astype(np.float64) - 31))        # (out,) or (1,)
            s_w = np.broadcast_to(m * s_out / s_in, w_q.shape[:1])                        # (out,)
            inputs = {"x": name(x), "weight": node.inputs["weight"]}
            out_w[inputs["weight"]] = (w_q * s_w.reshape((-1,) + (1,) * (w_q.ndim - 1))).astype(np.float32)
            if "bias" in node.inputs:
                inputs["bias"] = node.inputs["bias"]
                out_w[inputs["bias"]] = (weights[inputs["bias"]] * s_in * s_w).astype(np.float32)   # (out,)
            act = _activation(node, s_out, zp_out)
            if node.op == "qconv2d":
                geometry = {k: p[k] for k in ("strides", "dilations", "pads", "groups") if k in p}
                nodes.append(Node(node.id, "conv2d", inputs, {"y": name(y)}, dict(geometry, activation=act)))
            elif act == "none":
                nodes.append(Node(node.id, "linear", inputs, {"y": name(y)}))
            else:
                raise UnsupportedError(f"node {node.id!r} (qlinear): a fused {act} on a fully connected layer")
        elif node.op == "qavg_pool2d":  # input and output share (scale, zero point): a clamp to the int8 range is a no-op
            full = (p.get("act_min", INT8_MIN), p.get("act_max", INT8_MAX)) == (INT8_MIN, INT8_MAX)
            act = "none" if full else _activation(node, *qparams(node, y))
            window = {k: p[k] for k in ("kernel", "strides", "pads") if k in p}
            nodes.append(Node(node.id, "avg_pool2d", {"x": name(x)}, {"y": name(y)}, dict(window, activation=act)))
        elif node.op == "qsoftmax":
            nodes.append(Node(node.id, "softmax", {"x": name(x)}, {"y": name(y)}, {"beta": p.get("beta", 1.0)}))
        elif node.op == "reshape" or all(graph.specs[t].dtype == "float32" for t in node.inputs.values()):
            nodes.append(Node(node.id, node.op, {k: name(t) for k, t in node.inputs.items()},
                              {k: name(t) for k, t in node.outputs.items()}, dict(p)))
            out_w.update({t: weights[t] for t in node.inputs.values() if t in graph.weights})
        else:
            raise UnsupportedError(f"node {node.id!r} ({node.op}): no float twin for this int8 op")
    twin = Graph(list(graph.inputs), {n: TensorSpec(n, w.shape, w.dtype.name) for n, w in out_w.items()},
                 nodes, list(graph.outputs))
    validate(twin)
    return twin, out_w


def build_float_twin(model: str | os.PathLike, out_dir: str | os.PathLike, tflite: str | os.PathLike | None = None) -> Path:
    """Write the float twin of int8 TFLite ``model`` (a name or .tflite path) as a blueprint at ``out_dir``
    (replacing one there), and as a .tflite file at ``tflite`` when given; returns ``out_dir``."""
    import volvox
    from volvox.convert import _write_atomically, graph_config, source_weights

    with volvox.load(model, optimize=False) as m:
        if not m.source.endswith(".tflite"):
            raise UnsupportedError(f"{m.source}: the float twin needs the int8 .tflite file (for its tensor scales)")
        graph, weights = float_twin(m.graph, source_weights(m), tflite_quantization(m.source))
        metadata = {k: v for k, v in m.metadata.items() if k not in ("format", "inputs")}
        metadata.update(source_format="tflite", float_twin_of=str(model))
    config = json.dumps(graph_config(graph, {}, metadata), indent=1)
    _write_atomically(Path(out_dir), {"config.json": config}, weights, overwrite=True)
    if tflite is not None:
        write_atomically(tflite, export_tflite(graph, weights, f"volvox float twin of {model}"))
    return Path(out_dir)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model")
    ap.add_argument("out_dir")
    ap.add_argument("--tflite")
    a = ap.parse_args()
    print(build_float_twin(a.model, a.out_dir, a.tflite))
