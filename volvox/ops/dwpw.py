"""A depthwise conv and the 1x1 conv that alone reads it, as one node: ``dwpw_conv2d`` (two
float32 conv2d) and ``qdwpw_conv2d`` (two int8 qconv2d), made by the compiler pass
``fuse_depthwise_pointwise`` (compile/fuse_conv.py).

The native vision plans run such a node as one step whose depthwise output rows stay in a
thread's scratch and never reach memory (runtime/vision_plan.py); the per-op executor and the
references run the two convs in turn, so the node computes exactly what the pair did.

Ports: the 1x1 conv's own (``x`` is the depthwise conv's input), the depthwise conv's prefixed
``dw_``. Params: the 1x1 conv's, with the depthwise conv's under ``"depthwise"``.
"""

from __future__ import annotations

from ..graph import TensorSpec
from . import OpDef, register
from .conv import _conv_infer, conv2d_fast, conv2d_ref
from .quantized import _qconv_infer, qconv2d_fast, qconv2d_ref

# fused op -> (the conv op it pairs, that op's ports after "x")
PAIRED = {"dwpw_conv2d": ("conv2d", ("weight", "bias")),
          "qdwpw_conv2d": ("qconv2d", ("weight", "bias", "multiplier", "shift"))}


def ports(op: str) -> tuple[str, ...]:
    """The fused op's input ports, optional ones marked '?'."""
    conv_ports = tuple(p + "?" if p == "bias" else p for p in PAIRED[op][1])
    return ("x",) + tuple("dw_" + p for p in conv_ports) + conv_ports


def split(op: str, inputs: dict[str, str], params: dict) -> tuple[tuple[dict, dict], tuple[dict, dict]]:
    """((depthwise inputs, params), (1x1 inputs without x, params)) of a fused node's wiring."""
    names = PAIRED[op][1]
    dw = {"x": inputs["x"], **{p: inputs["dw_" + p] for p in names if "dw_" + p in inputs}}
    pw = {p: inputs[p] for p in names if p in inputs}
    return (dw, params["depthwise"]), (pw, {k: v for k, v in params.items() if k != "depthwise"})


def _infer(op: str, conv_infer):
    """The fused op's shape rule: the paired conv's, on the depthwise conv's output spec."""
    def infer(specs, params):
        (dw_in, dw_params), (pw_in, pw_params) = split(op, {p: p for p in specs}, params)
        mid_shape, mid_dtype = conv_infer({p: specs[n] for p, n in dw_in.items()}, dw_params)["y"]
        mid = TensorSpec("depthwise output", tuple(mid_shape), mid_dtype)
        return conv_infer({"x": mid, **{p: specs[n] for p, n in pw_in.items()}}, pw_params)
    return infer


def _pair(conv, n_ports: int):
    """The fused compute function of two ``conv`` calls (ref or fast), n_ports inputs after x each."""
    def run(ctx, p, x, *args):
        dw_args, pw_args = args[:n_ports], args[n_ports:]
        pw_params = {k: v for k, v in p.items() if k != "depthwise"}
        return conv(ctx, pw_params, conv(ctx, p["depthwise"], x, *dw_args), *pw_args)
    return run

register(OpDef("dwpw_conv2d", "conv", ports("dwpw_conv2d"), ("y",), _infer("dwpw_conv2d", _conv_infer),
               _pair(conv2d_ref, 2), _pair(conv2d_fast, 2)))
register(OpDef("qdwpw_conv2d", "quantized", ports("qdwpw_conv2d"), ("y",), _infer("qdwpw_conv2d", _qconv_infer),
               _pair(qconv2d_ref, 4), _pair(qconv2d_fast, 4)))
