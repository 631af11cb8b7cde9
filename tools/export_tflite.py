"""Write a float32 volvox graph and its weights as a .tflite file (tensorflow/lite/schema/schema.fbs).

    python tools/export_tflite.py MODEL OUT.tflite     # a model name, model file or blueprint directory

The TFLite interpreter (and its XNNPACK delegate) then runs the network volvox runs, on the same
weights: the peer for models that ship in other formats (EfficientNet-Lite0's PyTorch state dict,
the float twin of the int8 person detector from tools/float_twin.py). The graph exported is the one
``volvox.load(..., optimize=False)`` builds, as ``volvox convert`` writes it: volvox's compiler
passes are its own execution choices (TFLite fuses and packs for itself when the delegate is
applied), and packed weight panels never reach the file.

    volvox op        TFLite (all tensors float32, all shapes static)
    conv2d           CONV_2D (groups 1) or DEPTHWISE_CONV_2D (one group per input channel), relu /
                     relu6 fused; pads equal to TF SAME -> SAME, zeros -> VALID, others -> PAD + VALID
    add              ADD
    avg_pool2d       AVERAGE_POOL_2D, SAME or VALID (both exclude the padding from the count)
    global_avg_pool  AVERAGE_POOL_2D over the whole feature map, VALID
    reshape          RESHAPE (a constant shape)
    linear           FULLY_CONNECTED (keep_num_dims when x is not 2-D)
    softmax          SOFTMAX over the last axis, with beta

These are ops volvox's TFLite importer reads, so the file
loads back into volvox too. Anything else (another op, grouped convs, float16 or quantized weights, symbolic shapes) raises
UnsupportedError naming the node.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from tflite_writer import build_flatbuffer, fb_table, fb_vec, tfl_model, tfl_op, tfl_opcode, tfl_tensor  # noqa: E402

from volvox.errors import UnsupportedError  # noqa: E402
from volvox.ir.graph import Graph, Node  # noqa: E402
from volvox.formats.tflite import (BUILTIN_NAMES, FUSED_ACTIVATIONS, PADDING_SAME, PADDING_VALID,  # noqa: E402
                                     TENSOR_TYPES)
from volvox.ops.conv import same_padding, window_params  # noqa: E402

BUILTIN_CODES = {name: code for code, name in BUILTIN_NAMES.items()}
ACTIVATION_CODES = {name: code for code, name in FUSED_ACTIVATIONS.items()}
TYPE_CODES = {name: code for code, name in TENSOR_TYPES.items()}
# BuiltinOptions union members (schema.fbs)
CONV_OPTIONS, DEPTHWISE_OPTIONS, POOL_OPTIONS, FC_OPTIONS, SOFTMAX_OPTIONS, ADD_OPTIONS, RESHAPE_OPTIONS, \
    PAD_OPTIONS = 1, 2, 5, 8, 9, 11, 17, 22


class _Writer:
    """Collects TFLite tensors, buffers, operator codes and operators for one graph."""

    def __init__(self, graph: Graph, weights: dict[str, Any]):
        self.graph, self.weights = graph, weights
        self.tensors: list = []
        self.index: dict[str, int] = {}   # tensor name -> TFLite tensor index
        self.buffers = [fb_table()]       # buffer 0: the empty sentinel of runtime tensors
        self.codes: dict[int, int] = {}   # builtin code -> operator_codes index
        self.operators: list = []

    def tensor(self, name: str, shape, dtype: str = "float32", data: np.ndarray | None = None) -> int:
        """Index of tensor ``name``, added on first use (a constant one with ``data`` in its own buffer)."""
        if name not in self.index:
            buffer = 0
            if data is not None:
                buffer = len(self.buffers)
                raw = np.ascontiguousarray(data, np.dtype(dtype).newbyteorder("<")).tobytes()
                self.buffers.append(fb_table(fb_vec("B", raw)))
            self.index[name] = len(self.tensors)
            self.tensors.append(tfl_tensor(name, [int(d) for d in shape], TYPE_CODES[dtype], buffer))
        return self.index[name]

    def activation(self, name: str) -> int:
        """Index of the runtime tensor ``name`` (a graph input or a node output)."""
        return self.tensor(name, self.graph.specs[name].shape)

    def weight(self, node: Node, port: str, value: np.ndarray | None = None, suffix: str = "") -> int:
        """Index of the constant behind ``node``'s port (``value`` overrides it, stored as name+suffix)."""
        name = node.inputs[port]
        w = self.weights[name] if value is None else value
        if not isinstance(w, np.ndarray) or w.dtype != np.float32:
            kind = getattr(w, "dtype", type(w).__name__)
            raise UnsupportedError(f"node {node.id!r} ({node.op}): weight {name!r} is {kind}; "
                                   "only float32 weights can be exported")
        return self.tensor(name + suffix, w.shape, data=w)

    def op(self, name: str, ins: list[int], outs: list[int], options_type: int = 0, options=None) -> None:
        """Append operator ``name`` (a builtin op name)."""
        code = self.codes.setdefault(BUILTIN_CODES[name], len(self.codes))
        self.operators.append(tfl_op(code, ins, outs, options_type, options))

    def model(self, description: str) -> bytes:
        """The .tflite bytes."""
        ins = [self.index[s.name] for s in self.graph.inputs]
        outs = [self.index[name] for name in self.graph.outputs]
        codes = [tfl_opcode(code) for code in self.codes]
        return build_flatbuffer(tfl_model(codes, self.tensors, ins, outs, self.operators, self.buffers, description),
                                b"TFL3")[0]


def _fail(node: Node, what: str) -> UnsupportedError:
    return UnsupportedError(f"node {node.id!r} ({node.op}): {what} cannot be expressed in TFLite")


def _activation(node: Node) -> int:
    act = node.params.get("activation", "none")
    if act not in ACTIVATION_CODES:
        raise _fail(node, f"activation {act!r}")
    return ACTIVATION_CODES[act]


def _padding(w: _Writer, node: Node, x: int, k: tuple, strides, dil, pads) -> tuple[int, int]:
    """(TFLite padding code, input index): SAME / VALID, or VALID after an explicit PAD op."""
    _, h, wd, c = w.graph.specs[node.inputs["x"]].shape
    (pt, pl, pb, pr) = pads
    if not any(pads):
        return PADDING_VALID, x
    if (pt, pb) == same_padding(h, k[0], strides[0], dil[0]) and (pl, pr) == same_padding(wd, k[1], strides[1], dil[1]):
        return PADDING_SAME, x
    if node.op != "conv2d":  # a padded pool would count the padding
        raise _fail(node, f"pads {list(pads)} (neither SAME nor VALID)")
    shape = w.graph.specs[node.inputs["x"]].shape
    paddings = np.array([[0, 0], [pt, pb], [pl, pr], [0, 0]], np.int32)         # (4, 2)
    padded = w.tensor(f"{node.id}/padded", (shape[0], h + pt + pb, wd + pl + pr, c))
    w.op("PAD", [x, w.tensor(f"{node.id}/paddings", paddings.shape, "int32", paddings)], [padded], PAD_OPTIONS,
         fb_table())
    return PADDING_VALID, padded


def _conv2d(w: _Writer, node: Node) -> None:
    strides, dil, pads = window_params(node.params)
    groups = int(node.params.get("groups", 1))
    cout, kh, kw, cin_g = w.graph.weights[node.inputs["weight"]].shape
    cin = w.graph.specs[node.inputs["x"]].shape[3]
    depthwise = groups == cin and cin_g == 1 and groups > 1
    if groups != 1 and not depthwise:
        raise _fail(node, f"a grouped convolution (groups={groups}, {cin} input channels)")
    padding, x = _padding(w, node, w.activation(node.inputs["x"]), (kh, kw), strides, dil, pads)
    if depthwise:  # (C*mult, kh, kw, 1) -> TFLite's (1, kh, kw, C*mult)
        filt = w.weight(node, "weight", w.weights[node.inputs["weight"]].transpose(3, 1, 2, 0), "/depthwise")
    else:
        filt = w.weight(node, "weight")
    if "bias" in node.inputs:
        bias = w.weight(node, "bias")
    else:
        bias = w.tensor(f"{node.id}/bias", (cout,), data=np.zeros(cout, np.float32))
    y = w.activation(node.outputs["y"])
    act = _activation(node)
    if depthwise:  # DepthwiseConv2DOptions: padding, stride_w, stride_h, depth_multiplier, activation, dilation w, h
        opts = fb_table(("b", padding), ("i", strides[1]), ("i", strides[0]), ("i", cout // cin), ("b", act),
                        ("i", dil[1]), ("i", dil[0]))
        w.op("DEPTHWISE_CONV_2D", [x, filt, bias], [y], DEPTHWISE_OPTIONS, opts)
    else:  # Conv2DOptions: padding, stride_w, stride_h, activation, dilation w, h
        opts = fb_table(("b", padding), ("i", strides[1]), ("i", strides[0]), ("b", act), ("i", dil[1]), ("i", dil[0]))
        w.op("CONV_2D", [x, filt, bias], [y], CONV_OPTIONS, opts)


def _pool(w: _Writer, node: Node) -> None:
    x = w.graph.specs[node.inputs["x"]]
    if node.op == "global_avg_pool":
        kernel, strides, pads, act = (x.shape[1], x.shape[2]), (1, 1), (0, 0, 0, 0), ACTIVATION_CODES["none"]
    else:
        if node.params.get("count_include_pad", False) and any(window_params(node.params)[2]):
            raise _fail(node, "count_include_pad with padding")
        kernel = tuple(int(k) for k in node.params["kernel"])
        strides, _, pads = window_params(node.params)
        act = _activation(node)
    padding, xi = _padding(w, node, w.activation(node.inputs["x"]), kernel, strides, (1, 1), pads)
    # Pool2DOptions: padding, stride_w, stride_h, filter_width, filter_height, activation
    opts = fb_table(("b", padding), ("i", strides[1]), ("i", strides[0]), ("i", kernel[1]), ("i", kernel[0]), ("b", act))
    w.op("AVERAGE_POOL_2D", [xi], [w.activation(node.outputs["y"])], POOL_OPTIONS, opts)


def _add(w: _Writer, node: Node) -> None:
    ins = [w.weight(node, port) if node.inputs[port] in w.graph.weights else w.activation(node.inputs[port])
           for port in ("a", "b")]
    w.op("ADD", ins, [w.activation(node.outputs["y"])], ADD_OPTIONS, fb_table(("b", ACTIVATION_CODES["none"])))


def _reshape(w: _Writer, node: Node) -> None:
    shape = np.array(w.graph.specs[node.outputs["y"]].shape, np.int32)          # (rank,)
    ins = [w.activation(node.inputs["x"]), w.tensor(f"{node.id}/shape", shape.shape, "int32", shape)]
    w.op("RESHAPE", ins, [w.activation(node.outputs["y"])], RESHAPE_OPTIONS, fb_table(fb_vec("i", shape)))


def _linear(w: _Writer, node: Node) -> None:
    rank = len(w.graph.specs[node.inputs["x"]].shape)
    ins = [w.activation(node.inputs["x"]), w.weight(node, "weight")]
    if "bias" in node.inputs:
        ins.append(w.weight(node, "bias"))
    # FullyConnectedOptions: activation, weights_format, keep_num_dims
    opts = fb_table(("b", ACTIVATION_CODES["none"]), ("b", 0), ("b", int(rank != 2)))
    w.op("FULLY_CONNECTED", ins, [w.activation(node.outputs["y"])], FC_OPTIONS, opts)


def _softmax(w: _Writer, node: Node) -> None:
    rank = len(w.graph.specs[node.inputs["x"]].shape)
    if int(node.params.get("axis", -1)) % rank != rank - 1:
        raise _fail(node, f"softmax over axis {node.params['axis']} (TFLite: the last axis only)")
    opts = fb_table(("f", float(node.params.get("beta", 1.0))))
    w.op("SOFTMAX", [w.activation(node.inputs["x"])], [w.activation(node.outputs["y"])], SOFTMAX_OPTIONS, opts)


EXPORTERS = {"conv2d": _conv2d, "add": _add, "avg_pool2d": _pool, "global_avg_pool": _pool, "reshape": _reshape,
             "linear": _linear, "softmax": _softmax}


def export_tflite(graph: Graph, weights: dict[str, Any], description: str = "volvox export") -> bytes:
    """The .tflite bytes of a validated float32 graph and its weights; UnsupportedError names what cannot be said."""
    w = _Writer(graph, weights)
    for spec in graph.inputs:
        if spec.dtype != "float32" or not all(isinstance(d, int) for d in spec.shape):
            raise UnsupportedError(f"graph input {spec.describe()}: only float32 inputs of static shape can be exported")
        w.activation(spec.name)
    for node in graph.nodes:
        if node.op not in EXPORTERS:
            raise _fail(node, "this op")
        symbolic = [n for n in node.outputs.values() if not all(isinstance(d, int) for d in graph.specs[n].shape)]
        if symbolic:
            raise _fail(node, f"the symbolic shape of {graph.specs[symbolic[0]].describe()}")
        EXPORTERS[node.op](w, node)
    return w.model(description)


def write_atomically(path: str | os.PathLike, data: bytes) -> Path:
    """Write ``data`` to ``path`` through a temporary sibling and a rename: never a partial file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_bytes(data)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def export_model(model: str | os.PathLike, out: str | os.PathLike) -> Path:
    """Export what ``volvox.load(model, optimize=False)`` builds to the .tflite file ``out``."""
    import volvox
    from volvox.convert import source_weights

    with volvox.load(model, optimize=False) as m:
        return write_atomically(out, export_tflite(m.graph, source_weights(m), f"volvox export of {model}"))


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__.split("\n\n")[1])
    print(export_model(sys.argv[1], sys.argv[2]))
